"""The statistics panel's text, from snapshots (pure: no app needed), hand-made or from real answers' statistics."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from localspec.engine.chat import raw_prompt_tokens
from localspec.engine.drafters.auto.choice import Source
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.grammar import json_grammar
from localspec.engine.stats import SourceShare
from localspec.session.live_stats import LiveStats, StatsSnapshot
from localspec.session.plain_rate import updated_plain_ms
from localspec.tui.stats_panel import render_snapshot
from tests.conftest import run
from tests.schemas import TAGGED

DRAFTED = StatsSnapshot(generated=40, acceptance_answer=0.7, acceptance_conversation=0.7, tokens_per_pass=2.1, acceptance_by_position=[0.8, 0.6],
                        recent_acceptance=[0.7], tokens_per_second_now=30.0, tokens_per_second_avg=28.0, plain_tokens_per_second=20.0,
                        speedup=1.4, t_draft_ms=10.0, t_verify_ms=80.0, t_other_ms=10.0, drafter="model", draft_max=4, by_source=[], prompt_tokens=30,
                        context_used=70, n_ctx=4096)


def test_an_answer_that_drafted_nothing_shows_no_speedup_over_plain():
    """Issue 47: "vs plain 1.16×" was shown for an answer run as plain decoding (the ratio of two plain rates: noise)."""
    assert "vs plain" in render_snapshot(DRAFTED).plain and "1.40×" in render_snapshot(DRAFTED).plain
    plain = replace(DRAFTED, acceptance_answer=None, acceptance_by_position=[], drafter="none", draft_max=0, speedup=1.16)
    assert "vs plain" not in render_snapshot(plain).plain and "none (plain)" in render_snapshot(plain).plain


def test_every_drafted_position_is_shown_when_k_passes_eight():
    """Issue 56: the bars stopped at position 8 (a `[:8]` slice); with K up to 32 they read 100% beside "accepted 45.8%"."""
    falling = [1.0 - i / 31 for i in range(32)]  # position 1 always through, position 32 never
    text = render_snapshot(replace(DRAFTED, acceptance_by_position=falling, draft_max=32)).plain
    assert "accepted by pos ▁0% █100%" in text  # what the rows and their marks mean
    rows = [line for line in text.splitlines() if line.startswith("pos ")]
    assert [row.split()[1] for row in rows] == ["1", "21"]  # issue 75: rows read "1" and "21", with nothing to say what of
    assert [len(row.split()[2]) for row in rows] == [20, 12]  # one character per position, all 32 of them
    assert rows[0].split()[2][0] == "█" and rows[1].split()[2][-1] == "▁"
    assert all(len(line) <= 27 for line in text.splitlines())  # the panel's width
    eight = render_snapshot(replace(DRAFTED, acceptance_by_position=falling[:8])).plain
    assert [line.split()[:2] for line in eight.splitlines() if line.startswith("pos ")] == [["pos", str(i)] for i in range(1, 9)]
    assert eight.count("%\n") >= 8 and "accepted by draft position" in eight  # up to 8: a bar and a figure each


AUTO = replace(DRAFTED, drafter="auto", draft_max=32, by_source=[SourceShare(Source.MODEL, 10, 31), SourceShare(Source.NONE, 6, 6),
                                                                  SourceShare(Source.NGRAM, 1, 2)])


def test_autos_choices_are_split_by_source_in_the_panel():
    """Issue 75: the panel read "drafter auto · K=32" with no word of what auto ran: lookup, the draft model or plain."""
    text = render_snapshot(AUTO).plain
    assert "auto · K≤32" in text  # a cap: auto picks K each step
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("auto chose"))
    assert lines[header].split() == ["auto", "chose", "steps", "tokens"]
    assert [line.rsplit(maxsplit=2) for line in lines[header + 1 : header + 4]] == [["draft model", "10", "31"], ["plain", "6", "6"],
                                                                                     ["lookup", "1", "2"]]
    assert all(len(line) <= 27 for line in lines)


def test_an_auto_answer_that_drafted_nothing_says_it_decoded_plainly():
    plain = replace(AUTO, acceptance_answer=None, acceptance_by_position=[], by_source=[SourceShare(Source.NONE, 39, 39)])
    text = render_snapshot(plain).plain
    assert "auto: plain decoding for\nall 40 tokens" in text and "auto chose" not in text
    assert all(len(line) <= 27 for line in text.splitlines())


def test_a_grammars_forced_text_is_a_source_of_its_own_in_the_panel(tiny):
    """Issue 76: the text a grammar forces is drafted ahead of the drafter's; the panel shows it apart (its tokens, its mask
    time, the acceptance of each source), and its "vs plain" divides by the constrained target's plain rate."""
    with Engine(EngineConfig(tiny["target"], tiny["near"])) as engine:
        prompt = raw_prompt_tokens(engine.target, "hello there")
        for drafter in ("auto", "model"):
            live = LiveStats(engine.target.n_ctx, plain_ms_per_token=2.0)
            answer = run(engine.decoder(drafter), prompt, GenerationConfig(max_tokens=120, draft_max=4,
                                                                           grammar=engine.target.grammar(json_grammar(TAGGED))))
            for event in answer.events:
                live.observe(event)
            stats = answer.finished.stats
            assert json.loads(answer.text) and stats.forced_n_accepted > 0, drafter
            if drafter == "model":  # it drafts its own tokens after the forced text; auto may price them out on this machine
                assert stats.draft_n > stats.forced_n
            snapshot = live.snapshot(stats, len(prompt) + stats.predicted_n)
            assert snapshot.plain_tokens_per_second == pytest.approx(1000 / (updated_plain_ms(2.0, stats) + stats.grammar_ms_per_row))
            lines = render_snapshot(snapshot).plain.splitlines()
            assert all(len(line) <= 27 for line in lines), lines
            assert f"grammar   {stats.forced_n_accepted} tok forced" in lines
            assert f"          mask {stats.grammar_ms_per_row:.2f} ms/row" in lines
            by_source = lines.index(next(line for line in lines if line.startswith("by source")))
            kept = stats.acceptance_by_source  # the grammar's, then the drafter's own where it drafted any
            assert list(kept)[0] == "grammar" and (drafter in kept) == (stats.draft_n > stats.forced_n)
            assert lines[by_source : by_source + len(kept)] == [f"{'by source' if i == 0 else '':<10}{100 * rate:3.0f}% {source}"
                                                                for i, (source, rate) in enumerate(kept.items())], lines
            if drafter == "auto":  # auto's table holds its own choices: the grammar has its own lines
                header = next(i for i, line in enumerate(lines) if line.startswith("auto chose"))
                table = lines[header + 1 : lines.index(f"grammar   {stats.forced_n_accepted} tok forced")]
                assert table and not any(line.startswith("grammar") for line in table), lines


def test_an_answer_without_a_grammar_shows_no_grammar_lines():
    text = render_snapshot(AUTO).plain
    assert "grammar" not in text and "by source" not in text and "mask" not in text
