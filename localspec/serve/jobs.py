"""A request's generation as the worker runs it, in a slot of the decode loop.

The route describes the work (the prompt to build, the settings, the drafter);
the worker decides how it runs. The handler reads Started once the prompt is
built and fits, then the tokens, then Finished, and the generation is counted
and logged as it ends, whether its client stayed or not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localspec.engine.events import Finished
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.errors import UsageError

if TYPE_CHECKING:  # annotations only
    from localspec.engine.engine import Engine

PromptBuilder = Callable[[Model], tuple[list[int], bool]]  # the prompt's tokens, and whether it opened <think>
OnFinish = Callable[[str, Finished, int, int, bool], None]  # route, how it ended, arrival number, slot, whether t_max_predict_ms
# cut it: counted and logged


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


class Deadline:
    """llama.cpp's t_max_predict_ms: once a line has been written, stop when the time is up (autocomplete wants it fast)."""

    def __init__(self, limit_ms: int, cancel: threading.Event) -> None:
        self._clock = time.perf_counter
        self._end = self._clock() + limit_ms / 1000 if limit_ms > 0 else None
        self._cancel = cancel
        self._newline_seen = False
        self.expired = False  # it cut the answer (a cancel the log must not blame on the client)

    def check(self, text: str) -> None:
        if self._end is None or self.expired:
            return
        self._newline_seen = self._newline_seen or "\n" in text
        if self._newline_seen and self._clock() > self._end:
            self.expired = True
            self._cancel.set()
