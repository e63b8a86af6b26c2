"""How often the app may draw while an answer streams, so that drawing never takes the models' CPU.

When llama.cpp's threads fill every core, each millisecond spent drawing is
taken from generation. The pacer weighs the main thread's CPU time since the
last update (drawing it, and whatever else the UI did) against the wall time
that passed, and says how long the next update must wait to stay within its
share of a core. With a core to spare, nothing waits.
"""

from __future__ import annotations

import os
import threading
import time

CPU_SHARE_CONTENDED = 0.05  # of one core, while generation has every core


def cpu_share(generation_threads: int) -> float:
    return 1.0 if (os.cpu_count() or 1) > generation_threads else CPU_SHARE_CONTENDED


class DrawPacer:
    def __init__(self, generation_threads: int) -> None:
        self.share = cpu_share(generation_threads)
        self.drawn = threading.Event()  # set: the worker may send its next update
        self.drawn.set()
        self._at = (time.perf_counter(), time.thread_time())  # (wall, main-thread CPU) at the last update

    def wait_before_next(self) -> float:
        """Call on the UI thread once an update is on screen: the seconds before the next may come."""
        now, cpu = time.perf_counter(), time.thread_time()
        used, elapsed = cpu - self._at[1], now - self._at[0]
        self._at = (now, cpu)
        return max(0.0, used / self.share - elapsed)
