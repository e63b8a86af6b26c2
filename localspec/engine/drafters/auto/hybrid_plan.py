"""auto's hybrid step: a lookup run's first tokens, then the draft model from their end; which split pays best."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.drafters.auto.catch_up import catch_up_price
from localspec.engine.pass_costs import CostTable, PassCosts
from localspec.engine.tuning import HYBRID_LOOKUP_MAX, MODEL_K_MAX


@dataclass(frozen=True)
class HybridPlan:
    lookup_k: int  # the lookup run's first tokens...
    model_k: int  # ...then the draft model's, from their end
    tokens: float  # 1 + expected accepted
    rate: float  # tokens per ms, priced as a step of its own


def best_hybrid(costs: CostTable, draft: PassCosts, pending: int, spread: float, n_lookup: int, k_cap: int, lookup_expected: list[float],
                lookup_survive: list[float], model_expected: list[float]) -> HybridPlan | None:
    """The best (j, m) of the first j <= n_lookup lookup tokens then m draft-model tokens under the cap: the draft
    reads its `pending` tokens and the j in one catch-up batch (catch_up_price, spread over `spread` asks), takes m - 1
    one-token steps, and the target verifies j + m + 1; expected, the run's accepted tokens plus, when all j survive,
    the model's. None without a run."""
    best: tuple[float, int, int, float] | None = None  # (rate, j, m, tokens): a plan made once, for the best
    per_token = draft.cost(1)
    for j in range(1, min(n_lookup, k_cap - 1, HYBRID_LOOKUP_MAX) + 1):
        catch_up, head, survive = catch_up_price(draft, pending, spread, j), 1 + lookup_expected[j], lookup_survive[j]
        for m in range(1, min(MODEL_K_MAX, k_cap - j) + 1):
            tokens = head + survive * model_expected[m]
            rate = tokens / (catch_up + (m - 1) * per_token + costs.verify(j + m + 1))
            if best is None or rate > best[0]:
                best = (rate, j, m, tokens)
    return None if best is None else HybridPlan(best[1], best[2], best[3], best[0])
