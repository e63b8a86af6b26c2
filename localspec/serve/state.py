"""What every route shares: the loaded pair (once loaded), the generation worker, the counters, the options.

Also the two steps every generating route takes: the request's settings turned
into the engine's (`generation`), and the job that builds the prompt and runs
the decoder on the worker's thread (`generation_job`, serve/jobs.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from localspec.engine.engine import Engine
from localspec.engine.errors import EngineError
from localspec.engine.events import Finished, StopReason
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.penalties import BIAS_RANGE, PENALTY_RANGE, Penalties
from localspec.engine.stats import GenerationStats
from localspec.errors import UsageError
from localspec.serve.batch_worker import BatchWorker
from localspec.serve.jobs import GenerationJob, PromptBuilder
from localspec.serve.metrics import Metrics
from localspec.serve.options import ServeOptions
from localspec.serve.payloads import FINISH_REASONS, STOP_TYPES
from localspec.serve.requests import SamplingFields
from localspec.session.generation_request import SERVER_NAMES, Asked, resolve
from localspec.session.plain_rate import speedup, updated_plain_ms
from localspec.session.structured_output import requested_grammar


@dataclass
class ServerState:
    options: ServeOptions
    worker: BatchWorker = field(default_factory=BatchWorker)
    metrics: Metrics = field(default_factory=Metrics)
    engine: Engine | None = None  # None while loading
    plain_ms_per_token: float = 0.0  # timed at load, then kept current by every answer (session/plain_rate.py)
    load_error: str | None = None
    slot_totals: dict[int, GenerationStats] = field(default_factory=dict)  # each slot's requests summed, for /slots

    @property
    def request_context(self) -> int:
        """The context one request may fill: a slot's share of the target's (the whole of it with --parallel 1)."""
        assert self.engine is not None
        return self.engine.target.n_ctx // self.options.parallel

    def generation(self, request: SamplingFields, max_tokens: int | None) -> tuple[str, GenerationConfig]:
        """The drafter and the engine's settings for a request: its own fields, else the server's options (resolve's rules)."""
        assert self.engine is not None
        refuse_unsupported(request)
        try:  # a schema the converter refuses, or a grammar llama.cpp cannot parse: the request's fault
            text = requested_grammar(request.response_format, request.json_schema, request.grammar)
            grammar = None if text is None else self.engine.target.grammar(text)
        except EngineError as exc:
            raise UsageError(str(exc)) from exc
        asked = Asked(drafter=request.option("localspec.drafter"), draft_max=_number(request.option("speculative.n_max"), "speculative.n_max", int),
                      draft_p_min=_number(request.option("speculative.p_min"), "speculative.p_min", float), max_tokens=max_tokens,
                      temperature=request.temperature, top_k=request.top_k, top_p=request.top_p, min_p=request.min_p, seed=request.seed,
                      stop=request.stop_strings, grammar=grammar, penalties=requested_penalties(request, self.engine.target.n_vocab))
        resolved = resolve(asked.over(self.options.standing), parts=self.engine.parts, context=self.engine.target.n_ctx,
                           pair=self.options.pair, names=SERVER_NAMES)
        return resolved.drafter, resolved.config

    def standing_params(self) -> dict[str, Any]:
        """The speculation a request that sets none gets, resolved as for a request (llama-server reports its params)."""
        drafter, config = self.generation(SamplingFields(), None)
        return {"speculative.n_max": config.draft_max, "speculative.p_min": config.draft_p_min, "localspec.drafter": drafter}

    def generation_job(self, route: str, drafter: str, build_prompt: PromptBuilder, config: GenerationConfig,
                       time_limit_ms: int = 0, warm_only: bool = False) -> GenerationJob:
        assert self.engine is not None
        return GenerationJob(self.engine, self.finish, route, drafter, build_prompt, config, time_limit_ms, warm_only)

    def finish(self, route: str, finished: Finished, task: int, slot: int = 0, timed_out: bool = False) -> None:
        """A generation ended: count it, and say it on the terminal (`task`: its arrival number; `timed_out`: llama.cpp's
        t_max_predict_ms cut it)."""
        self.metrics.record(finished.stats)
        self.plain_ms_per_token = updated_plain_ms(self.plain_ms_per_token, finished.stats)
        earlier = self.slot_totals.get(slot)
        self.slot_totals[slot] = GenerationStats.total([earlier, finished.stats] if earlier else [finished.stats])
        self.slot_totals[slot].drafter = finished.stats.drafter
        self.log(route, finished.stats, task, self._cut_by(finished, timed_out))

    def _cut_by(self, finished: Finished, timed_out: bool) -> str:
        """What cancelled a generation, as the log says it ("" where it ended by itself)."""
        if finished.reason is not StopReason.CANCELLED:
            return ""
        if self.worker.stopping:
            return "cut: the server is stopping"
        return "stopped: t_max_predict_ms was reached" if timed_out else "cancelled (the client left)"

    def finish_reason(self, finished: Finished) -> str:
        """OpenAI's finish_reason; an answer the shutdown cut says so ("abort", vLLM's word), not "stop" as if complete."""
        return "abort" if finished.reason is StopReason.CANCELLED and self.worker.stopping else FINISH_REASONS[finished.reason]

    def stop_type(self, finished: Finished) -> str:
        """llama.cpp's stop_type, with the same "abort" for an answer the shutdown cut."""
        return "abort" if finished.reason is StopReason.CANCELLED and self.worker.stopping else STOP_TYPES[finished.reason]

    def log(self, route: str, stats: GenerationStats, task: int, status: str = "") -> None:
        """One line per request as it ends: what a user watching the terminal wants to know."""
        if not stats.predicted_n:  # n_predict 0, or a client that left before the first token
            done = status or "warmed the cache"
            print(f"  #{task} {route} · 0 tokens · {done}: {stats.prompt_n} prompt tokens, {stats.cache_n} already cached",
                  file=sys.stderr, flush=True)
            return
        parts = [route, f"{stats.predicted_n} tokens", f"{stats.predicted_per_second:.1f} tok/s", stats.drafter]
        if stats.draft_n:
            parts.append(f"accepted {100 * stats.acceptance_rate:.0f}% ({stats.tokens_per_step:.2f} tok/pass)")
        if stats.forced_n:
            parts.append(f"grammar forced {stats.forced_n_accepted} tokens")
        if (times := speedup(stats, self.plain_ms_per_token)) is not None:
            parts.append(f"{times:.2f}× plain" + (" under its grammar" if stats.grammar_rows else ""))
        if stats.cache_n:
            parts.append(f"{stats.cache_n} prompt tokens cached")
        if status:
            parts.append(status)
        print(f"  #{task} " + " · ".join(parts), file=sys.stderr, flush=True)


# Options clients send that this server does not honour, and what each asks for: refused by name, never dropped silently.
UNSUPPORTED = {"logprobs": "token log-probabilities", "top_logprobs": "token log-probabilities",
               "n_probs": "token probabilities", "return_tokens": "the answer's token ids", "best_of": "several candidate answers",
               "audio": "spoken answers", "prediction": "answers checked against a predicted output"}


def refuse_unsupported(request: SamplingFields) -> None:
    """A 400 naming the option, where a client asks for what the answer would silently lack."""
    n = request.option("n")
    if n is not None and n != 1:
        raise UsageError(f"n = {n!r}: this server returns one choice per request. Send {n!r} requests instead, or leave n out.")
    modalities = request.option("modalities")
    if modalities is not None and (not isinstance(modalities, list) or set(modalities) - {"text"}):
        raise UsageError(f"modalities = {modalities!r}: this server answers in text only. Leave modalities out, or send [\"text\"].")
    for name, what in UNSUPPORTED.items():
        value = request.option(name)
        if value not in ((None, False, 0, 1) if name == "best_of" else (None, False, 0)):
            raise UsageError(f"{name} is not supported: this server does not return {what}. Leave {name} out.")


def requested_penalties(request: SamplingFields, n_vocab: int) -> Penalties | None:
    """frequency_penalty, presence_penalty and logit_bias (OpenAI's {"id": bias} or llama.cpp's [[id, bias]], false banning a
    token), checked; None where the request sets none of them. llama.cpp's repeat_penalty is refused unless it is 1 (off):
    it counts the prompt, which this server's penalties do not."""
    repeat = request.option("repeat_penalty")
    if repeat is not None and _number(repeat, "repeat_penalty", float) != 1.0:
        raise UsageError(f"repeat_penalty = {repeat!r} is not supported: use frequency_penalty and presence_penalty (OpenAI's), "
                         "or leave it out (1.0 is off).")
    frequency = _number(request.option("frequency_penalty"), "frequency_penalty", float) or 0.0
    presence = _number(request.option("presence_penalty"), "presence_penalty", float) or 0.0
    for name, value in (("frequency_penalty", frequency), ("presence_penalty", presence)):
        if not -PENALTY_RANGE <= value <= PENALTY_RANGE:
            raise UsageError(f"{name} = {value}: it must be from {-PENALTY_RANGE:g} to {PENALTY_RANGE:g}.")
    bias = _logit_bias(request.option("logit_bias"), n_vocab)
    return Penalties(frequency, presence, bias) if frequency or presence or bias else None


def _logit_bias(given: Any, n_vocab: int) -> dict[int, float]:
    if given is None:
        return {}
    pairs = given.items() if isinstance(given, dict) else given if isinstance(given, list) else None
    if pairs is None:
        raise UsageError("logit_bias must be an object of token ids and biases ({\"1234\": -100}), or a list of [id, bias] pairs.")
    bias: dict[int, float] = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise UsageError(f"logit_bias: {pair!r} is not a [token id, bias] pair.")
        key, value = pair
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise UsageError(f"logit_bias: {key!r} is not a token id (a number from 0 to {n_vocab - 1}).") from None
        if not 0 <= token < n_vocab:
            raise UsageError(f"logit_bias: token {token} is not in the vocabulary (ids from 0 to {n_vocab - 1}).")
        if value is False:
            bias[token] = -np.inf  # llama.cpp's: the token is never chosen
            continue
        number = _number(value, f"logit_bias[{key!r}]", float)
        if not -BIAS_RANGE <= number <= BIAS_RANGE:
            raise UsageError(f"logit_bias[{key!r}] = {number}: a bias must be from {-BIAS_RANGE:g} to {BIAS_RANGE:g} (or false, to ban it).")
        bias[token] = number
    return bias


def _number(value: Any, name: str, kind: type) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{name} must be a number, not {value!r}.")
    return kind(value)
