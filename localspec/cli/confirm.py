"""Asking before a deletion: on a terminal, a y/N question; elsewhere, nothing is deleted without --yes."""

from __future__ import annotations

import sys

from localspec.errors import UsageError


def confirmed(question: str, yes: bool, command: str) -> bool:
    """True to go ahead. `command` is what the user typed, for the message when there is no one to ask."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(f"`{command}` would {question[0].lower()}{question[1:]} Add --yes to go ahead without asking.")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
