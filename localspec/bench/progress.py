"""A bench takes minutes: a line per measurement (on stderr, apart from the report), with the time left."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from localspec.units import format_eta


class BenchProgress:
    """Counts measurements; the time left is the mean time per measurement so far, times those still to come."""

    def __init__(self, total: int, out: TextIO = sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.out = out
        self._started = time.perf_counter()

    def stage(self, text: str) -> None:
        print(f"bench: {text}", file=self.out, flush=True)

    def measured(self, what: str, tokens_per_second: float, count: int = 1) -> None:
        """`count` measurements were made (a replay reports its requests a few at a time), at `tokens_per_second`."""
        self.done += count
        elapsed = time.perf_counter() - self._started
        left = elapsed / self.done * (self.total - self.done)
        print(f"  [{self.done}/{self.total}] {what}: {tokens_per_second:.1f} tok/s · about {format_eta(left)} left",
              file=self.out, flush=True)
