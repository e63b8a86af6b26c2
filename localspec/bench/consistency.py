"""Figures that the bench's own measurements contradict: flagged in the tables, never printed as if they were true.

A busy machine (a build, another benchmark) slows whichever run it overlaps. The bench interleaves its modes so that
this mostly cancels out, but a burst during one run can still make a mode with nothing accepted read 4× plain. Two
rules catch what cannot be true, whatever the machine:

- a mode emits `tokens per pass` tokens for each target pass, and no pass costs less than plain decoding's one-token
  pass, so it cannot beat plain by more than its tokens per pass;
- verifying more tokens in one pass never costs much less than verifying fewer (a 3-token pass timed at a quarter
  of a 1-token one was timed beside something else), though a CPU's kernels do make some sizes cheaper than smaller
  ones (COST_SLACK).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Timer noise between two honest runs stays well inside these; a busy machine's bursts do not.
SPEEDUP_SLACK = 1.15  # × plain may exceed tokens per pass by this factor before it is doubted
# A larger pass may cost this fraction of a smaller one before its timing is doubted: a CPU's kernels favour some sizes
# (on a 2-core Xeon the real Q4_K_M target verified 16 tokens at 3.6 one-token passes and 15 at 4.6, timed apart twice,
# and 0.8 called that quiet machine busy and withheld the ceiling)...
COST_SLACK = 0.6
COST_NOISE_MS = 2.0  # ...or this much less: a tiny model's passes take a fraction of a millisecond, where the scheduler rules
MARK = "!"


def speedup_impossible(speedup: float, tokens_per_pass: float) -> bool:
    """× plain above what the mode's tokens per pass allow (plain itself emits one token per pass)."""
    return speedup > max(1.0, tokens_per_pass) * SPEEDUP_SLACK


def falling_costs(verify_ms: dict[int, float]) -> list[tuple[int, int]]:
    """The (smaller, larger) pass sizes whose larger pass was timed well below the smaller one."""
    sizes = sorted(n for n, ms in verify_ms.items() if ms > 0)
    return [(a, b) for i, a in enumerate(sizes) for b in sizes[i + 1 :]
            if verify_ms[b] < verify_ms[a] * COST_SLACK and verify_ms[a] - verify_ms[b] > COST_NOISE_MS]


@dataclass
class Doubts:
    """The flagged figures of one report, said once at its end."""

    notes: list[str] = field(default_factory=list)

    def speedup(self, where: str, speedup: float, tokens_per_pass: float) -> str:
        """MARK (and a note) where `speedup` cannot be true, else a space: the column keeps its width."""
        if not speedup_impossible(speedup, tokens_per_pass):
            return " "
        self.notes.append(f"{where}: {speedup:.2f}× plain with {tokens_per_pass:.2f} tokens per pass, which allow at most "
                          f"{max(1.0, tokens_per_pass):.2f}×")
        return MARK

    def costs(self, verify_ms: dict[int, float]) -> bool:
        """True (and a note) where the verify-cost table contradicts itself."""
        falling = falling_costs(verify_ms)
        for a, b in falling:
            self.notes.append(f"the verify-cost table: {b} tokens in one pass took {verify_ms[b]:.0f} ms, {a} took {verify_ms[a]:.0f} ms")
        return bool(falling)

    def print(self) -> None:
        if not self.notes:
            return
        print(f"\n{MARK} These figures contradict the bench's own measurements: the machine was busy during some runs "
              "(check for builds, tests or other benchmarks, e.g. with `top`), and they are not to be trusted. Rerun on a "
              "quiet machine, or with --rounds 3 to see the spread.")
        for note in self.notes:
            print(f"  {MARK} {note}")
