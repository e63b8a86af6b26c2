"""Generation statistics: exact counters, cheap to keep, derived figures computed on demand.

Field names follow llama.cpp where it has one (server timings: prompt_n,
prompt_ms, predicted_n, predicted_ms; speculative: draft_n, draft_n_accepted;
common/speculative.cpp: n_acc_tokens_per_pos), so numbers compare directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from localspec.engine.drafters.auto.choice import Source, label_source


@dataclass
class GenerationStats:
    drafter: str = "none"
    draft_max: int = 0
    seed: int | None = None
    prompt_n: int = 0  # the whole prompt, cached part included
    cache_n: int = 0  # prompt tokens reused from the cache of an earlier request (llama.cpp's name), not evaluated again
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    n_steps: int = 0  # target passes during generation
    draft_n: int = 0
    draft_n_accepted: int = 0
    draft_n_per_pos: list[int] = field(default_factory=list)
    n_acc_tokens_per_pos: list[int] = field(default_factory=list)
    t_draft_ms: float = 0.0
    t_verify_ms: float = 0.0
    t_llama_ms: float = 0.0  # inside llama_decode, every model the generation used: the rest is Python
    # a drafter's own measured work by name (part of the Python: a bridge's translation between tokenizers, both ways)
    drafter_ms: dict[str, float] = field(default_factory=dict)
    # target verify passes by batch size: {n_tokens: [count, total_ms]}, for cost models
    verify_ms_by_batch: dict[int, list[float]] = field(default_factory=dict)
    # the auto controller's choices: {"ngram K=6": steps, ...}, the tokens those steps emitted, and the tokens per step it
    # predicted in total
    decisions: dict[str, int] = field(default_factory=dict)
    tokens_by_decision: dict[str, int] = field(default_factory=dict)
    predicted_tokens_total: float = 0.0
    # ...and the drafting time each choice took in all ({"model K=3": ms}): where t_draft_ms went (issue 55)
    draft_ms_by_decision: dict[str, float] = field(default_factory=dict)
    # tree drafts: steps that verified two branches, and those where the target's choice lay on the fork
    n_forks: int = 0
    n_fork_accepted: int = 0
    # the text a grammar forced, drafted ahead of the drafter's tokens (part of draft_n and draft_n_accepted too)
    forced_n: int = 0
    forced_n_accepted: int = 0
    # the grammar's own time (masking verify rows, finding forced text, following the answer) and the rows it masked
    t_grammar_ms: float = 0.0
    grammar_rows: int = 0

    def record_step(self, n_drafted: int, n_accepted: int, draft_ms: float, verify_ms: float, target_decode_ms: float, depth: int) -> None:
        """One target pass; `depth` is the deepest draft position, below n_drafted only for a tree's two branches."""
        self.n_steps += 1
        self.draft_n += n_drafted
        self.draft_n_accepted += n_accepted
        self._reach_position(depth)
        for i in range(depth):
            self.draft_n_per_pos[i] += 1
        for i in range(n_accepted):
            self.n_acc_tokens_per_pos[i] += 1
        self.t_draft_ms += draft_ms
        self.t_verify_ms += verify_ms
        entry = self.verify_ms_by_batch.setdefault(n_drafted + 1, [0, 0.0])
        entry[0] += 1
        entry[1] += target_decode_ms

    def record_forced(self, n_forced: int, n_accepted: int) -> None:
        """A step whose draft began with `n_forced` tokens a grammar forced, `n_accepted` of them kept: a source of its own
        among the decisions (GRAMMAR), its steps and tokens beside the drafter's."""
        self.forced_n += n_forced
        self.forced_n_accepted += n_accepted
        label = Source.GRAMMAR.value
        self.decisions[label] = self.decisions.get(label, 0) + 1
        self.tokens_by_decision[label] = self.tokens_by_decision.get(label, 0) + n_accepted

    def record_decision(self, label: str, predicted_tokens: float, draft_ms: float, tokens: int) -> None:
        """One step's choice (auto's), and the tokens the step emitted."""
        self.decisions[label] = self.decisions.get(label, 0) + 1
        self.tokens_by_decision[label] = self.tokens_by_decision.get(label, 0) + tokens
        self.predicted_tokens_total += predicted_tokens
        self.draft_ms_by_decision[label] = self.draft_ms_by_decision.get(label, 0.0) + draft_ms

    @property
    def predicted_tokens_per_step(self) -> float | None:
        """What the controller expected per step (a grammar's forced tokens included), to set beside tokens_per_step
        (what it got)."""
        steps = sum(count for label, count in self.decisions.items() if label != Source.GRAMMAR.value)
        return self.predicted_tokens_total / steps if steps else None

    @property
    def by_source(self) -> list[SourceShare]:
        """auto's choices by what drafted them (plain, lookup, the draft model...), and a grammar's forced text, most tokens
        first: the one split the app's panel, generate's summary and the server's statistics show. Empty for a drafter that
        does not choose, without a grammar."""
        shares: dict[Source, list[int]] = {}
        for label, steps in self.decisions.items():
            share = shares.setdefault(label_source(label), [0, 0])
            share[0] += steps
            share[1] += self.tokens_by_decision.get(label, 0)
        return sorted((SourceShare(source, steps, tokens) for source, (steps, tokens) in shares.items()), key=lambda s: (-s.tokens, -s.steps))

    def _reach_position(self, n: int) -> None:
        """Grow the per-position counters to cover n draft positions."""
        while len(self.draft_n_per_pos) < n:
            self.draft_n_per_pos.append(0)
            self.n_acc_tokens_per_pos.append(0)

    @classmethod
    def total(cls, runs: Iterable[GenerationStats]) -> GenerationStats:
        """Several runs summed into one, so that rates are total tokens over total time."""
        total = cls()
        for s in runs:
            for name in ("prompt_n", "cache_n", "prompt_ms", "predicted_n", "predicted_ms", "n_steps", "draft_n", "draft_n_accepted",
                         "t_draft_ms", "t_verify_ms", "t_llama_ms", "predicted_tokens_total", "n_forks", "n_fork_accepted",
                         "forced_n", "forced_n_accepted", "t_grammar_ms", "grammar_rows"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            total._reach_position(len(s.draft_n_per_pos))
            for i, (drafted, accepted) in enumerate(zip(s.draft_n_per_pos, s.n_acc_tokens_per_pos)):
                total.draft_n_per_pos[i] += drafted
                total.n_acc_tokens_per_pos[i] += accepted
            for batch, (count, ms) in s.verify_ms_by_batch.items():
                entry = total.verify_ms_by_batch.setdefault(batch, [0, 0.0])
                entry[0] += count
                entry[1] += ms
            for label, count in s.decisions.items():
                total.decisions[label] = total.decisions.get(label, 0) + count
            for label, tokens in s.tokens_by_decision.items():
                total.tokens_by_decision[label] = total.tokens_by_decision.get(label, 0) + tokens
            for label, ms in s.draft_ms_by_decision.items():
                total.draft_ms_by_decision[label] = total.draft_ms_by_decision.get(label, 0.0) + ms
            for name, ms in s.drafter_ms.items():
                total.drafter_ms[name] = total.drafter_ms.get(name, 0.0) + ms
        return total

    @property
    def acceptance_rate(self) -> float:
        return self.draft_n_accepted / self.draft_n if self.draft_n else 0.0

    @property
    def acceptance_by_source(self) -> dict[str, float]:
        """The share of drafted tokens kept, for the grammar's forced text and for the drafter's own tokens apart."""
        own_n, own_accepted = self.draft_n - self.forced_n, self.draft_n_accepted - self.forced_n_accepted
        shares = {Source.GRAMMAR.value: (self.forced_n_accepted, self.forced_n), self.drafter: (own_accepted, own_n)}
        return {source: kept / n for source, (kept, n) in shares.items() if n}

    @property
    def grammar_ms_per_row(self) -> float:
        """What a grammar costs a target row: what a plain step under it pays besides the pass (session/plain_rate.py)."""
        return self.t_grammar_ms / self.grammar_rows if self.grammar_rows else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """Among drafts that reached position i, the share whose tokens 0..i were all accepted (cumulative)."""
        return [a / n if n else 0.0 for a, n in zip(self.n_acc_tokens_per_pos, self.draft_n_per_pos)]

    @property
    def draft_reach_by_position(self) -> list[float]:
        """Share of steps whose draft got as far as position i (below 1 when the confidence cut-off stops it)."""
        return [n / self.n_steps for n in self.draft_n_per_pos] if self.n_steps else []

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens the target settles per pass: accepted drafts plus its own token."""
        return (self.draft_n_accepted + self.n_steps) / self.n_steps if self.n_steps else 0.0

    @property
    def predicted_per_second(self) -> float:
        return 1000.0 * self.predicted_n / self.predicted_ms if self.predicted_ms else 0.0

    @property
    def t_other_ms(self) -> float:
        return max(0.0, self.predicted_ms - self.t_draft_ms - self.t_verify_ms)

    @property
    def python_ms_per_step(self) -> float:
        """Wall time per step outside llama_decode: sampling, verification, bookkeeping."""
        return (self.predicted_ms - self.t_llama_ms) / self.n_steps if self.n_steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in self.__dict__.items() if k != "verify_ms_by_batch"}
        out["verify_ms_by_batch"] = {str(k): {"n": int(v[0]), "ms": v[1]} for k, v in sorted(self.verify_ms_by_batch.items())}
        for name in ("acceptance_rate", "acceptance_by_source", "grammar_ms_per_row",
                     "acceptance_by_position", "draft_reach_by_position", "tokens_per_step", "predicted_per_second",
                     "t_other_ms", "python_ms_per_step", "predicted_tokens_per_step"):
            out[name] = getattr(self, name)
        out["decisions_by_source"] = decisions_by_source(self)
        return out


@dataclass(frozen=True)
class SourceShare:
    """The steps auto drafted from one source, and the tokens they emitted (the answer's first token, from the prompt's
    pass, is no step's)."""

    source: Source
    steps: int
    tokens: int


def decisions_by_source(stats: GenerationStats) -> dict[str, dict[str, int]]:
    """The split as JSON (generate --json, the server's `localspec` statistics and /slots): {"model": {"steps", "tokens"}}."""
    return {share.source.value: {"steps": share.steps, "tokens": share.tokens} for share in stats.by_source}
