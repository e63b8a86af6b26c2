"""What a step of the planner's choices costs: the drafting passes, one target pass, the step's overhead.

A slot's draft tokens join a target pass that the other slots' tokens already make, so they cost the marginal cost of
a bigger batch (verify(n + k) - verify(n)); a model's passes are shared the same way, one per draft position for every
slot drafting that deep. One slot is a batch of one: it is priced by the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.auto.candidates import SlotOptions
from localspec.engine.drafters.auto.catch_up import batch_share
from localspec.engine.drafters.auto.choice import Choice, Source
from localspec.engine.drafters.auto.model_source import ModelSource
from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import SWITCH_LEGS


def drafted_by(choice: Choice) -> Source:
    """The source of `choice`'s model tokens (a hybrid's: the draft model)."""
    return Source.MODEL if choice.source is Source.HYBRID else choice.source


def source_of(sources: Sequence[ModelSource], choice: Choice) -> ModelSource:
    """The model that drafts `choice`'s model tokens."""
    wanted = drafted_by(choice)
    return next(source for source in sources if source.source is wanted)


@dataclass
class StepPrice:
    """Steps priced at the costs of one moment: a plan's (costs move only between plans, as passes teach them), so what
    many candidates share (a size's target pass, a model's catch-up) is worked out once."""

    costs: CostTable
    sources: Sequence[ModelSource]
    overhead_ms: float  # a step's time outside its passes (Python, sampling): paid whatever is drafted
    last_verify: int | None  # the size of the last target pass: a pass of another size pays for a new graph
    _target_ms: dict[int, float] = field(default_factory=dict)
    _first_pass_ms: dict[tuple[object, ...], tuple[float, int]] = field(default_factory=dict)  # and the size it reads

    def target_ms(self, n_verify: int) -> float:
        """A step's time besides its drafting passes: its overhead, a target pass of n_verify tokens and its change of size."""
        ms = self._target_ms.get(n_verify)
        if ms is None:
            ms = self._target_ms[n_verify] = (self.overhead_ms + self.costs.verify(n_verify)
                                              + SWITCH_LEGS * self.costs.target.switch(self.last_verify, n_verify))
        return ms

    def target_ms_from(self, n_verify: int, count: int) -> list[float]:
        """target_ms of `count` passes from n_verify tokens up, one token more each: a slot's lookup K's, priced together."""
        target, overhead, last = self.costs.target, self.overhead_ms, self.last_verify
        changed = SWITCH_LEGS * target.switch(last, -1)  # after a pass of another size (-1: a size no pass has)
        kept = changed if last is None else SWITCH_LEGS * target.switch(last, last)
        return [overhead + target.cost(n) + (kept if n == last else changed) for n in range(n_verify, n_verify + count)]

    def step_ms(self, choices: Sequence[Choice], slots: Sequence[SlotOptions], spread: bool = False) -> float:
        """The expected time of the step the choices make. `spread`: as choices weigh it, each slot's catch-up beyond its
        first tokens spread over the asks a resume buys there (catch_up.py)."""
        return self._priced(choices, slots, spread)[1]

    def rate(self, choices: Sequence[Choice], slots: Sequence[SlotOptions]) -> float:
        """Expected tokens per ms of the step, as choices weigh it."""
        tokens, ms = self._priced(choices, slots, spread=True)
        return tokens / ms

    def drafting_ms(self, choices: Sequence[Choice], slots: Sequence[SlotOptions], spread: bool) -> float:
        """Every model source's passes for the slots that draft with it."""
        return self._priced(choices, slots, spread, with_target=False)[1]

    def _priced(self, choices: Sequence[Choice], slots: Sequence[SlotOptions], spread: bool, with_target: bool = True) -> tuple[float, float]:
        """The tokens the step is expected to emit, and its time (with its target pass, or its drafting passes alone)."""
        tokens, n_verify = 0.0, 0
        asking: dict[Source, list[tuple[Choice, SlotOptions]]] = {}
        for choice, options in zip(choices, slots):
            tokens += choice.predicted + options.forced
            n_verify += choice.k + 1 + options.forced
            if choice.model_k:
                asking.setdefault(drafted_by(choice), []).append((choice, options))
        ms = self.target_ms(n_verify) if with_target else 0.0
        for source in self.sources if asking else ():
            drafting = asking.get(source.source)
            if drafting:
                ms = self._source_ms(source, drafting, spread, ms)
        return tokens, ms

    def _source_ms(self, source: ModelSource, drafting: Sequence[tuple[Choice, SlotOptions]], spread: bool, ms: float) -> float:
        """`ms` and one source's passes for the slots drafting with it. The first pass reads, for each slot, what it has
        not seen (at least its last token), the text its grammar forced and a hybrid's lookup tokens, and gives each one's
        first draft token; then a pass per position, of the slots reaching it."""
        queued: list[int] = []  # each slot's tokens the source has not read
        reads: list[int] = []  # and its forced and lookup tokens, read with them
        spreads: list[float] = []  # the asks a resume buys there (catch_up.py)
        for choice, options in drafting:
            queued.append(options.pending_for(source.source))
            reads.append(options.forced + choice.lookup_k)
            spreads.append(options.belief.resume_runs.expected)
        runs = _reach([choice.model_k for choice, _ in drafting])
        if source.chained_heads:
            # Every head reads the queued tokens; one is the step's own, paid whole as the draft model's first token is,
            # and more are a catch-up, spread.
            reach = [n for n, positions in runs for _ in range(positions)]
            return ms + source.chained_ms(sum(queued), reach, batch_share([n if n > 1 else 0 for n in queued], spreads) if spread else 1.0)
        # The catch-up is the same for every K the slots may draft: priced once.
        key = (source.source, spread, *queued, *reads, *spreads)
        first_pass = self._first_pass_ms.get(key)
        if first_pass is None:
            n_whole = sum(max(1, n) + read for n, read in zip(queued, reads))
            first, whole = source.costs.cost(len(reads) + sum(reads)), source.costs.cost(n_whole)
            first_pass = self._first_pass_ms[key] = (
                first + (whole - first) * (batch_share([max(1, n) - 1 for n in queued], spreads) if spread else 1.0), n_whole)
        ms += first_pass[0]
        deeper_ms, sizes = 0.0, [first_pass[1]]
        for i, (n, positions) in enumerate(runs):
            passes = positions - 1 if i == 0 else positions  # the first position is the first pass's
            if passes:
                deeper_ms += passes * source.costs.cost(n)
                sizes.append(n)
        return ms + (deeper_ms + source.switches(sizes))


def _reach(depths: Sequence[int]) -> list[tuple[int, int]]:
    """How many slots draft each position (a slot drafting k tokens reaches positions 0..k-1), as runs from position 0:
    (slots, positions), fewer slots from run to run. A change of pass size can only come between runs."""
    runs: list[tuple[int, int]] = []
    position = 0
    for i, depth in enumerate(sorted(depths)):
        if depth > position:
            runs.append((len(depths) - i, depth - position))
            position = depth
    return runs
