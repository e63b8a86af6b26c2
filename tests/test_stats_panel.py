"""The statistics panel's text, from snapshots (pure: no app needed)."""

from __future__ import annotations

from dataclasses import replace

from localspec.session.live_stats import StatsSnapshot
from localspec.tui.stats_panel import render_snapshot

DRAFTED = StatsSnapshot(generated=40, acceptance_answer=0.7, acceptance_conversation=0.7, tokens_per_pass=2.1, acceptance_by_position=[0.8, 0.6],
                        recent_acceptance=[0.7], tokens_per_second_now=30.0, tokens_per_second_avg=28.0, plain_tokens_per_second=20.0,
                        speedup=1.4, t_draft_ms=10.0, t_verify_ms=80.0, t_other_ms=10.0, drafter="model", draft_max=4, prompt_tokens=30,
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
    assert "by position 1-32" in text
    rows = [line for line in text.splitlines() if line[:3].strip() in ("1", "21")]
    assert [len(row.split()[1]) for row in rows] == [20, 12]  # one character per position, all 32 of them
    assert rows[0].split()[1][0] == "█" and rows[1].split()[1][-1] == "▁"
    assert all(len(line) <= 27 for line in text.splitlines())  # the panel's width
    eight = render_snapshot(replace(DRAFTED, acceptance_by_position=falling[:8])).plain
    assert eight.count("%\n") >= 8 and "by position\n" in eight  # up to 8: a bar and a figure each
