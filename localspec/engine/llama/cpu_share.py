"""Threads for a pass: one fewer for each CPU other programs keep busy.

llama.cpp's threads meet at a barrier after every operation of a pass, and wait there by spinning (OpenMP's default).
Where another program holds a core, the thread sharing it runs in slices and the others spin until it is back, so the
busy core costs far more than its share. On a 2-core EPYC, 2 threads decoded the real 1.5B target at 22-25 tok/s idle
and 7.5 beside one busy core, where 1 thread gave 14-15. OpenMP's passive wait kept 12-14 beside the busy core but
cost a third on an idle machine (13-17), so the waits stay and the thread count follows the machine instead: the CPU
time other programs took since the last look (the machine's busy time less this process's) is sampled at most every
SAMPLE_S while passes run, and a pass takes as many threads as CPUs are left, never more than the count configured.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

SAMPLE_S = 0.5  # how often to look: a busy program is seen within a second, and the look costs ~20 us
_STAT = Path("/proc/stat")
_IDLE_FIELDS = (3, 4)  # idle, iowait
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_busy_seconds() -> float | None:
    """CPU-seconds the whole machine has spent busy since boot; None where /proc/stat cannot be read (macOS, Windows)."""
    try:
        fields = [int(value) for value in _STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    busy = sum(fields[:8]) - sum(fields[i] for i in _IDLE_FIELDS)  # guest time is already counted in user time
    return busy / _TICKS_PER_S


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class CpuShare:
    """What other programs use of the CPU, from looks at least SAMPLE_S apart."""

    def __init__(self) -> None:
        self._last: tuple[float, float, float] | None = None  # (wall, machine busy, this process's CPU) at the last look
        self.others = 0.0  # CPUs' worth of other programs' work over the last interval
        self._left = usable_cpus()  # the CPUs left to this process at the last look, rounded: what a pass may take

    def threads(self, configured: int) -> int:
        """The threads a pass should take now: as many as CPUs are left to this process, 1 to `configured`. Every pass
        asks, so between looks this is a clock read and a comparison."""
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= SAMPLE_S:
            self._look(now)
        return max(1, min(configured, self._left))

    def _look(self, now: float) -> None:
        busy, own = cpu_busy_seconds(), time.process_time()
        if busy is None:
            return
        if self._last is not None and now > self._last[0]:
            wall, busy_before, own_before = self._last
            self.others = max(0.0, (busy - busy_before) - (own - own_before)) / (now - wall)
            self._left = math.floor(usable_cpus() - self.others + 0.5)
        self._last = (now, busy, own)


SHARE = CpuShare()  # one per process: every model's passes share the machine
