"""The command line's download bar: one line, redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

from localspec.hub.progress import DownloadProgress, Phase, describe

BAR_WIDTH = 24
MIN_BAR_WIDTH = 8
MIN_NAME = 12  # a file name shortened below this says nothing


def render(progress: DownloadProgress, columns: int = 10_000) -> str:
    """`[2/3] name  ███████░░░  412.0 MB / 1.1 GB  38.1 MB/s  ETA 00:18  (total 40%)`, in fewer than `columns` characters.

    A line that wraps cannot be redrawn in place (each refresh would print a new one), so a narrow terminal
    gets a shorter bar, then none, then the file name shortened in its middle, then the least needed figures
    dropped (the total, the time left, the speed); the file's count and its bytes always stay.
    """
    head, tail = describe(progress)
    room = columns - 1  # the last column would wrap on some terminals
    bar = min(BAR_WIDTH, room - len(head) - len(tail) - 4)
    if bar >= MIN_BAR_WIDTH:
        fraction = progress.file_done / progress.file_total if progress.file_total else 0.0
        filled = int(round(fraction * bar))
        return f"{head}  {'█' * filled + '░' * (bar - filled)}  {tail}"
    count, name = head.split(" ", 1)
    figures = tail.split("  ")
    while len(figures) > 1 and len(count) + 1 + MIN_NAME + 2 + len("  ".join(figures)) > room:
        figures.pop()
    tail = "  ".join(figures)
    name_room = room - len(count) - 1 - 2 - len(tail)
    if len(name) > name_room:
        keep = max(name_room - 1, MIN_NAME - 1)
        name = name[: keep - keep // 2] + "…" + name[len(name) - keep // 2 :]
    return f"{count} {name}  {tail}"[:room]


class ProgressBar:
    """Feeds `Downloader.on_progress`. On a terminal the line is redrawn; in a log, one line per file and phase."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last_key: tuple[str, Phase] | None = None
        self._width = 0

    def __call__(self, progress: DownloadProgress) -> None:
        line = render(progress, shutil.get_terminal_size().columns) if self._tty else render(progress)
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
