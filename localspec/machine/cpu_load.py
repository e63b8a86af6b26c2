"""How much of the CPU other programs are using now: what decides whether llama.cpp's threads get their cores.

A thread that waits for a core another program holds stalls every thread of the pass at its next barrier, so one busy
core slows decoding by more than its share where the threads spin (see localspec/__init__.py).
"""

from __future__ import annotations

import time
from pathlib import Path

_STAT = Path("/proc/stat")
_IDLE_FIELDS = (3, 4)  # idle, iowait


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot; None where /proc/stat cannot be read (macOS, Windows)."""
    try:
        fields = [int(value) for value in _STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - sum(fields[i] for i in _IDLE_FIELDS), total


def busy_cores(n_cpus: int, seconds: float = 0.5) -> float | None:
    """CPUs' worth of work the machine did over the next `seconds` while this process slept: other programs' use."""
    before = _cpu_times()
    time.sleep(seconds)
    after = _cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return n_cpus * (after[0] - before[0]) / (after[1] - before[1])
