"""What every drafter is: a proposal (`Draft`), what a sequence asks for (`Ask`), and the base class whose hooks the
decode loop calls.

Like llama.cpp's common/speculative.cpp and transformers' candidate generators,
every way of drafting sits behind one small interface; the decode loop, the
verification and the statistics know nothing of which one is running.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

import numpy as np

from localspec.engine.drafters.parts import Part
from localspec.engine.llama.entry import Entry
from localspec.engine.sampling import Distribution, Draws, SamplingParams

if TYPE_CHECKING:  # annotations only: the drafters never load a model themselves
    from pathlib import Path

    from localspec.engine.llama.eagle3_head import Eagle3File
    from localspec.engine.llama.model import Model
    from localspec.engine.pass_costs import CostTable


class Decoding(Protocol):
    """What a drafter decodes with (a Model, or a draft head: MTP, EAGLE-3): the scheduler reads its llama time and, after
    a failed pass, empties a sequence's cells."""

    decode_ns: int

    def forget(self, seq: int, from_pos: int = 0) -> int: ...


class Decision(Protocol):
    """What a drafter that chooses its draft each step (auto) chose: the statistics record it by its label, beside the
    tokens it expected the step to emit."""

    @property
    def label(self) -> str: ...

    @property
    def predicted(self) -> float: ...


@dataclass
class Fork:
    """A tree draft's second branch: from draft position `at`, these tokens instead of the main chain's."""

    at: int
    tokens: list[int]


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # q for each token, only when the draft was sampled (temperature > 0, speculative sampling).
    dists: list[Distribution] = field(default_factory=list)
    fork: Fork | None = None  # tree drafts only
    choice: Decision | None = None  # what a drafter that chooses (auto) chose for this step: the statistics record it
    forced: int = 0  # its first tokens that a grammar forced (Ask.after), which the decode loop put there

    def after_forced(self, forced: Sequence[int], sampling: SamplingParams | None) -> Draft:
        """The draft with a grammar's forced tokens put first (one-hot q at T > 0: the masked target nearly always keeps them)."""
        if not forced:
            return self
        dists = one_hot(forced) + self.dists if sampling is not None else []
        fork = None if self.fork is None else Fork(self.fork.at + len(forced), self.fork.tokens)
        return Draft([*forced, *self.tokens], dists, fork, self.choice, len(forced))

    def append(self, token: int, q: Distribution | None) -> None:
        """One more drafted token, with its q where it was sampled."""
        self.tokens.append(token)
        if q is not None:
            self.dists.append(q)

    @property
    def n_tokens(self) -> int:
        """Tokens the target verifies besides its own: both branches of a tree."""
        return len(self.tokens) + (len(self.fork.tokens) if self.fork else 0)

    def branch_length(self, branch: int) -> int:
        """Draft positions along the main chain (0) or along the fork (1)."""
        return len(self.tokens) if branch == 0 or self.fork is None else self.fork.at + len(self.fork.tokens)

    @property
    def depth(self) -> int:
        """The deepest draft position either branch reaches."""
        return max(self.branch_length(0), self.branch_length(1))

    @classmethod
    def deterministic(cls, tokens: list[int], sampling: SamplingParams | None, fork: Fork | None = None) -> Draft:
        """Tokens proposed without sampling (lookup, vetted or tree candidates): at T > 0 each carries a one-hot q."""
        return cls(tokens, one_hot(tokens) if sampling is not None else [], fork)


def one_hot(tokens: Sequence[int]) -> list[Distribution]:
    """q for tokens proposed deterministically: speculative sampling then keeps token x with probability p(x), exactly."""
    return [Distribution(np.array([t]), np.array([1.0])) for t in tokens]


@dataclass
class Ask:
    """One sequence's request for a draft this step: up to `k` tokens continuing its accepted text, greedily (sampling
    None) or sampled from q with the answer's draws, its first token at answer position `position`, stopping where the
    draft's best token is less likely than p_min. `after`: the text the answer's grammar forces next, which the decode
    loop drafts itself; a drafter that continues text (registry: Supports.CONTINUES) drafts its k tokens from its end."""

    seq: int
    k: int
    p_min: float = 0.0
    sampling: SamplingParams | None = None
    draws: Draws = field(default_factory=lambda: Draws.of(0, keyed=False))
    position: int = 0
    after: Sequence[int] = ()


@dataclass(frozen=True)
class PromptRead:
    """The target has read the first `n` tokens of `seq`'s prompt: a drafter with a model of its own may read along, so
    its first draft does not pay for the whole prompt at once."""

    seq: int
    n: int


@dataclass(frozen=True)
class TargetPass:
    """The target's pass just read these entries, every slot's: a drafter that drafts from the target's hidden states
    (a head) takes them here, before anything decodes again."""

    entries: Sequence[Entry]


@dataclass(frozen=True)
class TargetRow:
    """The target's logits where `seq`'s draft began (for the first step, the prompt's last row): how sure the target is,
    which a drafter that judges its own chances reads for free. Valid only until the next decode."""

    seq: int
    row: np.ndarray


@dataclass(frozen=True)
class StepCost:
    """A step's target pass verified `n_verified` tokens in `verify_ms`; the step spent `outside_ms` besides that pass
    (drafting included). A drafter that learns costs does it here."""

    n_verified: int
    verify_ms: float
    outside_ms: float


@dataclass(frozen=True)
class NewSession:
    """Earlier requests' text no longer counts: the next answers start new sessions (the bench's prompts)."""


Observation = PromptRead | TargetPass | TargetRow | StepCost | NewSession


@dataclass(frozen=True)
class Measured:
    """What a drafter measured of itself beside its models' llama time: its own work by name (a bridge's translation),
    in nanoseconds since it was made, which the statistics print by name; and the pass costs it prices steps with."""

    ns: Mapping[str, int] = field(default_factory=dict)
    costs: CostTable | None = None


NOTHING_MEASURED = Measured()  # most drafters' (read every step: one object, not one a call)


class Prompt(list[int]):
    """A prompt's tokens, with the chat they render (OpenAI-shaped messages; empty for a raw prompt): the conversation
    travels with the prompt, and a draft of another tokenizer reads it under its own chat template."""

    def __init__(self, tokens: Iterable[int], conversation: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(tokens)
        self.conversation = conversation


class Drafter(ABC):
    """Proposes tokens for the target to verify, for any number of sequences at once (the slots of the decode loop).

    As llama.cpp's common_speculative and vLLM's proposers: a sequence begins with its prompt, a step proposes for every
    sequence asking at once (so a draft model drafts them all in one batched pass), and each sequence then hears what
    it settled. Only `propose` is required; the other hooks do nothing unless overridden. One object serves one slot
    or many: what it keeps per sequence is keyed by the sequence id. What else the loop sees reaches every drafter as
    an observation (`observe`): a drafter takes the kinds it needs and lets the rest pass.
    """

    name: str = ""  # the registry's name: what the command line, the settings, the statistics and the bench say
    # The models it decodes with; the decoder reads their decode time (Model.decode_ns) for the Python-overhead figure.
    models: tuple[Decoding, ...] = ()

    def begin(self, seq: int, prompt: Sequence[int]) -> None:  # noqa: B027 (a hook: doing nothing is right for most drafters)
        """Sequence `seq` starts an answer to `prompt` (at least one token; from the decode loop, a Prompt that carries
        the chat it renders); the target has not read it yet."""

    @abstractmethod
    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        """A draft for each ask, in order (empty where there is nothing worth drafting)."""

    def accept(self, seq: int, tokens: Sequence[int]) -> None:  # noqa: B027 (a hook: doing nothing is right for most drafters)
        """`seq`'s accepted text grew by `tokens`: this step's accepted draft tokens, then the target's own token.

        Every sequence's drafter hears every step, whether it proposed the tokens or not.
        """

    def observe(self, seen: Observation) -> None:  # noqa: B027 (a hook: doing nothing is right for most drafters)
        """What the loop saw besides the accepted text (the Observation kinds above)."""

    def end(self, seq: int) -> None:  # noqa: B027 (a hook: doing nothing is right for most drafters)
        """`seq`'s answer ended (finished, stopped or cut); a drafter that keeps what it learned saves it here."""

    def close(self) -> None:  # noqa: B027 (a hook: doing nothing is right for most drafters)
        """The engine lets the drafter go: a context it opened on the target's weights is freed before they are."""

    def measured(self) -> Measured:
        return NOTHING_MEASURED


class NoDrafter(Drafter):
    """Plain decoding: proposes nothing, so every step is one target token."""

    name = "none"

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        return [Draft() for _ in asks]


def build_none(sources: DraftSources) -> Drafter:
    return NoDrafter()


@dataclass(frozen=True)
class DraftSetting:
    """How the loop a drafter serves runs, beside the models: what a drafter that prices its steps (auto) reads."""

    batch_costs: CostTable | None = None  # the pass costs the loop's slots share (timed at batch sizes); None for one slot
    cost_cache_dir: Path | None = None  # where measured costs are kept between runs (None: measured each time)
    report: Callable[[str], object] = lambda _stage: None  # hears what building the drafter waits on: the first answer waits too


class DraftSources(Protocol):
    """What a drafter is built from: the target, and the parts of the pair it requires (registry.Part), by name."""

    @property
    def target(self) -> Model: ...

    @property
    def offers(self) -> frozenset[Part]:
        """The parts this pair offers: a drafter runs where its row's requires are among them."""
        ...

    @overload
    def part(self, part: Literal[Part.EAGLE3_HEAD]) -> Eagle3File: ...

    @overload
    def part(self, part: Literal[Part.DRAFT_MODEL, Part.TARGET_TOKENIZER, Part.SELF_DRAFT, Part.MTP_LAYERS]) -> Model:
        """The model that is that part (MTP layers: the target that keeps them; a self draft: made and loaded on first
        use); a clear error where the pair lacks it."""
        ...

    @property
    def setting(self) -> DraftSetting: ...
