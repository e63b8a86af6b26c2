"""A slot: one sequence of the shared caches, and the generation it is running (if any)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.auto.agreement import ShadowRun
from localspec.engine.drafters.auto.belief import SequenceBelief
from localspec.engine.drafters.base import Drafter
from localspec.engine.drafters.ngram import LookupMemory, NgramDrafter
from localspec.engine.drafters.registry import BatchRole
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.engine.stats import GenerationStats
from localspec.engine.text import TextAssembler
from localspec.engine.tokens import common_prefix


@dataclass
class SlotRequest:
    """A generation to run: what the caller gives, and where its events go (called on the scheduler's thread)."""

    prompt: Sequence[int]
    config: GenerationConfig
    drafter: str
    emit: Callable[[TokenEvent | Finished], None]
    fail: Callable[[BaseException], None]  # the batch's pass failed: this request ends with the error
    cancel: threading.Event = field(default_factory=threading.Event)
    # A one-sequence drafter object that drafts for this request (batch/solo.py), where the slot is its scheduler's only
    # one; None: the batch drafts for it by its drafter's batch role.
    solo: Drafter | None = None


@dataclass
class Generation:
    """What one running request keeps between steps."""

    request: SlotRequest
    role: BatchRole | None  # how the batch drafts for its drafter (the registry's batch_role); None: request.solo drafts
    rng: np.random.Generator
    stats: GenerationStats
    text: TextAssembler
    started_ns: int
    arrival: int  # prompts are read in arrival order
    lookup: NgramDrafter | None = None
    shadows: list[ShadowRun] = field(default_factory=list)
    generating_since_ns: int = 0  # 0 while the prompt is still being read
    llama_ns: int = 0  # decode time of the passes this request took part in

    @property
    def prompt(self) -> Sequence[int]:
        return self.request.prompt  # a list: the scheduler copies it on arrival


@dataclass
class Slot:
    """Sequence `seq` of the target's cache (and the draft's), and the request it runs."""

    seq: int
    target: Model
    draft: Model | None = None
    generation: Generation | None = None
    last: int = -1  # the settled token not yet in the target's cache: the next verify batch starts with it
    last_used: int = 0  # the arrival number of its latest request (0: never used)
    # Prompt lookup over this request's text and, through its memory, the slot's earlier prompts and answers.
    lookup: NgramDrafter = field(default_factory=lambda: NgramDrafter(memory=LookupMemory()))
    belief: SequenceBelief = field(default_factory=SequenceBelief)  # what auto keeps of the slot's answers (belief.py)

    @property
    def cached(self) -> list[int]:
        """The target's cells for this sequence, in position order (the model's own record: read, never written here)."""
        return self.target.cells.tokens[self.seq]

    @property
    def canonical(self) -> int:
        """Of those, the leading ones read as prompt in canonical passes: what a later prompt may reuse."""
        return self.target.cells.canonical[self.seq]

    @property
    def draft_cached(self) -> list[int]:
        """The draft model's cells for this sequence (none without a draft model)."""
        return self.draft.cells.tokens[self.seq] if self.draft is not None else []

    @property
    def busy(self) -> bool:
        return self.generation is not None

    @property
    def job(self) -> Generation:
        """The request a busy slot runs (the scheduler asks only busy slots)."""
        if self.generation is None:
            raise AssertionError(f"slot {self.seq} is idle: it runs no request")
        return self.generation

    @property
    def prefilling(self) -> bool:
        """Still reading its prompt (the pass that reads its last token judges the answer's first)."""
        return self.generation is not None and len(self.cached) < len(self.generation.prompt)

    def shared_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` this slot's target cache already holds."""
        return common_prefix(self.cached, tokens)

