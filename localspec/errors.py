"""The root of every error localspec raises on purpose.

Each message is written for the person at the keyboard: what is wrong and what
to do about it. The command line and the app catch this one class, print the
message as it is, and never show a traceback for it.
"""

from __future__ import annotations

import errno


class LocalspecError(Exception):
    """An expected failure with a user-facing message."""


class UsageError(LocalspecError):
    """A value the user gave (an argument, a setting) is invalid: the command line exits with status 2 for it, as argparse does."""


def os_error_advice(exc: OSError) -> str:
    """What to do about a file operation the machine refused, by its cause: "check the free space" was once the
    answer to a folder given for a file, and to a read-only home folder."""
    advice = {
        errno.EISDIR: "that path is a folder: give a file's path",
        errno.ENOTDIR: "a part of that path is a file, not a folder: check the path",
        errno.ENOENT: "that path does not exist: check it, or create its folder first",
        errno.ENOSPC: "the disk is full: free some space",
        errno.EDQUOT: "the disk quota is used up: free some space",
        errno.EROFS: "that file system is read-only: use a writable folder",
        errno.EACCES: "permission denied: check the folder's permissions, or use a folder you own",
        errno.EPERM: "the operation is not permitted: check the folder's permissions",
    }
    return advice.get(exc.errno or 0, "check the disk's free space and the folder's permissions")
