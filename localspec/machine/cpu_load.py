"""How much of the CPU other programs are using now: doctor says it, since it decides the threads a pass gets
(engine/llama/cpu_share.py)."""

from __future__ import annotations

import time

from localspec.engine.llama.cpu_share import cpu_busy_seconds


def busy_cores(seconds: float = 0.5) -> float | None:
    """CPUs' worth of work the machine did over the next `seconds` while this process slept: other programs' use."""
    before = cpu_busy_seconds()
    time.sleep(seconds)
    after = cpu_busy_seconds()
    if before is None or after is None:
        return None
    return max(0.0, after - before) / seconds
