"""Token bytes to text: UTF-8 decoded incrementally, and stop strings caught across tokens.

A token may end in the middle of a multi-byte character, and a stop string may
span several tokens; both mean holding a little text back until it is settled.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextAssembler:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._held = ""
        self.stopped = False
        self.stop_word = ""  # the stop string that ended the text (llama.cpp's stopping_word)

    def push(self, data: bytes) -> str:
        """Feed one token's bytes; return the text that is now safe to show."""
        text = self._held + self._decoder.decode(data)
        if not self._stop:
            return text
        for stop in self._stop:
            at = text.find(stop)
            if at >= 0:
                self.stopped, self.stop_word = True, stop
                self._held = ""
                return text[:at]
        hold = max((self._open_prefix(text, stop) for stop in self._stop), default=0)
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    @staticmethod
    def _open_prefix(text: str, stop: str) -> int:
        """Length of the longest end of `text` that could still grow into `stop`."""
        for n in range(min(len(stop) - 1, len(text)), 0, -1):
            if stop.startswith(text[-n:]):
                return n
        return 0

    def flush(self) -> str:
        """Whatever is held back when generation ends for another reason."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text
