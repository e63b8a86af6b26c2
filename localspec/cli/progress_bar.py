"""The command line's download bar: one line, redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

from localspec.hub.progress import DownloadProgress, Phase, describe

BAR_WIDTH = 24


def render(progress: DownloadProgress, width: int = BAR_WIDTH) -> str:
    """`[2/3] name  ███████░░░  412.0 MB / 1.1 GB  38.1 MB/s  ETA 00:18  (total 40%)`"""
    fraction = progress.file_done / progress.file_total if progress.file_total else 0.0
    filled = int(round(fraction * width))
    head, tail = describe(progress)
    return f"{head}  {'█' * filled + '░' * (width - filled)}  {tail}"


class ProgressBar:
    """Feeds `Downloader.on_progress`. On a terminal the line is redrawn; in a log, one line per file and phase."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last_key: tuple[str, Phase] | None = None
        self._width = 0

    def __call__(self, progress: DownloadProgress) -> None:
        line = render(progress)
        if self._tty:
            padding = " " * max(0, self._width - len(line))
            self._stream.write("\r" + line + padding)
            self._width = len(line)
            if progress.phase is Phase.DONE:
                self._stream.write("\n")
                self._width = 0
        elif (progress.label, progress.phase) != self._last_key:
            self._stream.write(line + "\n")
        self._last_key = (progress.label, progress.phase)
        self._stream.flush()
