"""One sequence's generations with one drafter: the batch scheduler with one slot.

There is one decode loop (engine/batch/scheduler.py); a Decoder runs it with a
single slot, on sequence 0 of the target's cache (its second holds a tree's fork), so
what one generation leaves there (its prompt and answer) is the next one's
prompt cache. Plain decoding is the same loop with a
drafter that proposes nothing, so the baseline and speculation share every line
of bookkeeping and every statistic.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from localspec.engine.batch.scheduler import BatchScheduler
from localspec.engine.batch.slot import SlotRequest
from localspec.engine.drafters.base import Drafter, NoDrafter
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model


class Decoder:
    def __init__(self, target: Model, drafter: Drafter | None = None) -> None:
        self.target = target
        self.drafter: Drafter = drafter or NoDrafter()
        self._loop = BatchScheduler.alone(target)

    def generate(
        self, prompt: Sequence[int], config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[TokenEvent | Finished]:
        """Yield a TokenEvent per emitted token, then exactly one Finished; a prompt that leaves no room for an answer is
        refused (PromptTooLongError) before anything is decoded."""
        events: list[TokenEvent | Finished] = []
        failures: list[BaseException] = []
        slot = self._loop.add(SlotRequest(prompt, config, self.drafter, events.append, failures.append, cancel or threading.Event()))
        try:
            while slot.generation is not None:
                self._loop.step()
                if failures:
                    raise failures[0]
                yield from events
                events.clear()
        finally:
            if slot.busy:  # the caller stopped early (or a step raised): the slot is free for the next generation
                self._loop.release(slot)
