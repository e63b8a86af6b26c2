"""Every option's value is checked before anything is loaded: a typo costs a second, not a minute of loading.

Each message names the option and says what it takes. The ranges are the
engine's and the settings' own (defaults.MIN_N_CTX, defaults.DRAFT_MAX_LIMIT,
SamplingParams.validate), so the command line and the app agree.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localspec.engine import defaults
from localspec.engine.errors import SamplingSettingsError
from localspec.errors import UsageError


@dataclass(frozen=True)
class Rule:
    option: str  # as typed: --max-tokens
    holds: Callable[[Any], bool]
    takes: str  # what the option takes, to end the message

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_")


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


RULES = (
    Rule("--max-tokens", _optional(lambda v: v >= 1), "a whole number, 1 or more"),
    Rule("--ctx-size", lambda v: v >= defaults.MIN_N_CTX, f"a whole number, {defaults.MIN_N_CTX} or more"),
    Rule("--threads", _optional(lambda v: v >= 1), "a whole number, 1 or more"),
    Rule("--draft-p-min", _optional(lambda v: 0.0 <= v <= 1.0), "a probability from 0 to 1"),
    Rule("--seed", _optional(lambda v: 0 <= v < 2**63), "a whole number, 0 or more"),
    Rule("--self-layers", _optional(lambda v: v >= 1), "a whole number of blocks, 1 or more"),
    Rule("--layers", lambda v: v >= 1, "a whole number of blocks, 1 or more (fewer than the target has)"),
    Rule("--target-gpu-layers", _optional(lambda v: v >= -1), "a whole number of layers, or -1 for all"),
    Rule("--draft-gpu-layers", _optional(lambda v: v >= -1), "a whole number of layers, or -1 for all"),
    Rule("--rounds", lambda v: v >= 1, "a whole number, 1 or more"),
    Rule("--port", lambda v: 1 <= v <= 65535, "a port number from 1 to 65535"),
    Rule("--lines", _optional(lambda v: v >= 1), "a whole number, 1 or more"),
    Rule("--auto-max", _optional(lambda v: 1 <= v <= defaults.DRAFT_MAX_LIMIT), f"a whole number from 1 to {defaults.DRAFT_MAX_LIMIT}"),
)


TEXT_OPTIONS = ("--prompt", "--system", "--stop")


def _check_text(option: str, value: str) -> None:
    """Arguments arrive decoded with surrogate escapes: bytes that are not UTF-8 would fail deep in the tokenizer."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start].encode("utf-8", "surrogateescape")
        raise UsageError(f"{option} is not valid UTF-8 text (byte 0x{bad.hex()} at character {exc.start + 1}). "
                         "Check the terminal's or the script's encoding.") from None


def read_prompt(args: argparse.Namespace) -> None:
    """`--prompt -` and `--prompt-file PATH` become the prompt's text (one argument is capped at 128 KiB by the OS)."""
    if getattr(args, "prompt_file", None) is not None:
        try:
            args.prompt = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it is not UTF-8 text"
            raise UsageError(f"--prompt-file {args.prompt_file}: the file cannot be read ({reason}).") from None
    elif getattr(args, "prompt", None) == "-":
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise UsageError("--prompt -: standard input is closed. Pipe the prompt in, or give it with --prompt TEXT.")
        try:
            args.prompt = sys.stdin.read()
        except UnicodeDecodeError:
            raise UsageError("--prompt -: standard input is not UTF-8 text.") from None
        if not args.prompt.strip():
            raise UsageError("--prompt -: standard input was empty. Pipe the prompt in, or give it with --prompt TEXT.")


def check_args(args: argparse.Namespace) -> None:
    """Raise UsageError, naming the option, for the first value out of its range (options the command lacks are skipped)."""
    read_prompt(args)
    for option in TEXT_OPTIONS:
        value = getattr(args, option.removeprefix("--"), None)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                _check_text(option, text)
    for rule in RULES:
        if hasattr(args, rule.dest):
            value = getattr(args, rule.dest)
            if not rule.holds(value):
                raise UsageError(f"{rule.option} {value} is out of range: it takes {rule.takes}.")
    if isinstance(getattr(args, "draft_max", None), int):  # generate's K (bench takes a list, checked by its parser)
        limit = min(defaults.DRAFT_MAX_LIMIT, args.ctx_size - 2)
        if not 0 <= args.draft_max <= limit:
            raise UsageError(f"--draft-max {args.draft_max} is out of range: it takes a whole number from 0 to {limit} "
                             f"(at most {defaults.DRAFT_MAX_LIMIT}, and the context of {args.ctx_size} tokens must hold a draft and its answer).")
    if hasattr(args, "top_k"):
        from localspec.engine.sampling import SamplingParams  # here, not at the top: it loads numpy, and --help should not wait

        try:
            SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed).validate()
        except SamplingSettingsError as exc:
            raise UsageError(f"--{exc.setting}: {exc}.") from None
    elif not 0 <= getattr(args, "temperature", 0.0) < math.inf:  # nan fails every comparison
        raise UsageError(f"--temperature {args.temperature} is out of range: it takes 0 (greedy) or a positive number.")
    if getattr(args, "raw", False) and getattr(args, "prompt", None) == "":
        raise UsageError("--prompt is empty: with --raw the prompt is the whole input, so give it some text.")
