"""A plain rate far below what this machine gave the target before is said, not hidden in a "× plain" measured under
the same load (issue 75, item 3): `generate` warns after the answer and `doctor` lists each target's latest rate beside
its best."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localspec.engine.engine import Engine, EngineConfig
from localspec.session import plain_speed
from tests.app_pilot import Setup, ask, local_pair, run_async
from tests.conftest import cli

INFLATED = 1e7  # the record's "best" rewritten to a rate no machine reaches (a tiny model decodes at thousands a second)


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf-home"))
    return env


def _generate(model: Path, env: dict[str, str]):
    return cli("generate", "--target", str(model), "--no-draft", "--raw", "--prompt", "tell me everything", "--max-tokens", "40",
               env=env, timeout=300)


def test_the_record_keeps_the_best_rate_and_the_latest(tiny, tmp_path):
    path = tmp_path / "plain-speed.json"
    with Engine(EngineConfig(tiny["talkative"])) as engine:
        first = plain_speed.remember(engine.target, 50.0, path)  # 20 tok/s
        slower = plain_speed.remember(engine.target, 100.0, path)  # 10 tok/s: half, not yet worth a word
        crawl = plain_speed.remember(engine.target, 500.0, path)  # 2 tok/s
    assert first is not None and (first.last, first.best) == (20.0, 20.0) and not first.slowed
    assert slower is not None and (slower.last, slower.best) == (10.0, 20.0) and not slower.slowed
    assert crawl is not None and (crawl.last, crawl.best) == (2.0, 20.0) and crawl.slowed
    assert "2.0 tok/s, 10% of the 20.0 tok/s" in crawl.note() and "another program" in crawl.note()
    assert plain_speed.recorded(path) == [crawl]
    path.write_text("not json")
    assert plain_speed.recorded(path) == []  # a damaged cache is measured anew, never an error


def test_generate_warns_when_plain_decoding_runs_far_below_this_machines_best_and_doctor_lists_it(tiny, user_env, tmp_path):
    quiet = _generate(tiny["talkative"], user_env)
    assert quiet.returncode == 0, quiet.stderr
    assert "far below" not in quiet.stderr and "warning" not in quiet.stderr  # its own best: nothing to say
    record = tmp_path / "cache" / "localspec" / "plain-speed.json"
    data = json.loads(record.read_text())
    (key,) = data
    data[key]["best"] = INFLATED  # as if this machine once decoded the model this fast, and something now holds it back
    record.write_text(json.dumps(data))

    slowed = _generate(tiny["talkative"], user_env)
    assert slowed.returncode == 0, slowed.stderr
    warning = next(line for line in slowed.stderr.splitlines() if "warning" in line)
    assert f"of the {INFLATED:.1f} tok/s this machine gave it before" in warning and "another program" in warning

    doctor = cli("doctor", env=user_env, timeout=120)
    assert doctor.returncode == 0, doctor.stderr
    assert "Plain decoding here" in doctor.stdout and "talkative.gguf" in doctor.stdout
    assert f"best {INFLATED:.1f}" in doctor.stdout and "far below its best" in doctor.stdout
    assert "CPU in use" in doctor.stdout


@run_async
async def test_the_app_says_when_plain_decoding_runs_far_below_this_machines_best(setup: Setup, tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the record (and the costs) of this test alone
    setup.write(local_pair("tiny", tiny["talkative"], tiny["talkative"]), last_pair="tiny", max_tokens=40, drafter="none")
    app = setup.app()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await ask(pilot, app, "tell me everything")
        assert not [n for n in app._notifications if "tok/s" in n.message]  # its own best: nothing to say
        record = tmp_path / "cache" / "localspec" / "plain-speed.json"
        data = json.loads(record.read_text())
        (key,) = data
        data[key]["best"] = INFLATED
        record.write_text(json.dumps(data))
        await ask(pilot, app, "tell me more")
        said = [n.message for n in app._notifications if "tok/s" in n.message]
    assert len(said) == 1 and f"of the {INFLATED:.1f} tok/s this machine gave it before" in said[0], said
