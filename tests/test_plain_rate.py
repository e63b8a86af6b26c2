"""Issue 46, item 9: the log's "× plain" divided by one plain rate timed at load, which a busy moment could make 0.2 tok/s
for the rest of the server's life. Each answer's own one-token passes now move the baseline to what plain costs now."""

from __future__ import annotations

from dataclasses import replace

import pytest

from localspec.engine.chat import raw_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import StopReason
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.grammar import json_grammar
from localspec.engine.stats import GenerationStats
from localspec.serve.options import ServeOptions
from localspec.serve.state import ServerState
from localspec.session.plain_rate import PASS_WEIGHT, plain_rate_for, plain_steps, speedup, updated_plain_ms
from tests.conftest import run
from tests.schemas import TAGGED


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


@pytest.fixture(scope="module")
def under_a_grammar(tiny) -> GenerationStats:
    """Plain decoding of a tiny target held to TAGGED: every step a one-token pass, each row masked."""
    with Engine(EngineConfig(tiny["target"])) as engine:
        stats = run(engine.plain, raw_prompt_tokens(engine.target, "hello there"),
                    GenerationConfig(max_tokens=120, grammar=engine.target.grammar(json_grammar(TAGGED)))).finished.stats
    assert stats.n_steps > 20 and stats.verify_ms_by_batch[1][0] == stats.n_steps and stats.grammar_rows > stats.n_steps
    assert stats.t_grammar_ms > 0
    return stats


def test_an_answer_under_a_grammar_moves_the_baseline_by_its_unconstrained_step(under_a_grammar):
    """Issue 76, item 5: the baseline is the unconstrained target's step. The same answer under a grammar 5 ms a step slower
    (its wall time with it) must move the baseline exactly as much; its own constrained rate pays the difference instead."""
    stats = under_a_grammar
    extra_ms = 5.0 * stats.n_steps
    slower = replace(stats, t_grammar_ms=stats.t_grammar_ms + extra_ms, predicted_ms=stats.predicted_ms + extra_ms)
    assert slower.python_ms_per_step == pytest.approx(stats.python_ms_per_step + 5.0)  # the grammar's time is Python's
    assert plain_steps(slower) == pytest.approx(plain_steps(stats))
    assert updated_plain_ms(20.0, slower) == pytest.approx(updated_plain_ms(20.0, stats))
    count, ms = stats.verify_ms_by_batch[1]
    assert plain_steps(stats)[1] < ms / count + stats.python_ms_per_step  # the grammar's own time is taken out
    for answer in (stats, slower):  # the rate "× plain" divides by: the baseline plus the answer's grammar per row
        assert plain_rate_for(answer, 20.0) == pytest.approx(1000.0 / (20.0 + answer.grammar_ms_per_row))
        assert speedup(answer, 20.0) == pytest.approx(answer.predicted_per_second * (20.0 + answer.grammar_ms_per_row) / 1000.0)
    assert plain_rate_for(slower, 20.0) < plain_rate_for(stats, 20.0) < 1000.0 / 20.0


def test_without_a_grammar_or_a_baseline(tiny, under_a_grammar):
    with Engine(EngineConfig(tiny["target"])) as engine:
        free = run(engine.plain, raw_prompt_tokens(engine.target, "hello there"), GenerationConfig(max_tokens=30)).finished.stats
    assert free.grammar_rows == 0 and free.grammar_ms_per_row == 0.0
    assert plain_rate_for(free, 20.0) == pytest.approx(50.0) and speedup(free, 20.0) == pytest.approx(free.predicted_per_second / 50.0)
    assert speedup(free, 20.0, tokens_per_second=75.0) == pytest.approx(1.5)  # the app's rate on its own clock
    for stats in (free, under_a_grammar):  # no baseline yet: no rate claimed, whatever the grammar costs
        assert plain_rate_for(stats, 0.0) is None and speedup(stats, 0.0) is None
