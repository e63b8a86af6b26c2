"""Stopping a model load midway: by a cancel event (the app's Esc or Ctrl+Q) or by Ctrl-C on the command line.

llama.cpp reads the weights inside one C call. Python runs a Ctrl-C handler only between bytecodes, and during a
load the only bytecodes are ctypes callbacks (the log, the progress), where a KeyboardInterrupt is printed as
"Exception ignored" and dropped: the load then went on and the command answered. So while a load runs on the main
thread, Ctrl-C only sets a flag; the progress callback returns false on the next tensor, which makes llama.cpp
abort the load, and the interrupt is raised again once control is back in Python.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import llama_cpp


class LoadAbort:
    """The progress callback of one load, and whether it asked llama.cpp to stop."""

    def __init__(self, cancel: threading.Event | None) -> None:
        self.cancel = cancel
        self.interrupted = threading.Event()  # Ctrl-C, while the load held the main thread
        # kept here: llama.cpp holds only its address; it goes on while nothing asked it to stop
        self.callback = llama_cpp.llama_progress_callback(lambda _progress, _user_data: not self.stopped)

    @property
    def stopped(self) -> bool:
        return self.interrupted.is_set() or (self.cancel is not None and self.cancel.is_set())

    @contextlib.contextmanager
    def interrupts_deferred(self) -> Iterator[None]:
        """Ctrl-C sets `interrupted` for the duration; leaving re-raises it. A load off the main thread (the app's
        workers) cannot take signals and is stopped by `cancel` instead."""
        if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield
            return

        def note(_signum: int, _frame: FrameType | None) -> None:
            self.interrupted.set()

        signal.signal(signal.SIGINT, note)
        try:
            yield
        except BaseException:
            if self.interrupted.is_set():  # the load failed because it was told to stop: say that, not why it failed
                raise KeyboardInterrupt from None
            raise
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.interrupted.is_set():
            raise KeyboardInterrupt
