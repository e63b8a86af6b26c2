"""Every drafter, by the one name the command line, the settings, the statistics and the bench use.

Adding a drafter is one row here and a module with a `build(sources)` function;
the command line's choices, the app's settings list, the bench's sweep and the
engine all read this table (a test checks the README's list against it).

Rows name their module instead of importing it: the command line reads this
table for its help, and importing the drafters would load numpy and llama.cpp first.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from localspec.engine.drafters.parts import Part as Part  # every door names a part as registry.Part
from localspec.engine.errors import EngineError

if TYPE_CHECKING:  # annotations only (see the module's docstring)
    from localspec.engine.drafters.base import Drafter, DraftSources


class Supports(Enum):
    """What a drafter can do beyond proposing one chain of tokens for one answer."""

    SLOTS = "several slots"  # it drafts for several slots sharing the target's passes (else: a sequence of its own)
    GRAMMAR = "a grammar"  # it drafts under a grammar and penalties (else: the request must pick another drafter)
    CONTINUES = "continues"  # it drafts from the end of text the decode loop puts first (a grammar's forced text, Ask.after)
    FORK = "a tree's second sequence"  # its draft may fork (Draft.fork): the target holds a second sequence for it
    CHOOSES_K = "choosing K"  # it picks K each step: the K it is given is only a cap (defaults.AUTO_DRAFT_MAX)
    SAMPLE_MATCH = "sample-and-match"  # its tokens can be judged by sample-and-match too (it samples them from its own q)
    AUTO_SOURCE = "an auto source"  # auto may draft a step with it, priced pass by pass, where the pair offers its parts


SHARED = frozenset({Supports.SLOTS, Supports.GRAMMAR})  # what every chain drafter supports
DRAFTER_TOKENS = SHARED | {Supports.CONTINUES}  # a chain drafter that can draft after forced text


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    description: str
    shown: str  # the name a person reads for its steps (the app's panel, generate's summary)
    module: str  # under localspec.engine.drafters, holding `build(sources) -> Drafter`
    builder: str = "build"
    requires: frozenset[Part] = frozenset()
    supports: frozenset[Supports] = SHARED
    reference: str | None = None  # llama.cpp's --spec-type that drafts as it does: the bench runs llama-speculative-simple beside it
    drafts: bool = True  # False for plain decoding alone: every door offers it as "nothing drafted", and no step asks it

    def build(self, sources: DraftSources) -> Drafter:
        drafter: Drafter = getattr(importlib.import_module(f"localspec.engine.drafters.{self.module}"), self.builder)(sources)
        return drafter

    @property
    def needs_draft_model(self) -> bool:
        return Part.DRAFT_MODEL in self.requires

    @property
    def through_text(self) -> bool:
        """It runs a draft of another tokenizer than the target's, its text re-tokenized for the target."""
        return self.needs_draft_model and Part.TARGET_TOKENIZER not in self.requires

    @property
    def target_sequences(self) -> int:
        """Sequences the target's cache must hold for one slot: a fork's branch takes a second."""
        return 2 if Supports.FORK in self.supports else 1


_DRAFT = frozenset({Part.DRAFT_MODEL, Part.TARGET_TOKENIZER})
_SPECS = (
    DrafterSpec("auto", "the adaptive controller: per step, plain, prompt lookup or the draft model, and K, whichever is fastest", "auto",
                "auto.controller", supports=DRAFTER_TOKENS | {Supports.CHOOSES_K}),
    DrafterSpec("model", "the draft model proposes K tokens", "draft model", "draft_model", "build_model", requires=_DRAFT,
                supports=DRAFTER_TOKENS | {Supports.SAMPLE_MATCH, Supports.AUTO_SOURCE}, reference="draft-simple"),
    DrafterSpec("ngram", "prompt lookup: continues text that occurred before (no model time)", "lookup", "ngram", supports=DRAFTER_TOKENS),
    DrafterSpec("hybrid", "prompt lookup, continued by the draft model where it runs short", "lookup+model", "hybrid", requires=_DRAFT,
                supports=DRAFTER_TOKENS),
    DrafterSpec("hierarchical", "prompt lookup, vetted by the draft model; the target sees only what the draft agrees with", "hierarchical",
                "hierarchical", requires=_DRAFT),
    DrafterSpec("tree", "the draft model forks at an unsure token; both branches are verified in one target pass", "tree", "tree",
                requires=_DRAFT, supports=frozenset({Supports.FORK})),
    DrafterSpec("self", "a draft cut from the target's own first blocks (made once, cached); no draft model needed", "self draft",
                "draft_model", "build_self", requires=frozenset({Part.SELF_DRAFT}), supports=DRAFTER_TOKENS),
    DrafterSpec("mtp", "the target's own MTP layers draft (a Qwen3.5/3.6, GLM or MiMo GGUF that keeps them); no draft model", "MTP head",
                "mtp", requires=frozenset({Part.MTP_LAYERS}), supports=SHARED | {Supports.SAMPLE_MATCH, Supports.AUTO_SOURCE},
                reference="draft-mtp"),
    DrafterSpec("eagle3", "an EAGLE-3 head (--draft, an eagle3 GGUF made for the target) drafts from three of the target's layers", "EAGLE-3 head",
                "eagle3", requires=frozenset({Part.EAGLE3_HEAD}), supports=SHARED | {Supports.SAMPLE_MATCH, Supports.AUTO_SOURCE},
                reference="draft-eagle3"),
    DrafterSpec("bridged", "the draft model, of another tokenizer than the target's: its text is re-tokenized for the target", "bridged draft",
                "bridged", requires=frozenset({Part.DRAFT_MODEL}), supports=SHARED | {Supports.AUTO_SOURCE}),
    DrafterSpec("none", "plain decoding", "plain", "base", "build_none", drafts=False),
)
DRAFTERS: dict[str, DrafterSpec] = {spec.name: spec for spec in _SPECS}
DEFAULT = "auto"
PLAIN = next(name for name, spec in DRAFTERS.items() if not spec.drafts)  # what a request that drafts nothing runs
ADAPTIVE = next(name for name, spec in DRAFTERS.items() if Supports.CHOOSES_K in spec.supports)  # the bench compares the fixed ones with it
FIXED = tuple(name for name, spec in DRAFTERS.items() if spec.drafts and name != ADAPTIVE)  # a drafter at a set K each
BATCH_DRAFTERS = tuple(name for name, spec in DRAFTERS.items() if Supports.SLOTS in spec.supports)
NO_DRAFT_MODEL = tuple(name for name, spec in DRAFTERS.items() if not spec.needs_draft_model)
THROUGH_TEXT = tuple(name for name, spec in DRAFTERS.items() if spec.through_text)  # they run a draft of another tokenizer
AUTO_SOURCES = tuple(spec for spec in DRAFTERS.values() if Supports.AUTO_SOURCE in spec.supports)  # in the order auto prefers them


@dataclass(frozen=True)
class PairParts:
    """What a pair offers the drafters beside its target (a draft model, of the target's tokenizer or not, MTP layers in
    the target's file, an EAGLE-3 head): a drafter runs where the pair offers every part it requires."""

    offers: frozenset[Part]

    @classmethod
    def of(cls, *parts: Part) -> PairParts:
        return cls(frozenset(parts))

    @classmethod
    def offered(cls, draft_model: bool, same_tokenizer: bool, mtp_layers: bool, eagle3_head: bool) -> PairParts:
        """A loaded pair's parts, or a pair's as its files' headers say (the bench, before it loads): a self draft can
        always be cut from the target."""
        offered = {Part.SELF_DRAFT}
        if draft_model:
            offered |= {Part.DRAFT_MODEL, Part.TARGET_TOKENIZER} if same_tokenizer else {Part.DRAFT_MODEL}
        if mtp_layers:
            offered.add(Part.MTP_LAYERS)
        if eagle3_head:
            offered.add(Part.EAGLE3_HEAD)
        return cls(frozenset(offered))

    @classmethod
    def before_load(cls, draft_model: bool) -> PairParts:
        """Before a load only whether a draft is given is known: the rest counts as there (the engine says at load)."""
        rest = {Part.SELF_DRAFT, Part.MTP_LAYERS, Part.EAGLE3_HEAD}
        return cls(frozenset(rest | (_DRAFT if draft_model else set())))

    def lacks(self, row: DrafterSpec) -> str:
        """What the pair lacks for `row` to run ('' where nothing): the first part missing, in Part's order."""
        return next((part.value for part in Part if part in row.requires and part not in self.offers), "")

    def problem(self, name: str) -> str:
        """Why drafter `name` cannot run on this pair, and which can ('' where it can): the one wording every door
        says it in, the app's settings as the drafter is picked, a request when it asks for it."""
        lacking = self.lacks(spec(name))
        if not lacking:
            return ""
        # those that draft with the pair's own draft first: a draft of another tokenizer still drafts through text
        runnable = sorted((other for other, row in DRAFTERS.items() if row.drafts and not self.lacks(row)),
                          key=lambda other: not DRAFTERS[other].needs_draft_model)
        choices = f"{', '.join(runnable[:-1])} or {runnable[-1]}" if len(runnable) > 1 else runnable[0]
        return f"the {name} drafter needs {lacking}, which this pair lacks: pick {choices}"


def spec(name: str) -> DrafterSpec:
    """The row for `name`; a clear error for a name that is none of them."""
    if name not in DRAFTERS:
        raise EngineError(f"Unknown drafter {name!r}: choose one of {', '.join(DRAFTERS)}.")
    return DRAFTERS[name]


def bridge_note(difference: str) -> str:
    """What a draft of another tokenizer does, in the one wording `check`, the app and a load say it."""
    names = " or ".join(f"--drafter {name}" for name in THROUGH_TEXT)
    return (f"the draft's tokenizer is not the target's ({difference}), so it drafts through text, each proposal "
            f"re-tokenized for the target ({names}, or auto)")


def check_batchable(name: str) -> None:
    """The one error, in one wording, where several slots cannot run `name` together (the server asks at start and per
    request; the engine's batch itself would run such a drafter's chain without its fork, BatchScheduler._fitted)."""
    if Supports.SLOTS not in spec(name).supports:
        raise EngineError(f"The {name} drafter needs a sequence of its own, so it runs one request at a time (--parallel 1); "
                          f"several slots run {', '.join(BATCH_DRAFTERS)}.")
