"""The statistics every response carries: llama.cpp's `timings`, OpenAI's `usage`, and ours under `localspec`.

Clients already read `timings` (llama.cpp's web UI, llama.vim, llama.vscode) and
`usage` (every OpenAI client): those keep their exact names and meaning. The
rest of what the engine measured goes under its own key, where no client trips on it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from localspec.engine.events import StopReason
from localspec.engine.stats import GenerationStats, decisions_by_source
from localspec.session.plain_rate import plain_rate_for, speedup

FINISH_REASONS = {StopReason.EOS: "stop", StopReason.STOP_STRING: "stop", StopReason.MAX_TOKENS: "length",
                  StopReason.CONTEXT_FULL: "length", StopReason.CANCELLED: "stop"}
# llama.cpp's /completion says why it stopped as stop_type.
STOP_TYPES = {StopReason.EOS: "eos", StopReason.STOP_STRING: "word", StopReason.MAX_TOKENS: "limit",
              StopReason.CONTEXT_FULL: "limit", StopReason.CANCELLED: "limit"}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def timings(stats: GenerationStats) -> dict[str, Any]:
    """llama.cpp's keys: prompt_n counts the prompt tokens evaluated (cache_n were reused), as its server does."""
    evaluated = stats.prompt_n - stats.cache_n
    out: dict[str, Any] = {
        "cache_n": stats.cache_n,
        "prompt_n": evaluated,
        "prompt_ms": stats.prompt_ms,
        "prompt_per_token_ms": stats.prompt_ms / evaluated if evaluated else 0.0,
        "prompt_per_second": 1000.0 * evaluated / stats.prompt_ms if stats.prompt_ms else 0.0,
        "predicted_n": stats.predicted_n,
        "predicted_ms": stats.predicted_ms,
        "predicted_per_token_ms": stats.predicted_ms / stats.predicted_n if stats.predicted_n else 0.0,
        "predicted_per_second": stats.predicted_per_second,
    }
    if stats.draft_n:
        out |= {"draft_n": stats.draft_n, "draft_n_accepted": stats.draft_n_accepted}
    return out


def usage(stats: GenerationStats) -> dict[str, Any]:
    return {
        "prompt_tokens": stats.prompt_n,
        "completion_tokens": stats.predicted_n,
        "total_tokens": stats.prompt_n + stats.predicted_n,
        "prompt_tokens_details": {"cached_tokens": stats.cache_n},
    }


def localspec_stats(stats: GenerationStats, plain_ms_per_token: float) -> dict[str, Any]:
    """Everything else the engine measured, and the speedup over plain decoding as it runs now (session/plain_rate.py):
    `plain_per_second` is the rate it divides by, the target's with the answer's grammar (`plain_ms_per_token`, the
    unconstrained baseline, plus `grammar_ms_per_row`)."""
    return {
        "drafter": stats.drafter, "draft_max": stats.draft_max, "seed": stats.seed,
        "acceptance_rate": stats.acceptance_rate, "acceptance_by_position": stats.acceptance_by_position,
        "acceptance_by_source": stats.acceptance_by_source,
        "draft_n_per_pos": stats.draft_n_per_pos, "n_acc_tokens_per_pos": stats.n_acc_tokens_per_pos,
        "tokens_per_step": stats.tokens_per_step, "n_steps": stats.n_steps,
        "t_draft_ms": stats.t_draft_ms, "t_verify_ms": stats.t_verify_ms, "t_other_ms": stats.t_other_ms,
        "decisions": stats.decisions, "decisions_by_source": decisions_by_source(stats),
        "forced_n": stats.forced_n, "forced_n_accepted": stats.forced_n_accepted, "t_grammar_ms": stats.t_grammar_ms,
        "grammar_rows": stats.grammar_rows, "grammar_ms_per_row": stats.grammar_ms_per_row,
        "plain_ms_per_token": plain_ms_per_token or None, "plain_per_second": plain_rate_for(stats, plain_ms_per_token),
        "speedup": speedup(stats, plain_ms_per_token),
    }


def error_body(message: str, kind: str = "invalid_request_error", code: int | str = 400) -> dict[str, Any]:
    """OpenAI's error shape (llama.cpp's server uses it too)."""
    return {"error": {"message": message, "type": kind, "code": code}}
