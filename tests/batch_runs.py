"""Running the batch scheduler to the end in tests: requests in, each one's events out (like conftest.run)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from localspec.engine.batch.scheduler import BatchScheduler
from localspec.engine.batch.slot import SlotRequest
from localspec.engine.drafters.base import Drafter
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.generation_config import GenerationConfig
from tests.conftest import Run


@dataclass
class Collected:
    events: list[TokenEvent] = field(default_factory=list)
    finished: Finished | None = None
    error: BaseException | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def emit(self, event: TokenEvent | Finished) -> None:
        assert self.finished is None, "an event after Finished"
        if isinstance(event, Finished):
            self.finished = event
        else:
            self.events.append(event)

    def fail(self, error: BaseException) -> None:
        self.error = error

    def request(self, prompt: list[int], config: GenerationConfig, drafter: Drafter) -> SlotRequest:
        return SlotRequest(prompt, replace(config, record_margins=True), drafter, self.emit, self.fail, self.cancel)

    @property
    def run(self) -> Run:
        assert self.finished is not None, self.error
        return Run([e.token for e in self.events if e.token >= 0], self.events, self.finished)


def run_batch(scheduler: BatchScheduler, jobs: list[tuple[list[int], GenerationConfig, Drafter]],
              each_step=None) -> list[Collected]:
    """Submit jobs as slots free up (in order), step until all have finished; `each_step(step_number, collected)` may cancel."""
    collected = [Collected() for _ in jobs]
    waiting = list(range(len(jobs)))
    steps = 0
    while waiting or scheduler.busy:
        while waiting and scheduler.n_free:
            i = waiting.pop(0)
            prompt, config, drafter = jobs[i]
            scheduler.add(collected[i].request(prompt, config, drafter))
        scheduler.step()
        steps += 1
        if each_step is not None:
            each_step(steps, collected)
        assert steps < 100_000
    return collected
