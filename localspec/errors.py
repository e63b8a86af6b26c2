"""The root of every error localspec raises on purpose.

Each message is written for the person at the keyboard: what is wrong and what
to do about it. The command line and the app catch this one class, print the
message as it is, and never show a traceback for it.
"""

from __future__ import annotations


class LocalspecError(Exception):
    """An expected failure with a user-facing message."""


class UsageError(LocalspecError):
    """A value the user gave (an argument, a setting) is invalid: the command line exits with status 2 for it, as argparse does."""
