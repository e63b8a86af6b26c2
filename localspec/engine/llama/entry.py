"""One token of a pass over several sequences: the record the decode loop, the models and the heads pass around."""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    """A token, its position, its sequence, and whether the pass keeps its row (logits, or a head's hidden row)."""

    token: int
    pos: int
    seq: int
    logits: bool
