"""How the bench takes a run's tokens and statistics: one run at a time, or plain decoding and auto a token each in turn.

Back to back, the same plain answer took 4.1 s and then 4.8 s on a quiet 2-core VM (nothing else running): runs wander
by 10-15%, so a difference of 2% between plain and auto cannot be seen in a few rounds of them. In lockstep
(`bench --lockstep`) the two answers advance a token each in turn and each is timed by the steps it took itself, so a
slow moment slows both. Two answers cannot share one context's cache and its compute graph (each would pay for the
other's changes of pass size), so the second runs on a second context of the same weights. Contexts differ a little
(a second load of the same file ran 1.3-2.5% faster than the first, its weights repacked elsewhere; a second context on
the same weights 0-1%), so the two modes swap contexts from round to round.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from localspec.bench.results import Mode
from localspec.engine.decode import Decoder
from localspec.engine.engine import Engine
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
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


class LockstepContexts:
    """The target's own context and a second one on its weights, and each mode's decoder on either: plain decoding and
    one other mode take them in turn, round by round."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.second = Model.beside(engine.target)
        self._beside: dict[str, Decoder] = {}  # each mode's decoder on the second context, its drafter the engine's own

    def decoder(self, mode: Mode, round_index: int) -> Decoder:
        """Plain decoding on the second context in even rounds, every other mode in odd ones."""
        own = self.engine.decoder(mode.drafter)
        if (round_index % 2 == 0) != mode.plain:
            return own
        if mode.drafter not in self._beside:
            self._beside[mode.drafter] = Decoder(self.second, own.drafter)
        return self._beside[mode.drafter]

    def close(self) -> None:
        self.second.close()
