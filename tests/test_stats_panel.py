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
