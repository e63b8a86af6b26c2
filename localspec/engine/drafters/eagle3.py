"""An EAGLE-3 head drafts (`eagle3`): a small GGUF trained to read three of the target's layers, as llama.cpp's
draft-eagle3 runs it, for every sequence asking at once.

Its cell at position p is made from token p + 1 and the fused features g_p of the target's layers at token p, one
position before the token (head_drafter.py's offset), and predicts the token after. Its decoder computes logits for
every row of a pass, so the queue of what the target read is read in a pass of its own before a draft.
"""

from __future__ import annotations

from localspec.engine.drafters.base import Drafter, DraftSources
from localspec.engine.drafters.head_drafter import HeadDrafter
from localspec.engine.drafters.registry import Part
from localspec.engine.llama.eagle3_head import Eagle3File, Eagle3Head
from localspec.engine.llama.model import Model


class Eagle3Drafter(HeadDrafter):
    """Drafts with an EAGLE-3 head made for the target."""

    name = "eagle3"
    offset = -1
    mixes_outputs = False

    def __init__(self, target: Model, file: Eagle3File) -> None:
        super().__init__(Eagle3Head(target, file))


def build(sources: DraftSources) -> Drafter:
    return Eagle3Drafter(sources.target, sources.part(Part.EAGLE3_HEAD))
