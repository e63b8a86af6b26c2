"""Which cells a new request starts from: the slot it takes, and the prefix of its prompt it keeps or borrows there.

Every slot's cells stay after its request as a prompt cache; a request goes to the free slot that holds most of its
prompt, and starts from the longest reusable prefix any slot holds (Model.reusable_prefix), busy or not.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.batch.slot import Slot
from localspec.engine.tuning import REUSE_SHARE


def slot_for(free: list[Slot], tokens: Sequence[int]) -> Slot:
    """The free slot whose cache holds most of `tokens`, if that is much of it; else the least recently used, so
    that the caches of the others stay for the requests that will want them."""
    best = max(free, key=lambda slot: slot.shared_prefix(tokens))
    if tokens and best.shared_prefix(tokens) >= REUSE_SHARE * len(tokens):
        return best
    return min(free, key=lambda slot: slot.last_used)


def take_prefix(slots: Sequence[Slot], slot: Slot, prompt: list[int]) -> int:
    """Make the slot's caches hold the longest reusable prefix of the prompt (Model.reusable_prefix) that any slot holds,
    busy or not: its own, or another's cells, which it then shares (a unified cache tags a cell with both sequences:
    nothing is copied or computed). An autocomplete request that comes while the one before it still runs (its
    client left, or it is writing its last tokens) finds that one's file this way instead of reading it again. How
    many tokens the target's cache holds."""
    tokens = prompt[:-1]

    def reusable(other: Slot) -> int:
        n = slot.target.reusable_prefix(other.seq, other.shared_prefix(tokens), len(prompt))
        return n if other is slot else slot.target.lendable(other.seq, n)

    donor = max(slots, key=reusable)
    own, lent = reusable(slot), reusable(donor)  # lent > own: the donor is another slot
    if lent > own:
        slot.target.forget(slot.seq)
        slot.target.share_cells(donor.seq, slot.seq, lent)
        return lent
    return cut(slot, own)


def cut(slot: Slot, keep: int) -> int:
    """The slot's target cells past its first `keep` tokens go (all of them, where its memory cannot drop just those:
    llama/memory.py); how many it holds after."""
    return slot.target.forget(slot.seq, keep)
