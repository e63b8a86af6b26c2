"""How the bench takes a run's tokens and statistics: one run at a time, or plain decoding and auto a step each in turn.

Back to back, the same plain answer took 4.1 s and then 4.8 s on a quiet 2-core VM (nothing else running): runs wander
by 10-15%, so a difference of 2% between plain and auto cannot be seen in a few rounds of them. In lockstep
(`bench --lockstep`) the two answers advance a token each in turn and each is timed by the steps it took itself, so a
slow moment slows both: plain against plain measured 0.990-0.998 over six rounds. Two answers cannot share one sequence
of one context, so plain decoding runs on a second copy of the target (on a CPU the weights' pages are shared;
offloaded, the target's memory is taken twice).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from localspec.engine.decode import Decoder
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.stats import GenerationStats

Run = tuple[Decoder, Sequence[int], GenerationConfig]


@dataclass
class Recording:
    """One run's emitted tokens, their margins (--margins) and, once it finished, its statistics."""

    tokens: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    stats: GenerationStats | None = None

    def take(self, event: TokenEvent | Finished) -> bool:
        """Keep one event; True once the run finished."""
        if isinstance(event, Finished):
            self.stats = event.stats
            return True
        if event.token >= 0:
            self.tokens.append(event.token)
            if event.margin is not None:
                self.margins.append(event.margin)
        return False

    @property
    def result(self) -> tuple[list[int], list[float], GenerationStats]:
        if self.stats is None:
            raise AssertionError("generate() ended without Finished")
        return self.tokens, self.margins, self.stats


def record(run: Run) -> tuple[list[int], list[float], GenerationStats]:
    """One run alone, timed by the engine (its statistics' predicted_ms)."""
    decoder, prompt, config = run
    recording = Recording()
    for event in decoder.generate(prompt, config):
        if recording.take(event):
            break
    return recording.result


def record_in_lockstep(runs: Sequence[Run]) -> list[tuple[list[int], list[float], GenerationStats]]:
    """The runs a token each in turn, in the order given; each run's predicted_ms becomes the time its own steps took
    after its first token (the wall clock would count the others' steps too). Its prompt pass comes first, alone."""
    streams: list[Iterator[TokenEvent | Finished]] = [decoder.generate(prompt, config) for decoder, prompt, config in runs]
    recordings = [Recording() for _ in runs]
    own_ns = [0] * len(runs)
    started = [False] * len(runs)
    waiting = list(range(len(runs)))
    while waiting:
        for i in list(waiting):
            start = time.perf_counter_ns()
            event = next(streams[i])
            if started[i]:
                own_ns[i] += time.perf_counter_ns() - start
            started[i] = True
            if recordings[i].take(event):
                next(streams[i], None)  # the generation's own ending
                waiting.remove(i)
    results = [recording.result for recording in recordings]
    for (_, _, stats), ns in zip(results, own_ns):
        stats.predicted_ms = ns / 1e6
    return results
