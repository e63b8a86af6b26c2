"""The user's settings: what the app's settings screen edits, saved as JSON in the config directory.

A bad value costs only its own field: every valid setting is kept, the caller is
told which were dropped, and a file that is not JSON at all is copied aside
(`settings.json.bad`) before anything could overwrite it. A settings file that
cannot be written is said, and the settings still apply for the session.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from localspec import paths
from localspec.engine import defaults
from localspec.engine.drafters import registry
from localspec.engine.errors import SamplingSettingsError
from localspec.errors import LocalspecError, UsageError, os_error_advice
from localspec.machine import rpc
from localspec.session.generation_request import APP_NAMES, Asked, resolve


class SettingsError(LocalspecError):
    """A setting with a value the engine cannot use."""


@dataclass(frozen=True)
class Settings:
    drafter: str = registry.DEFAULT
    draft_max: int | None = None  # None: generation_request.draft_max_for(drafter, the pair's recommendation)
    draft_p_min: float | None = None  # None: the pair's recommendation, else defaults.DRAFT_P_MIN
    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P
    seed: int | None = None
    max_tokens: int | None = None  # None: until the answer ends or the context is full
    n_ctx: int = defaults.N_CTX
    target_gpu_layers: int | None = None  # None: the memory planner decides (localspec.machine.memory_plan)
    draft_gpu_layers: int | None = None
    threads: int | None = None  # None: physical cores
    self_draft_layers: int | None = None  # the self drafter's blocks (None: a quarter of the target's)
    rpc_servers: str | None = None  # HOST:PORT[,...]: ggml-rpc-servers whose devices take the target's layers
    last_pair: str | None = None
    tint_accepted: bool = False  # Markdown by default; Ctrl+T shows the provenance tint

    def validate(self) -> Settings:
        for field in fields(self):
            _check_type(field.name, str(field.type), getattr(self, field.name))
        try:  # what an answer is generated with: the rules every door's requests meet (session/generation_request.py)
            resolve(self.asked, parts=registry.PairParts.before_load(True), context=self.n_ctx, names=APP_NAMES)
        except (UsageError, SamplingSettingsError) as exc:
            raise SettingsError(f"Invalid setting: {exc}") from None
        checks = [
            (self.n_ctx >= defaults.MIN_N_CTX, f"context size must be {defaults.MIN_N_CTX} or more"),
            (self.threads is None or self.threads >= 1, "threads must be 1 or more"),
            (self.self_draft_layers is None or self.self_draft_layers >= 1, "self-draft layers must be 1 or more"),
            (self.rpc_servers is None or isinstance(self.rpc_servers, str), "RPC servers must be text: HOST:PORT[,...]"),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(f"Invalid setting: {message}.")
        if self.rpc_servers:
            try:
                rpc.parse_endpoints(self.rpc_servers)
            except UsageError as exc:
                raise SettingsError(f"Invalid setting: RPC servers: {exc}") from None
        return self

    @property
    def asked(self) -> Asked:
        """What the app asks of each answer (session/generation_request.py resolves it against the loaded pair)."""
        return Asked(drafter=self.drafter, draft_max=self.draft_max, draft_p_min=self.draft_p_min, max_tokens=self.max_tokens,
                     temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p, seed=self.seed)

    def with_changes(self, **changes: Any) -> Settings:
        return replace(self, **changes).validate()

    def generation_dict(self) -> dict[str, Any]:
        """What an answer was generated with, stored beside it."""
        return {k: v for k, v in asdict(self).items() if k not in ("last_pair", "tint_accepted")}


# What each annotation takes, in the words a settings file's reader knows (JSON's, not Python's).
_KINDS = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "float": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "str": (lambda v: isinstance(v, str), "text"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


def _check_type(name: str, annotation: str, value: Any) -> None:
    """A SettingsError for a value of the wrong JSON type (threads 1.5, seed true, last_pair 42), before any rule
    compares it: a wrong type once crashed the app at start and was saved back, so that every start crashed."""
    kind, _, optional = annotation.partition(" | ")
    holds, words = _KINDS[kind]
    if (optional and value is None) or holds(value):
        return
    raise SettingsError(f"Invalid setting: {name.replace('_', ' ')} must be {words}{' or null' if optional else ''}, "
                        f"not {json.dumps(value)}.")


def settings_path() -> Path:
    return paths.config_dir() / "settings.json"


def load_settings(path: Path | None = None) -> tuple[Settings, str | None]:
    """The saved settings, and a note when some could not be used.

    Each field is checked on its own: one bad value (a hand edit, a newer localspec) costs that field, not the
    rest; the last pair, the drafter and everything valid are kept. The file itself is left as it is (the next
    save rewrites it with the good fields); where it cannot be read at all, a copy is kept beside it.
    """
    path = path or settings_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Settings(), None
    except OSError as exc:
        return Settings(), f"{path} could not be read ({exc}); the defaults apply for now."
    try:
        text, damage = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:  # a stray byte costs the field it sits in, not the file
        text = raw.decode("utf-8", errors="replace")
        damage = f"{path} has a byte that is not UTF-8 text (at offset {exc.start}); the fields around it were read as they are."
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, found {type(data).__name__}")
    except ValueError as exc:
        return Settings(), f"{path} is not valid JSON ({exc}); the defaults apply.{_keep_copy(path, raw)}"
    settings, bad = Settings(), []
    known = {f.name for f in fields(Settings)}
    for name, value in data.items():
        if name not in known:
            continue  # a setting of another localspec version: ignored, and dropped at the next save
        try:
            settings = settings.with_changes(**{name: value})
        except SettingsError as exc:
            bad.append(f"{name} = {json.dumps(value)} ({str(exc).removeprefix('Invalid setting: ').rstrip('.')})")
    notes = [damage + _keep_copy(path, raw)] if damage else []
    if bad:
        notes.append(f"In {path}, these settings were invalid and the defaults replace them: {'; '.join(bad)}. Every other setting was kept.")
    return settings, " ".join(notes) or None


def _keep_copy(path: Path, raw: bytes) -> str:
    """Keep what the user saved beside the file, byte for byte, so the next save cannot lose it; the note's tail says where."""
    aside = path.with_suffix(".json.bad")
    try:
        aside.write_bytes(raw)
    except OSError:
        return ""
    return f" Its text is kept in {aside}."


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write atomically (a crash mid-write never leaves half a file); a clear SettingsError where it cannot be written."""
    path = path or settings_path()
    temporary = path.with_suffix(".json.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
        temporary.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a half-written temporary file, where there is one
            temporary.unlink(missing_ok=True)
        raise SettingsError(f"The settings could not be saved to {path} ({exc.strerror or exc}). They apply until localspec "
                            f"closes; {os_error_advice(exc)}.") from exc
