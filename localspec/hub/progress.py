"""Download progress as values: the command line draws them as a bar, the app posts them as messages."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from localspec.units import format_bytes, format_eta


class Phase(str, Enum):
    CHECKING = "checking"  # asking the hub, or hashing the bytes a previous run left
    DOWNLOADING = "downloading"
    RETRYING = "retrying"  # the connection dropped; waiting to resume
    DONE = "done"  # this file is complete and verified (or was already cached)


@dataclass(frozen=True)
class DownloadProgress:
    label: str  # repo/file
    phase: Phase
    file_index: int  # 1-based, of file_count
    file_count: int
    file_done: int
    file_total: int | None
    total_done: int
    total_total: int | None
    bytes_per_second: float

    @property
    def eta_seconds(self) -> float | None:
        """Time left for all files at the current speed; None until both are known."""
        if self.total_total is None or self.bytes_per_second <= 0:
            return None
        return max(0.0, (self.total_total - self.total_done) / self.bytes_per_second)


ProgressCallback = Callable[[DownloadProgress], object]


class RateMeter:
    """Bytes per second over the last few seconds: steady enough to read, quick to follow a change."""

    def __init__(self, window_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window_s
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, total_bytes: int) -> float:
        now = self._clock()
        self._samples.append((now, total_bytes))
        while len(self._samples) > 2 and now - self._samples[0][0] > self._window:
            self._samples.popleft()
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


def describe(progress: DownloadProgress) -> tuple[str, str]:
    """The words around a progress bar: `[2/3] name`, and `412.0 MB / 1.1 GB  38.1 MB/s  ETA 00:18  (total 40%)`."""
    head = f"[{progress.file_index}/{progress.file_count}] {progress.label.rsplit('/', 1)[-1]}"
    sizes = f"{format_bytes(progress.file_done)} / {format_bytes(progress.file_total)}" if progress.file_total else format_bytes(progress.file_done)
    detail = {
        Phase.CHECKING: "checking",
        Phase.RETRYING: "connection lost, resuming",
        Phase.DONE: "done",
    }.get(progress.phase, f"{format_bytes(progress.bytes_per_second)}/s  ETA {format_eta(progress.eta_seconds)}")
    total = f"  (total {100 * progress.total_done / progress.total_total:.0f}%)" if progress.total_total else ""
    return head, f"{sizes}  {detail}{total}"
