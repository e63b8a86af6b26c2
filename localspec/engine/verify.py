"""Deciding which drafted tokens the target keeps, and which token it adds.

`rows[i]` holds the target's logits after the prefix and the first i draft
tokens; there is always one row more than draft tokens. Every function returns
how many draft tokens were accepted and the target's own next token: the
correction at the first rejection, or the bonus token when all were accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from localspec.engine.sampling import Distribution, SamplingParams, distribution


@dataclass(frozen=True)
class Verdict:
    n_accepted: int
    token: int


def verify_greedy(draft: Sequence[int], rows: np.ndarray) -> Verdict:
    """Temperature 0: keep the longest prefix on which the target's argmax agrees."""
    best = rows.argmax(axis=1)
    n = 0
    while n < len(draft) and best[n] == draft[n]:
        n += 1
    return Verdict(n, int(best[n]))


def verify_speculative(
    draft: Sequence[int],
    draft_dists: Sequence[Distribution],
    rows: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): output distributed exactly as p.

    Draft token x ~ q is kept with probability min(1, p(x)/q(x)); on rejection the
    replacement is drawn from normalize(max(0, p - q)).
    """
    for i, token in enumerate(draft):
        p = distribution(rows[i], params)
        q = draft_dists[i]
        if rng.random() * q.prob(token) < p.prob(token):
            continue
        residual = p.dense(rows.shape[1]) - q.dense(rows.shape[1])
        np.maximum(residual, 0.0, out=residual)
        support = np.flatnonzero(residual)
        if support.size == 0:  # p == q up to rounding: rejection had probability ~0
            return Verdict(i, p.sample(rng))
        return Verdict(i, Distribution(support, residual[support] / residual[support].sum()).sample(rng))
    return Verdict(len(draft), distribution(rows[len(draft)], params).sample(rng))


def verify_sample_match(
    draft: Sequence[int], rows: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> Verdict:
    """llama.cpp's scheme: the target samples each position itself; a draft token survives if it matches."""
    for i, token in enumerate(draft):
        sampled = distribution(rows[i], params).sample(rng)
        if sampled != token:
            return Verdict(i, sampled)
    return Verdict(len(draft), distribution(rows[len(draft)], params).sample(rng))
