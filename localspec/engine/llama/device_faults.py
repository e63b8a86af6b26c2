"""Checks run after every decode, so that nothing computed on a device that went away reaches the user.

Why a hook: a remote device (an RPC server on another machine) can stop answering in the middle of a decode. ggml's
client, as localspec builds it, then zeroes what it would have read instead of aborting the process, and llama_decode
returns as if all were well; only the backend knows. Whoever attaches such a device registers a check here (the
engine knows no RPC), and the model raises DeviceLostError before the decode's logits are used.
"""

from __future__ import annotations

from collections.abc import Callable

from localspec.engine.errors import DeviceLostError

Check = Callable[[], "str | None"]  # None while every device answers; else what went wrong and what to do

_checks: list[Check] = []


def add_check(check: Check) -> None:
    if check not in _checks:
        _checks.append(check)


def raise_if_lost() -> None:
    for check in _checks:
        message = check()
        if message is not None:
            raise DeviceLostError(message)
