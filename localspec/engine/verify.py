"""Deciding which drafted tokens the target keeps, and which token it adds.

`rows[i]` holds the target's logits after the prefix and the first i draft
tokens; there is always one row more than draft tokens. Every function returns
how many draft tokens were accepted and the target's own next token: the
correction at the first rejection, or the bonus token when all were accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from localspec.engine.drafters.base import Draft
from localspec.engine.sampling import Distribution, SamplingParams, distribution


@dataclass(frozen=True)
class Verdict:
    accepted: list[int]  # the draft tokens kept, in order (on a tree: along the branch that survived)
    token: int
    branch: int = 0  # 1 when a tree's fork survived its split point
    at: int = 0  # ...and that split point (draft position)

    @property
    def n_accepted(self) -> int:
        return len(self.accepted)

    def rows(self, n_chain: int) -> list[int]:
        """Indices of the verify rows along the surviving path: one per accepted token, then the one that chose `token`."""
        if self.branch == 0:
            return list(range(self.n_accepted + 1))
        return list(range(self.at + 1)) + [n_chain + j for j in range(1, self.n_accepted - self.at + 1)]


def verify_greedy(draft: Sequence[int], rows: np.ndarray) -> Verdict:
    """Temperature 0: keep the longest prefix on which the target's argmax agrees."""
    best = rows.argmax(axis=1)
    n = 0
    while n < len(draft) and best[n] == draft[n]:
        n += 1
    return Verdict(list(draft[:n]), int(best[n]))


Choose = Callable[[np.ndarray, int], int]  # the target's token on a verify row at a draft position (0: the first row's)


def verify_tree(draft: Draft, rows: np.ndarray, choose: Choose) -> Verdict:
    """Walk a two-branch draft: at each node the target chooses its token, and the branch holding it goes on.

    The batch was [last, *chain, *fork]: rows[i] judges chain token i, the fork's first
    token shares the chain's row at the split, and rows[len(chain) + j] judges fork token j.
    `choose` is the target's argmax (temperature 0) or its own sample from p: each
    emitted token is the target's choice on its own row, whichever branch it is found on.
    """
    n = len(draft.tokens)
    for i, token in enumerate(draft.tokens):
        chosen = choose(rows[i], i)
        if chosen == token:
            continue
        fork = draft.fork
        if fork is None or fork.at != i or chosen != fork.tokens[0]:
            return Verdict(list(draft.tokens[:i]), chosen)
        accepted = list(draft.tokens[:i]) + [chosen]
        for j in range(1, len(fork.tokens)):
            chosen = choose(rows[n + j], i + j)
            if chosen != fork.tokens[j]:
                return Verdict(accepted, chosen, branch=1, at=i)
            accepted.append(chosen)
        return Verdict(accepted, choose(rows[n + len(fork.tokens)], i + len(fork.tokens)), branch=1, at=i)
    return Verdict(list(draft.tokens), choose(rows[n], n))


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

    A token proposed deterministically (q one-hot at x: lookup, a vetted or tree candidate) is judged as the target
    samples it, with one draw: y ~ p, kept when y = x, else y is the replacement. That keeps x with probability p(x)
    and replaces it from normalize(p - p(x)·1_x), the same law as the rule above, but it draws exactly one number for
    each position it settles, as plain sampling does: with a seed, where only such tokens were drafted, the answer is
    plain sampling's whatever was drafted.
    """
    for i, token in enumerate(draft):
        p = distribution(rows[i], params)
        q = draft_dists[i]
        if len(q.ids) == 1:
            sampled = p.sample(rng)
            if sampled == token:
                continue
            return Verdict(list(draft[:i]), sampled)
        if rng.random() * q.prob(token) < p.prob(token):
            continue
        residual = p.dense(rows.shape[1]) - q.dense(rows.shape[1])
        np.maximum(residual, 0.0, out=residual)
        support = np.flatnonzero(residual)
        if support.size == 0:  # p == q up to rounding: rejection had probability ~0
            return Verdict(list(draft[:i]), p.sample(rng))
        return Verdict(list(draft[:i]), Distribution(support, residual[support] / residual[support].sum()).sample(rng))
    return Verdict(list(draft), distribution(rows[len(draft)], params).sample(rng))


def verify_sample_match(draft: Sequence[int], rows: np.ndarray, choose: Choose) -> Verdict:
    """The target chooses each position itself (its sample from p); a draft token survives if it matches. llama.cpp's
    scheme, and the rule for keyed draws (sampling.Draws), whose choice depends on nothing a drafter did."""
    for i, token in enumerate(draft):
        chosen = choose(rows[i], i)
        if chosen != token:
            return Verdict(list(draft[:i]), chosen)
    return Verdict(list(draft), choose(rows[len(draft)], len(draft)))
