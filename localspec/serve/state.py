"""What every route shares: the loaded pair (once loaded), the generation worker, the counters, the options.

Also the two steps every generating route takes: the request's settings turned
into the engine's (`generation`), and the job that builds the prompt and runs
the decoder on the worker thread (`generation_job`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from localspec.engine import defaults
from localspec.engine.decode import GenerationConfig
from localspec.engine.drafters import registry
from localspec.engine.engine import Engine
from localspec.engine.events import Finished, StopReason
from localspec.engine.model import Model
from localspec.engine.sampling import SamplingParams
from localspec.engine.stats import GenerationStats
from localspec.errors import UsageError
from localspec.serve.metrics import Metrics
from localspec.serve.options import ServeOptions
from localspec.serve.requests import SamplingFields
from localspec.serve.worker import GenerationWorker, JobRun


@dataclass(frozen=True)
class Started:
    """The prompt is built and fits: generation begins (a stream's HTTP status is settled from here on)."""

    prompt_n: int
    thinking_open: bool = False  # the prompt itself opened <think>: the answer starts inside it


@dataclass
class ServerState:
    options: ServeOptions
    worker: GenerationWorker = field(default_factory=GenerationWorker)
    metrics: Metrics = field(default_factory=Metrics)
    engine: Engine | None = None  # None while loading
    plain_ms_per_token: float = 0.0
    load_error: str | None = None

    def generation(self, request: SamplingFields, max_tokens: int | None) -> tuple[str, GenerationConfig]:
        """The drafter and the engine's settings for a request: its own fields, else the server's options."""
        assert self.engine is not None
        drafter = request.option("localspec.drafter") or self.options.drafter
        if drafter not in registry.DRAFTERS:
            raise UsageError(f"localspec.drafter must be one of {', '.join(registry.DRAFTERS)}, not {drafter!r}.")
        if registry.DRAFTERS[drafter].needs_draft_model and self.engine.draft is None:
            drafter = "none"
        n_max = _number(request.option("speculative.n_max"), "speculative.n_max", int)
        p_min = _number(request.option("speculative.p_min"), "speculative.p_min", float)
        draft_max = n_max if n_max is not None else self.options.draft_max
        draft_max = draft_max if draft_max is not None else defaults.draft_max_for(drafter, None)
        if not 0 <= draft_max <= defaults.DRAFT_MAX_LIMIT:
            raise UsageError(f"speculative.n_max must be from 0 to {defaults.DRAFT_MAX_LIMIT}, not {draft_max}.")
        if p_min is not None and not 0.0 <= p_min <= 1.0:
            raise UsageError(f"speculative.p_min must be from 0 to 1, not {p_min}.")
        if draft_max == 0:
            drafter = "none"
        sampling = SamplingParams(
            temperature=defaults.TEMPERATURE if request.temperature is None else request.temperature,
            top_k=defaults.TOP_K if request.top_k is None else request.top_k,
            top_p=defaults.TOP_P if request.top_p is None else request.top_p,
            min_p=defaults.MIN_P if request.min_p is None else request.min_p,
            seed=request.seed,
        )
        sampling.validate()
        if max_tokens is not None and max_tokens == 0:
            raise UsageError("max_tokens must be 1 or more (or left out: until the answer ends or the context is full).")
        limit = max_tokens if max_tokens is not None and max_tokens > 0 else self.engine.target.n_ctx  # the context stops it first
        config = GenerationConfig(max_tokens=limit, sampling=sampling, draft_max=draft_max,
                                  draft_p_min=self.options.draft_p_min if p_min is None else p_min, stop=request.stop_strings)
        return drafter, config

    def generation_job(self, route: str, drafter: str, build_prompt: Callable[[Model], tuple[list[int], bool]],
                       config: GenerationConfig, time_limit_ms: int = 0) -> JobRun:
        """Runs on the worker thread: the prompt (built there, beside the engine), then the decoder's events; the
        generation is counted and logged as it ends, whether its client is still there or not."""
        engine = self.engine
        assert engine is not None

        def run(cancel: threading.Event) -> Iterator[Any]:
            prompt, thinking_open = build_prompt(engine.target)
            if not prompt:
                raise UsageError("The prompt is empty: send some text to continue.")
            decoder = engine.decoder(drafter)
            decoder.check_fits(prompt)  # before Started: a stream's status is settled there
            yield Started(len(prompt), thinking_open)
            deadline = _Deadline(time_limit_ms, cancel)
            for event in decoder.generate(prompt, config, cancel):
                if isinstance(event, Finished):
                    self.finish(route, event)
                yield event
                deadline.check(getattr(event, "text", ""))

        return run

    def finish(self, route: str, finished: Finished) -> None:
        """A generation ended: count it, and say it on the terminal."""
        self.metrics.record(finished.stats)
        self.log(route, finished.stats, "cancelled (the client left)" if finished.reason is StopReason.CANCELLED else "")

    def log(self, route: str, stats: GenerationStats, status: str = "") -> None:
        """One line per request as it ends: what a user watching the terminal wants to know."""
        plain = 1000.0 / self.plain_ms_per_token if self.plain_ms_per_token else 0.0
        task = self.worker.running.number if self.worker.running else 0
        if not stats.predicted_n:  # n_predict 0, or a client that left before the first token
            done = status or "warmed the cache"
            print(f"  #{task} {route} · 0 tokens · {done}: {stats.prompt_n} prompt tokens, {stats.cache_n} already cached",
                  file=sys.stderr, flush=True)
            return
        parts = [route, f"{stats.predicted_n} tokens", f"{stats.predicted_per_second:.1f} tok/s", stats.drafter]
        if stats.draft_n:
            parts.append(f"accepted {100 * stats.acceptance_rate:.0f}% ({stats.tokens_per_step:.2f} tok/pass)")
        if plain:
            parts.append(f"{stats.predicted_per_second / plain:.2f}× plain")
        if stats.cache_n:
            parts.append(f"{stats.cache_n} prompt tokens cached")
        if status:
            parts.append(status)
        print(f"  #{task} " + " · ".join(parts), file=sys.stderr, flush=True)


class _Deadline:
    """llama.cpp's t_max_predict_ms: once a line has been written, stop when the time is up (autocomplete wants it fast)."""

    def __init__(self, limit_ms: int, cancel: threading.Event) -> None:
        self._clock = time.perf_counter
        self._end = self._clock() + limit_ms / 1000 if limit_ms > 0 else None
        self._cancel = cancel
        self._newline = False

    def check(self, text: str) -> None:
        if self._end is None:
            return
        self._newline = self._newline or "\n" in text
        if self._newline and self._clock() > self._end:
            self._cancel.set()


def _number(value: Any, name: str, kind: type) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{name} must be a number, not {value!r}.")
    return kind(value)
