"""Asking before a deletion: on a terminal, a y/N question; elsewhere, nothing is deleted without --yes."""

from __future__ import annotations

import sys

from localspec.errors import UsageError


def confirmed(action: str, yes: bool, command: str) -> bool:
    """True to go ahead with `action` ("delete 2 files of PAIR, 1.4 GB"). `command` is what the user typed, for the
    message when there is no one to ask."""
    if yes:
        return True
    if sys.stdin is None or not sys.stdin.isatty():  # None: standard input closed
        raise UsageError(f"`{command}` would {action}. Add --yes to go ahead without asking.")
    return input(f"{action[0].upper()}{action[1:]}? [y/N] ").strip().lower() in ("y", "yes")
