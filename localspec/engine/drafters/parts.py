"""What a pair may offer beside its target: the parts a drafter requires (the registry's rows) and gets by name
(DraftSources.part). A module of its own, below both the registry and the drafters' base."""

from __future__ import annotations

from enum import Enum


class Part(Enum):
    """What a pair offers beside its target, and a drafter may require: its value is how a missing one is named. Where
    several are missing, the first in this order is named (a pair without a draft lacks a draft model, not a tokenizer)."""

    DRAFT_MODEL = "a draft model"  # a model that drafts, of any tokenizer
    TARGET_TOKENIZER = "a draft with the target's tokenizer"  # its tokens verify as they are, no text between
    SELF_DRAFT = "a self draft cut from the target"  # the target's first blocks, cut once (the engine offers it always)
    MTP_LAYERS = "a target with MTP layers"  # NextN layers kept in the target's own file
    EAGLE3_HEAD = "an EAGLE-3 head (--draft, an eagle3 GGUF)"
