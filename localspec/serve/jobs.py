"""A request's generation as the workers run it: alone, on the one-at-a-time worker, or as a slot of the batch.

The route describes the work (the prompt to build, the settings, the drafter);
the worker decides how it runs. Either way the handler reads the same events:
Started once the prompt is built and fits, then the tokens, then Finished, and
the generation is counted and logged as it ends, whether its client stayed or not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from localspec.engine.events import Finished, StopReason
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.engine.stats import GenerationStats
from localspec.errors import UsageError

if TYPE_CHECKING:  # annotations only
    from localspec.engine.engine import Engine
    from localspec.serve.worker import Job

PromptBuilder = Callable[[Model], tuple[list[int], bool]]  # the prompt's tokens, and whether it opened <think>
OnFinish = Callable[[str, Finished, int, int], None]  # route, how it ended, arrival number, slot: counted and logged


@dataclass(frozen=True)
class Started:
    """The prompt is built and fits: generation begins (a stream's HTTP status is settled from here on)."""

    prompt_n: int
    thinking_open: bool = False  # the prompt itself opened <think>: the answer starts inside it


@dataclass(frozen=True)
class GenerationJob:
    engine: Engine
    on_finish: OnFinish
    route: str  # as the log names it: "chat, streamed"
    drafter: str
    build_prompt: PromptBuilder
    config: GenerationConfig
    time_limit_ms: int = 0  # llama.cpp's t_max_predict_ms (autocomplete)
    warm_only: bool = False  # n_predict 0: read the prompt into the cache, answer nothing

    def prompt(self, model: Model) -> tuple[list[int], bool]:
        prompt, thinking_open = self.build_prompt(model)
        if not prompt:
            raise UsageError("The prompt is empty: send some text to continue.")
        return prompt, thinking_open

    def __call__(self, job: Job) -> Iterator[Any]:
        """Run alone (the one-at-a-time worker's thread): the prompt, built beside the engine, then the decoder's events."""
        prompt, thinking_open = self.prompt(self.engine.target)
        decoder = self.engine.decoder(self.drafter)
        if self.warm_only:
            start = time.perf_counter()
            cached = decoder.warm(prompt)
            yield Started(len(prompt))
            stats = GenerationStats(drafter=self.drafter, prompt_n=len(prompt), cache_n=cached, prompt_ms=(time.perf_counter() - start) * 1000)
            finished = Finished(StopReason.MAX_TOKENS, stats, "")
            self.on_finish(self.route, finished, job.number, 0)
            yield finished
            return
        decoder.check_fits(prompt)  # before Started: a stream's status is settled there
        yield Started(len(prompt), thinking_open)
        deadline = Deadline(self.time_limit_ms, job.cancel)
        for event in decoder.generate(prompt, self.config, job.cancel):
            if isinstance(event, Finished):
                self.on_finish(self.route, event, job.number, 0)
            yield event
            deadline.check(getattr(event, "text", ""))


class Deadline:
    """llama.cpp's t_max_predict_ms: once a line has been written, stop when the time is up (autocomplete wants it fast)."""

    def __init__(self, limit_ms: int, cancel: threading.Event) -> None:
        self._clock = time.perf_counter
        self._end = self._clock() + limit_ms / 1000 if limit_ms > 0 else None
        self._cancel = cancel
        self._newline_seen = False

    def check(self, text: str) -> None:
        if self._end is None:
            return
        self._newline_seen = self._newline_seen or "\n" in text
        if self._newline_seen and self._clock() > self._end:
            self._cancel.set()
