"""The target drafts for itself with its MTP layers (`mtp`): llama.cpp's draft-mtp, for every sequence asking at once.

The MTP head's cell at position p is made from token p and the target's final hidden row at p - 1, and predicts token
p + 1 (head_drafter.py keeps it in step with the target).
"""

from __future__ import annotations

from localspec.engine.drafters.base import Drafter, DraftSources
from localspec.engine.drafters.head_drafter import HeadDrafter
from localspec.engine.drafters.registry import Part
from localspec.engine.llama.model import Model
from localspec.engine.llama.mtp_head import MtpHead


class MtpDrafter(HeadDrafter):
    """Drafts with the target's own MTP head: no second model, the target's vocabulary by construction."""

    name = "mtp"

    def __init__(self, target: Model) -> None:
        super().__init__(MtpHead(target))


def build(sources: DraftSources) -> Drafter:
    return MtpDrafter(sources.part(Part.MTP_LAYERS))
