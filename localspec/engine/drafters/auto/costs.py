"""What auto knows of this machine: the target's verify cost by batch size, and the draft model's cost per token.

Measured briefly at first use (calibrate), then learned from every real step
(observe_verify, observe_draft), and kept between runs (cost_cache).
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from localspec.engine.model import Model

DECAY = 0.97  # per observation: the last ~30 steps weigh most
SPIKE = 2.0  # a step slower than this many times the estimate is noise, not a cost
# A few passes, so the first token never waits long: the decode loop's own steps refine every size it drafts. 16 tells
# whether a long copy pays on this machine (sizes past it extend along the last slope until drafted).
CALIBRATION_SIZES = (1, 2, 4, 8, 16)
CALIBRATION_REPEATS = 1


@dataclass
class CostTable:
    """Milliseconds the target takes to verify a batch of n tokens, and the draft model per one-token draft step."""

    verify_ms: dict[int, float] = field(default_factory=dict)
    draft_ms_per_token: float | None = None
    fixed: bool = False  # costs measured elsewhere (a test, another machine): kept as given, not learned
    observations: dict[int, float] = field(default_factory=dict)  # passes timed per batch size, calibration included
    _sorted: list[int] = field(default_factory=list, init=False, repr=False, compare=False)

    def verify(self, n: int) -> float:
        """Measured where known; otherwise interpolated (or extended along the last slope) from the nearest sizes."""
        if n in self.verify_ms:
            return self.verify_ms[n]
        sizes = self._sizes()
        if not sizes:
            return float(n)
        i = bisect.bisect_left(sizes, n)  # sizes[:i] are below n, sizes[i:] above (n itself is not measured)
        if 0 < i < len(sizes):
            lo, hi = sizes[i - 1], sizes[i]
            return self.verify_ms[lo] + (self.verify_ms[hi] - self.verify_ms[lo]) * (n - lo) / (hi - lo)
        if len(sizes) == 1:
            return self.verify_ms[sizes[0]] * n / sizes[0]
        beyond = i == len(sizes)
        a, b = (sizes[-2], sizes[-1]) if beyond else (sizes[0], sizes[1])
        slope = (self.verify_ms[b] - self.verify_ms[a]) / (b - a)
        edge = b if beyond else a
        return max(1e-3, self.verify_ms[edge] + slope * (n - edge))

    def _sizes(self) -> list[int]:
        """The measured sizes in order; sizes are only ever added, so the sorted list is kept until one is (auto asks
        for dozens of unmeasured sizes every step)."""
        if len(self._sorted) != len(self.verify_ms):
            self._sorted = sorted(self.verify_ms)
        return self._sorted

    def observe_verify(self, n: int, ms: float) -> None:
        """Learn from one verify pass. A single token is timed nearly every step, so it tracks the machine's
        speed (other load, clocks); when it moves, every batch size moves with it, or rarely drafted sizes
        would keep costs from a faster moment and look cheaper than they are."""
        if self.fixed:
            return
        old = self.verify_ms.get(n)
        if old is not None and ms > SPIKE * old:  # another process took the CPU for a moment: not this batch's cost
            return
        seen = self.observations.get(n, 0.0)
        # A plain mean while evidence is scarce (the calibration counts as its repeats), then a decaying one.
        weight = max(1 - DECAY, 1 / (seen + 1))
        new = ms if old is None else old + weight * (ms - old)
        self.observations[n] = seen + 1
        if n == 1 and old is not None:
            for size in self.verify_ms:
                self.verify_ms[size] *= new / old
        else:
            self.verify_ms[n] = new

    def observe_draft(self, ms_per_token: float) -> None:
        if self.fixed:
            return
        old = self.draft_ms_per_token
        self.draft_ms_per_token = ms_per_token if old is None else DECAY * old + (1 - DECAY) * ms_per_token

    def batch_scale(self, n: int) -> float:
        """A batch of n tokens in one-token costs, as the target's batches scale: how the draft's batches are priced too."""
        return self.verify(n) / self.verify(1)

    def draft_batch(self, n: int) -> float:
        """The draft's cost for a batch of n tokens (a catch-up): its one-token cost, scaled by batch_scale."""
        assert self.draft_ms_per_token is not None
        return self.draft_ms_per_token * self.batch_scale(n)


def calibrate(target: Model, draft: Model | None, sizes: Sequence[int] = CALIBRATION_SIZES, repeats: int = CALIBRATION_REPEATS) -> CostTable:
    """Time the target on each batch size and the draft on single tokens, from an empty cache (then emptied again).

    The machine's speed drifts (other load, clocks) by more than the differences that decide K, so sizes are
    timed in turn within each repeat, each size's cost is taken relative to the single token timed beside it,
    and the median of those ratios scales the median single-token time: a shape that drift does not bend.
    """
    table = CostTable()
    token = target.bos if target.bos >= 0 else 0
    sizes = [n for n in sizes if n <= target.n_batch]
    runs: dict[int, list[float]] = {n: [] for n in sizes}
    target.truncate(0)
    target.decode([token], outputs=1)  # untimed: the first pass after a load pays for mapping the weights in
    for _ in range(repeats):
        for n in sizes:
            target.truncate(0)
            start = time.perf_counter()
            target.decode([token] * n, outputs=n)
            runs[n].append((time.perf_counter() - start) * 1000)
    target.truncate(0)
    if 1 in runs:
        one = statistics.median(runs[1])
        for n, times in runs.items():
            table.verify_ms[n] = one * statistics.median(ms / single for ms, single in zip(times, runs[1]))
            table.observations[n] = repeats
    if draft is not None:
        draft.truncate(0)
        draft.decode([token], outputs=1)
        start = time.perf_counter()
        for _ in range(3):
            draft.decode([token], outputs=1)
        table.draft_ms_per_token = (time.perf_counter() - start) * 1000 / 3
        draft.truncate(0)
    return table
