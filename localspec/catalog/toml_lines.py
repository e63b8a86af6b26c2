"""Line numbers for a parsed models.toml.

tomllib gives values, not positions, and an error message that says "line 42"
saves the user a hunt. A line scan finds where each [[pair]] table, each of its
sub-tables and each key starts; that is all the catalog's messages need.
"""

from __future__ import annotations

import re

_ARRAY_TABLE = re.compile(r"^\[\[\s*pair\s*\]\]")
_SUB_TABLE = re.compile(r"^\[\s*pair\.([A-Za-z0-9_-]+)\s*\]")
_ANY_TABLE = re.compile(r"^\[")
_KEY = re.compile(r"^\"?([A-Za-z0-9_.-]+)\"?\s*=")
_INLINE_KEY = re.compile(r"([A-Za-z0-9_-]+)\s*=")

Location = tuple[int | None, str | None, str | None]  # (pair index, sub-table, key)


class TomlLines:
    def __init__(self, text: str) -> None:
        self._lines: dict[Location, int] = {}
        pair: int | None = None
        section: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if _ARRAY_TABLE.match(stripped):
                pair = 0 if pair is None else pair + 1
                section = None
                self._note((pair, None, None), number)
            elif match := _SUB_TABLE.match(stripped):
                section = match[1]
                self._note((pair, section, None), number)
            elif _ANY_TABLE.match(stripped):
                section = "?"
            elif match := _KEY.match(stripped):
                self._note_key(pair, section, match[1], stripped[match.end():], number)

    def _note(self, location: Location, number: int) -> None:
        self._lines.setdefault(location, number)

    def _note_key(self, pair: int | None, section: str | None, key: str, rest: str, number: int) -> None:
        if "." in key and section is None:  # target.repo = "..."
            section, key = key.split(".", 1)
        self._note((pair, section, key), number)
        if section is None and rest.lstrip().startswith("{"):  # target = { repo = "...", file = "..." }
            self._note((pair, key, None), number)
            for inner in _INLINE_KEY.findall(rest):
                self._note((pair, key, inner), number)

    def line_of(self, pair: int | None, section: str | None, key: str | None) -> int | None:
        """The key's line; else its table's; else the pair's; None when nothing matches."""
        for location in ((pair, section, key), (pair, section, None), (pair, None, section), (pair, None, None)):
            if location in self._lines:
                return self._lines[location]
        return None
