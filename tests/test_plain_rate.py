"""Issue 46, item 9: the log's "× plain" divided by one plain rate timed at load, which a busy moment could make 0.2 tok/s
for the rest of the server's life. Each answer's own one-token passes now move the baseline to what plain costs now."""

from __future__ import annotations

import pytest

from localspec.engine.chat import raw_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import StopReason
from localspec.engine.generation_config import GenerationConfig
from localspec.serve.options import ServeOptions
from localspec.serve.state import ServerState
from localspec.session.plain_rate import PASS_WEIGHT, updated_plain_ms
from tests.conftest import run


def test_a_baseline_timed_on_a_busy_moment_gives_way_to_the_answers_own_plain_passes(tiny, capsys):
    with Engine(EngineConfig(tiny["target"])) as engine:
        finished = run(engine.plain, raw_prompt_tokens(engine.target, "hello there"), GenerationConfig(max_tokens=60)).finished
    stats = finished.stats
    count, ms = stats.verify_ms_by_batch[1]
    assert count == stats.n_steps > 20  # every step a one-token pass
    step_ms = ms / count + stats.python_ms_per_step
    busy_at_load = 5000.0  # 0.2 tok/s
    state = ServerState(ServeOptions(), plain_ms_per_token=busy_at_load)
    state.finish("completion", finished, task=1)
    left = (1 - PASS_WEIGHT) ** count
    assert state.plain_ms_per_token == pytest.approx(busy_at_load * left + step_ms * (1 - left))
    assert abs(state.plain_ms_per_token - step_ms) < 0.1 * busy_at_load  # 59 passes: the busy figure is nearly gone
    line = capsys.readouterr().err
    assert "× plain" in line and finished.reason is StopReason.MAX_TOKENS


def test_an_answer_without_one_token_passes_leaves_the_baseline(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        stats = run(engine.speculative, raw_prompt_tokens(engine.target, "hello there"), GenerationConfig(max_tokens=20, draft_max=3)).finished.stats
    stats.verify_ms_by_batch.pop(1, None)
    assert updated_plain_ms(12.5, stats) == 12.5
    assert updated_plain_ms(0.0, stats) == 0.0
