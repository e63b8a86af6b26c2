"""A slot: one sequence of the shared caches, and the generation it is running (if any)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.base import Drafter
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.engine.sampling import Draws
from localspec.engine.stats import GenerationStats
from localspec.engine.text import TextAssembler
from localspec.engine.tokens import common_prefix


@dataclass
class SlotRequest:
    """A generation to run: what the caller gives, and where its events go (called on the scheduler's thread)."""

    prompt: Sequence[int]
    config: GenerationConfig
    drafter: Drafter  # drafts for this request, on its slot's sequence (one object serves every slot running it)
    emit: Callable[[TokenEvent | Finished], None]
    fail: Callable[[BaseException], None]  # the batch's pass failed: this request ends with the error
    cancel: threading.Event = field(default_factory=threading.Event)


@dataclass
class Generation:
    """What one running request keeps between steps."""

    request: SlotRequest
    draws: Draws
    stats: GenerationStats
    text: TextAssembler
    started_ns: int
    arrival: int  # prompts are read in arrival order
    generating_since_ns: int = 0  # 0 while the prompt is still being read
    llama_ns: int = 0  # decode time of the passes this request took part in
    drafter_ns: dict[str, int] = field(default_factory=dict)  # its drafter's own measured work in its steps, by name (Drafter.measured)

    @property
    def prompt(self) -> Sequence[int]:
        return self.request.prompt  # a list: the scheduler copies it on arrival


@dataclass
class Slot:
    """Sequence `seq` of the target's cache (and of its drafters' models), and the request it runs."""

    seq: int
    target: Model
    generation: Generation | None = None
    last: int = -1  # the settled token not yet in the target's cache: the next verify batch starts with it
    last_used: int = 0  # the arrival number of its latest request (0: never used)

    @property
    def cached(self) -> list[int]:
        """The target's cells for this sequence, in position order (the model's own record: read, never written here)."""
        return self.target.cells.tokens[self.seq]

    @property
    def canonical(self) -> int:
        """Of those, the leading ones read as prompt in canonical passes: what a later prompt may reuse."""
        return self.target.cells.canonical[self.seq]

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

