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

from localspec.engine.errors import EngineError

if TYPE_CHECKING:  # annotations only (see the module's docstring)
    from localspec.engine.drafters.base import Drafter, DraftSources


class Supports(Enum):
    """What a drafter can do beyond proposing from the accepted text."""

    CONTINUES = "continues"  # it drafts from the end of text the decode loop puts first (a grammar's forced text, Ask.after)


CONTINUING = frozenset({Supports.CONTINUES})


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    description: str
    needs_draft_model: bool
    module: str  # under localspec.engine.drafters, holding `build(sources) -> Drafter`
    builder: str = "build"
    target_sequences: int = 1  # sequences the target's cache must hold (a tree verifies two branches side by side)
    batchable: bool = True  # it drafts for several slots sharing the target's passes; False: it needs a sequence of its own
    chooses_k: bool = False  # it picks K itself each step: the K it is given is only a cap (defaults.AUTO_DRAFT_MAX)
    drafts: bool = True  # False: plain decoding, nothing drafted
    chain: bool = True  # its draft is one chain of tokens (False: a tree, which a chain's cost model does not describe)
    constrained: bool = True  # it drafts under a grammar and penalties (False: the request must pick another drafter)
    self_draft: bool = False  # it drafts with the self draft cut from the target (loaded, and planned for, only then)
    sample_match: bool = False  # its tokens can be judged by sample-and-match too (it samples them from its own q)
    reference: str | None = None  # llama.cpp's --spec-type that drafts as it does: the bench runs llama-speculative-simple beside it
    mtp_layers: bool = False  # it drafts with the target's own MTP layers (only a target whose GGUF carries them)
    eagle3_head: bool = False  # it drafts with an EAGLE-3 head (--draft names one made for the target)
    any_vocab: bool = False  # its draft model may have another tokenizer than the target's (it drafts through text)
    supports: frozenset[Supports] = frozenset()

    def build(self, sources: DraftSources) -> Drafter:
        drafter: Drafter = getattr(importlib.import_module(f"localspec.engine.drafters.{self.module}"), self.builder)(sources)
        return drafter


_SPECS = (
    DrafterSpec("auto", "the adaptive controller: per step, plain, prompt lookup or the draft model, and K, whichever is fastest",
                False, "auto.controller", chooses_k=True, supports=CONTINUING),
    DrafterSpec("model", "the draft model proposes K tokens", True, "draft_model", "build_model", sample_match=True,
                reference="draft-simple", supports=CONTINUING),
    DrafterSpec("ngram", "prompt lookup: continues text that occurred before (no model time)", False, "ngram", supports=CONTINUING),
    DrafterSpec("hybrid", "prompt lookup, continued by the draft model where it runs short", True, "hybrid", supports=CONTINUING),
    DrafterSpec("hierarchical", "prompt lookup, vetted by the draft model; the target sees only what the draft agrees with",
                True, "hierarchical"),
    DrafterSpec("tree", "the draft model forks at an unsure token; both branches are verified in one target pass", True, "tree",
                target_sequences=2, batchable=False, chain=False, constrained=False),
    DrafterSpec("self", "a draft cut from the target's own first blocks (made once, cached); no draft model needed", False,
                "draft_model", "build_self", self_draft=True, supports=CONTINUING),
    DrafterSpec("mtp", "the target's own MTP layers draft (a Qwen3.5/3.6, GLM or MiMo GGUF that keeps them); no draft model",
                False, "mtp", mtp_layers=True, sample_match=True, reference="draft-mtp"),
    DrafterSpec("eagle3", "an EAGLE-3 head (--draft, an eagle3 GGUF made for the target) drafts from three of the target's layers",
                False, "eagle3", eagle3_head=True, sample_match=True, reference="draft-eagle3"),
    DrafterSpec("bridged", "the draft model, of another tokenizer than the target's: its text is re-tokenized for the target",
                True, "bridged", any_vocab=True),
    DrafterSpec("none", "plain decoding", False, "base", "build_none", drafts=False),
)
DRAFTERS: dict[str, DrafterSpec] = {spec.name: spec for spec in _SPECS}
DEFAULT = "auto"
PLAIN = next(name for name, spec in DRAFTERS.items() if not spec.drafts)  # what a request that drafts nothing runs
ADAPTIVE = next(name for name, spec in DRAFTERS.items() if spec.chooses_k)  # the one the bench compares the fixed ones with
FIXED = tuple(name for name, spec in DRAFTERS.items() if spec.drafts and not spec.chooses_k)  # a drafter at a set K each
BATCH_DRAFTERS = tuple(name for name, spec in DRAFTERS.items() if spec.batchable)
NO_DRAFT_MODEL = tuple(name for name, spec in DRAFTERS.items() if not spec.needs_draft_model)
THROUGH_TEXT = tuple(name for name, spec in DRAFTERS.items() if spec.any_vocab)  # they run a draft of another tokenizer


@dataclass(frozen=True)
class PairParts:
    """What a pair offers the drafters beside its target: a draft model (of the target's tokenizer or not), MTP layers in
    the target's file, an EAGLE-3 head."""

    draft_model: bool
    mtp_layers: bool = False
    eagle3_head: bool = False
    same_tokenizer: bool = True

    @classmethod
    def before_load(cls, draft_model: bool) -> PairParts:
        """Before a load only whether a draft is given is known: the rest counts as there (the engine says at load)."""
        return cls(draft_model, mtp_layers=True, eagle3_head=True)

    def lacks(self, row: DrafterSpec) -> str:
        """What the pair lacks for `row` to run ('' where nothing)."""
        if row.needs_draft_model and not self.draft_model:
            return "a draft model"
        if row.needs_draft_model and not row.any_vocab and not self.same_tokenizer:
            return "a draft with the target's tokenizer"
        if row.eagle3_head and not self.eagle3_head:
            return "an EAGLE-3 head (--draft, an eagle3 GGUF)"
        return "a target with MTP layers" if row.mtp_layers and not self.mtp_layers else ""

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
    """The one error, in one wording, where several slots cannot run `name` together (the server at start and per
    request, and the engine's batch, all ask here)."""
    if not spec(name).batchable:
        raise EngineError(f"The {name} drafter needs a sequence of its own, so it runs one request at a time (--parallel 1); "
                          f"several slots run {', '.join(BATCH_DRAFTERS)}.")
