"""A toast's text, broken where a reader expects: between words, and inside a path after a slash (or a dash).

Textual wraps a toast between words and folds a word longer than the toast at its edge, mid-name: a settings
path read "setting s.json", a hub file "GGU F/". Each such word is split here after the slashes that let its
pieces fit (a file name longer than the toast after its dashes, dots and underscores), so the fold never cuts one.
"""

from __future__ import annotations

import re

TOAST_WIDTH = 60  # Textual's Toast width; the stylesheet lets it take the whole width of a narrower terminal
TOAST_FRAME = 3  # its padding (1 each side) and its coloured left border
_PATH_PIECE = re.compile(r"[^/]*/|[^/]+")  # up to and with a slash, or the rest
_NAME_PIECE = re.compile(r"[^-_.]*[-_.]|[^-_.]+")  # a name's parts, each with the dash, dot or underscore after it


def toast_text_width(terminal_width: int) -> int:
    """The columns a toast's text gets on a terminal this wide."""
    return max(1, min(TOAST_WIDTH, terminal_width) - TOAST_FRAME)


def breakable(text: str, width: int) -> str:
    """`text` with each word longer than `width` split onto lines after its slashes, each line as full as fits."""
    return " ".join(word if len(word) <= width else "\n".join(_lines(_pieces(word, width), width)) for word in text.split(" "))


def _pieces(word: str, width: int) -> list[str]:
    return [part for piece in _PATH_PIECE.findall(word)
            for part in (_NAME_PIECE.findall(piece) if len(piece) > width else [piece])]


def _lines(pieces: list[str], width: int) -> list[str]:
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return lines
