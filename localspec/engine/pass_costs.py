"""What a pass of n tokens costs on this machine: the target's (a verify, or a batch of slots) and the draft model's or
head's (a catch-up, or n slots drafting together). auto prices its steps with them, the decode loop sizes its prompt
chunks by them, and the bench reports them.

Measured briefly at first use (calibrate), then learned from every real pass
(observe_verify, observe_draft), and kept between runs (auto's cost_cache). The draft
has its own table: a small Q4_K_M draft's batches scale worse than a Q8_0
target's (16 tokens cost it 4.8 one-token passes against the target's 4.0 on
this project's CPU), and pricing its catch-ups by the target's scale made the
draft model look cheaper than it was after every plain stretch.

A shape's first pass is not timed: it pays once for what later passes of that size reuse (the weights mapped in, a
compute graph allocated, on a GPU its kernels loaded). Timed, it priced the batches of a GPU far above their cost, and
auto, drafting nothing, never ran a batch that could have corrected the price: it chose plain decoding on every step
where the draft model ran 1.79x plain (issue 45, an H200).

A pass of another size than the context's last one costs more again: llama.cpp reuses a context's last compute graph
only for a batch of the same shape, and builds, allocates and (on CUDA) captures a new one otherwise. So each model's
table holds the cost of a pass that repeats the last one's size, and apart the price of a change of size (switch_ms).
On an H200 (a 7B-shaped Qwen3.5, issue 59) a change cost 2-3 ms beside 3.7 ms for one token: learned into the sizes'
costs, it made auto's varying K look dear, and auto ran at 0.94x plain where the MTP head at a fixed K=2 ran 1.52x.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from localspec.engine.tuning import CALIBRATION_REPEATS, CALIBRATION_SIZES, COST_DECAY, SPIKE, SPIKE_RUN

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from localspec.engine.llama.model import Model
    from localspec.engine.llama.vocabulary import Vocabulary


class Timed(Protocol):
    """What time_passes runs: a Model, or the target's MTP head seen as one (MtpDrafter.timing_view)."""

    @property
    def n_batch(self) -> int: ...

    @property
    def vocab(self) -> Vocabulary: ...

    def forget(self, seq: int, from_pos: int = 0) -> int: ...

    def decode(self, tokens: Sequence[int], outputs: int) -> np.ndarray: ...



@dataclass
class PassCosts:
    """Milliseconds one model takes for a pass of n tokens: measured sizes, and how many passes taught each."""

    ms: dict[int, float] = field(default_factory=dict)  # a pass of n tokens after one of n (the graph reused)
    observations: dict[int, float] = field(default_factory=dict)  # passes timed per size, calibration included
    switch_ms: float = 0.0  # what a pass costs beyond that after one of another size (a new graph)
    switch_observations: float = 0.0
    _spikes: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)  # spikes in a row, per size
    _sorted: list[int] = field(default_factory=list, init=False, repr=False, compare=False)
    # Every size asked since the last lesson: auto prices a few dozen candidates a step from a score of sizes.
    _asked: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def cost(self, n: int) -> float:
        """Measured where known; otherwise interpolated (or extended along the last slope) from the nearest sizes. Past
        the largest size, along the mean slope from the smallest where that is steeper: a CPU's kernels make costs
        lumpy, and the last two sizes timed can lie nearly flat (the real Q4_K_M target: 8 tokens at 3.41 one-token
        passes, 16 at 3.63), which priced 33 tokens at 4.1 where they cost 6.8-7.5; a new user's first code edits then
        bet runs of 32 and lost a quarter of their speed."""
        known = self._asked.get(n)
        if known is None:
            known = self._asked[n] = self._cost(n)
        return known

    def _cost(self, n: int) -> float:
        if n in self.ms:
            return self.ms[n]
        sizes = self.sizes
        if not sizes:
            return float(n)
        i = bisect.bisect_left(sizes, n)  # sizes[:i] are below n, sizes[i:] above (n itself is not measured)
        if 0 < i < len(sizes):
            lo, hi = sizes[i - 1], sizes[i]
            return self.ms[lo] + (self.ms[hi] - self.ms[lo]) * (n - lo) / (hi - lo)
        if len(sizes) == 1:
            return self.ms[sizes[0]] * n / sizes[0]
        beyond = i == len(sizes)
        a, b = (sizes[-2], sizes[-1]) if beyond else (sizes[0], sizes[1])
        slope = (self.ms[b] - self.ms[a]) / (b - a)
        if beyond:  # past the largest size, a pass grows at least as a token adds on average (docstring)
            slope = max(slope, (self.ms[b] - self.ms[sizes[0]]) / (b - sizes[0]))
        edge = b if beyond else a
        return max(1e-3, self.ms[edge] + slope * (n - edge))

    @property
    def sizes(self) -> list[int]:
        """The measured sizes in order; sizes are only ever added, so the sorted list is kept until one is (auto asks
        for dozens of unmeasured sizes every step)."""
        if len(self._sorted) != len(self.ms):
            self._sorted = sorted(self.ms)
        return self._sorted

    def switch(self, last: int | None, n: int) -> float:
        """The price of a pass of n tokens beyond cost(n), after one of `last` tokens (None: unknown, taken as the same)."""
        return self.switch_ms if last is not None and last != n else 0.0

    def observe(self, n: int, ms: float, switched: bool = False) -> None:
        """Learn from one pass. A single token is timed nearly every step, so it tracks the machine's speed (other
        load, clocks); when it moves, every size moves with it, or rarely timed sizes would keep costs from a faster
        moment and look cheaper than they are. A pass after one of another size (`switched`) teaches the price of the
        change, never its size's cost: at most a pass's own cost (a size's first pass loads kernels, a one-off)."""
        if switched:
            if self.ms:
                excess = min(max(0.0, ms - self.cost(n)), self.cost(n))
                weight = max(1 - COST_DECAY, 1 / (self.switch_observations + 1))
                self.switch_ms += weight * (excess - self.switch_ms)
                self.switch_observations += 1
            return
        old = self.ms.get(n)
        seen = self.observations.get(n, 0.0)
        spikes = self._spikes[n] = self._spikes.get(n, 0) + 1 if old is not None and ms > SPIKE * old else 0
        if 0 < spikes < SPIKE_RUN:  # another process took the CPU for a moment: not this pass's cost
            return
        self._asked.clear()
        # A plain mean while evidence is scarce (the calibration counts as its repeats), then a decaying one; after a run
        # of spikes, this pass alone: every one of them had been ignored (over RPC under load: 84 ms kept against 728).
        weight = 1.0 if spikes else max(1 - COST_DECAY, 1 / (seen + 1))
        new = ms if old is None else old + weight * (ms - old)
        self.observations[n] = seen + 1
        if n == 1 and old is not None:
            for size in self.ms:
                self.ms[size] *= new / old
        else:
            self.ms[n] = new


@dataclass
class CostTable:
    """The target's pass costs (what verifying n tokens takes) and the draft model's (None: no draft model)."""

    target: PassCosts = field(default_factory=PassCosts)
    draft: PassCosts | None = None
    head: PassCosts | None = None  # a head of the target's beside the draft model (timed at each load: never cached)
    fixed: bool = False  # costs measured elsewhere (a test, another machine): kept as given, not learned

    @classmethod
    def given(cls, verify_ms: dict[int, float], draft_ms_per_token: float | None = None, switch_ms: float = 0.0) -> CostTable:
        """Fixed costs (a test's, another machine's); the draft's batches, and its change of size, scale as the target's."""
        if draft_ms_per_token is None:
            return cls(PassCosts(dict(verify_ms), switch_ms=switch_ms), fixed=True)
        scale = draft_ms_per_token / verify_ms[1]
        draft = PassCosts({n: scale * ms for n, ms in verify_ms.items()}, switch_ms=scale * switch_ms)
        return cls(PassCosts(dict(verify_ms), switch_ms=switch_ms), draft, fixed=True)

    def verify(self, n: int) -> float:
        return self.target.cost(n)

    @property
    def has_draft(self) -> bool:
        return self.draft is not None and bool(self.draft.ms)

    def observe_verify(self, n: int, ms: float, switched: bool = False) -> None:
        if not self.fixed:
            self.target.observe(n, ms, switched)

    def observe_draft(self, table: PassCosts, n: int, ms: float, switched: bool = False) -> None:
        """A pass of a drafting model: the draft model's (`draft`) or a head's (`head`) table learns it."""
        if not self.fixed:
            table.observe(n, ms, switched)


def passes_timed(model: Timed, sizes: Sequence[int], repeats: int) -> int:
    """How many passes time_passes runs: each size once untimed, then twice per repeat."""
    return sum(1 + 2 * repeats for n in sizes if n <= model.n_batch)


def progress(on_stage: Callable[[str], object], what: str, total: int) -> Callable[[], None]:
    """A tick per pass that tells `on_stage` how far the timing is: on a busy machine it took a minute before the first
    token, said only as "preparing the auto drafter"."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        on_stage(f"timing {what} passes on this machine, {done} of {total} (once per pair)")

    return tick


def time_passes(model: Timed, sizes: Sequence[int], repeats: int, on_pass: Callable[[], object] = lambda: None) -> PassCosts:
    """Time `model` on each pass size, from an empty cache (then emptied again): each size twice in a row, the first
    after another size (a new graph), the second after its own (the graph reused).

    Every size runs once untimed first. The machine's speed drifts (other load, clocks) by more than the differences
    that decide K, so sizes are timed in turn within each repeat, each size's cost is taken relative to the single token timed beside it,
    and the median of those ratios scales the median single-token time: a shape that drift does not bend. The change
    of size costs the median of what the first pass of each pair took beyond the second.

    A size's sample in a repeat is the faster of its pair: another process can only slow a pass, and one slowed sample
    priced a size for good (auto never runs a size it prices high, so no pass corrects it: 2 tokens kept 2.58 one-token
    passes where they cost 1.85, 8 kept 8.41 against 7.1).
    `on_pass` hears each pass end (passes_timed counts them).
    """
    token = model.vocab.bos if model.vocab.bos >= 0 else 0
    sizes = [n for n in sizes if n <= model.n_batch]
    runs: dict[int, list[float]] = {n: [] for n in sizes}
    switches: list[float] = []
    for n in sizes:  # untimed: the first pass of a shape pays for what later ones reuse (module docstring)
        model.forget(0)
        model.decode([token] * n, outputs=n)
        on_pass()
    for _ in range(repeats):
        for n in sizes:
            after_another, after_itself = (_timed_pass(model, token, n, on_pass) for _ in range(2))
            runs[n].append(min(after_another, after_itself))
            switches.append(after_another - after_itself)
    model.forget(0)
    costs = PassCosts(switch_ms=max(0.0, statistics.median(switches)) if len(sizes) > 1 else 0.0, switch_observations=repeats)
    if 1 in runs:
        one = statistics.median(runs[1])
        for n, times in runs.items():
            costs.ms[n] = one * statistics.median(ms / single for ms, single in zip(times, runs[1]))
            costs.observations[n] = repeats
    return costs


def _timed_pass(model: Timed, token: int, n: int, on_pass: Callable[[], object]) -> float:
    model.forget(0)
    start = time.perf_counter()
    model.decode([token] * n, outputs=n)
    ms = (time.perf_counter() - start) * 1000
    on_pass()
    return ms


def calibrate(target: Model, draft: Model | None, sizes: Sequence[int] = CALIBRATION_SIZES, repeats: int = CALIBRATION_REPEATS,
              on_stage: Callable[[str], object] = lambda _stage: None) -> CostTable:
    """Both models timed at a few pass sizes (time_passes); `on_stage` hears how many passes are done."""
    total = sum(passes_timed(model, sizes, repeats) for model in (target, draft) if model is not None)
    tick = progress(on_stage, "the models'", total)
    return CostTable(time_passes(target, sizes, repeats, tick), None if draft is None else time_passes(draft, sizes, repeats, tick))
