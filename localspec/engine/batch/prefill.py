"""How much of a new prompt rides in a step's target pass beside the slots generating.

A chunk may add about a step's worth of time to the pass (one step's stall for
the slots generating), and always at least STALL_FLOOR tokens, so a prompt moves
even beside a full batch. Within that, the chunk is sized by the measured costs,
not rounded to a power of two: a CPU's passes are lumpy (on the real Q4_K_M
target, 16 tokens cost 223 ms, 14 cost 268 and 18 cost 281), and a chunk that
filled the pass past such a size read the prompt at 12 ms a token where filling
it up to the size cost 9. So the chunk is the one, among those that bring the
pass to a measured size, with the lowest added cost per prompt token; on a GPU,
whose passes cost nearly alike, that is the largest allowed.
"""

from __future__ import annotations

from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import MIN_PREFILL_CHUNK, STALL_FLOOR


def prefill_budget(costs: CostTable, n_verify: int, step_ms: float, n_batch: int) -> int:
    """Prompt tokens that may ride with `n_verify` verify tokens in a step expected to take `step_ms`."""
    room = n_batch - n_verify
    if room <= 0:
        return 0
    base = costs.verify(n_verify)

    def added_ms(chunk: int) -> float:
        return max(1e-3, costs.verify(n_verify + chunk) - base)

    powers = [1 << i for i in range(room.bit_length())]
    candidates = {size - n_verify for size in costs.target.sizes} | set(powers) | {STALL_FLOOR, room}
    allowed = [chunk for chunk in candidates
               if min(MIN_PREFILL_CHUNK, room) <= chunk <= room and (chunk <= STALL_FLOOR or added_ms(chunk) <= step_ms)]
    return max(allowed, key=lambda chunk: (chunk / added_ms(chunk), chunk))
