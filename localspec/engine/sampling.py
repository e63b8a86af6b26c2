"""Turning one row of logits into the distribution a token is drawn from.

The filters run in llama.cpp's default order (top-k, top-p, min-p, then
temperature), so a setting means here what it means in llama.cpp. The target's
p and the draft's q go through the very same function: speculative sampling is
only lossless when both are processed alike.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np

from localspec.engine import defaults
from localspec.engine.errors import SamplingSettingsError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        if not 0 <= self.temperature < math.inf:  # nan fails every comparison
            raise SamplingSettingsError(f"temperature must be 0 (greedy) or a positive number, not {self.temperature}", "temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise SamplingSettingsError(f"top-p must be above 0 and at most 1, not {self.top_p}", "top-p")
        if not 0.0 <= self.min_p <= 1.0:  # 1 keeps only the most probable token (ties aside), as llama.cpp's min-p does
            raise SamplingSettingsError(f"min-p must be from 0 to 1, not {self.min_p}", "min-p")
        if self.top_k < 0:
            raise SamplingSettingsError(f"top-k must be 0 (off) or positive, not {self.top_k}", "top-k")


_U64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment: a key's i-th output is mix(key + (i + 1) * _GOLDEN)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over uint64 values (wrapping arithmetic): nearby inputs give unrelated outputs."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class Draws:
    """Where a sampled answer's random numbers come from.

    Keyed (a request that gives a seed): the token at answer position n is argmax over p's candidates x of
    log p(x) + G(seed, n, x), with G standard Gumbel noise hashed from the three. By the Gumbel-max trick that is exactly
    a draw from p, and it depends on the seed, the position and p alone: the same seed writes the same answer whichever
    drafter ran, so drafts are judged by exact match. A drafter that samples draws its q with the same noise at the same
    position, so it picks the target's token wherever q is near p.

    A stream (no seed): draws in order from a generator seeded at random, for speculative sampling, whose acceptance
    min(1, p/q) is the most any sampled draft can have (Gumbel coupling keeps a little less; the bench compares the two).
    """

    seed: int
    keyed: bool
    rng: np.random.Generator

    @classmethod
    def of(cls, seed: int | None, keyed: bool) -> Draws:
        """Draws from `seed`, or from one chosen at random."""
        used = seed if seed is not None else secrets.randbits(32)
        return cls(used, keyed, np.random.Generator(np.random.PCG64(used)))

    def choose(self, dist: Distribution, position: int) -> int:
        """A token drawn from `dist` for answer position `position`: keyed by it, or the stream's next."""
        if not self.keyed:
            return dist.sample(self.rng)
        with np.errstate(divide="ignore"):  # a candidate a grammar forbids has p = 0: log -inf, never chosen
            return int(dist.ids[np.argmax(np.log(dist.probs) + self.noise(position, dist.ids))])

    def noise(self, position: int, ids: np.ndarray) -> np.ndarray:
        """Standard Gumbel noise for tokens `ids` at answer position `position`, from the seed alone: splitmix64 keyed
        by (seed, position), its output at each token id."""
        key = _mix(np.array([(self.seed * _GOLDEN) & _U64], dtype=np.uint64) ^ np.uint64(position & _U64))
        bits = _mix(key + (ids.astype(np.uint64) + np.uint64(1)) * np.uint64(_GOLDEN))
        uniform = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1), never 0 or 1
        return -np.log(-np.log(uniform))


@dataclass(frozen=True)
class Distribution:
    """A sparse distribution: candidate ids, most probable first, and their probabilities."""

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        hits = np.flatnonzero(self.ids == token)
        return float(self.probs[hits[0]]) if hits.size else 0.0

    @property
    def top_prob(self) -> float:
        return float(self.probs[0])

    def sample(self, rng: np.random.Generator) -> int:
        cumulative = np.cumsum(self.probs)
        index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
        return int(self.ids[min(index, len(self.ids) - 1)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


def distribution(row: np.ndarray, params: SamplingParams) -> Distribution:
    """The processed distribution of one logits row (temperature must be > 0)."""
    n = row.shape[0]
    if 0 < params.top_k < n:
        candidates = np.argpartition(row, n - params.top_k)[n - params.top_k :]
    elif params.min_p > 0.0:
        # min-p keeps a subset of what top-p keeps or not, whatever the order: pre-filter before the sort.
        candidates = np.flatnonzero(row >= row.max() + math.log(params.min_p))
    else:
        candidates = np.arange(n)
    logits = row[candidates].astype(np.float64)
    order = np.argsort(-logits, kind="stable")
    candidates, logits = candidates[order], logits[order]

    probs = np.exp(logits - logits[0])
    probs /= probs.sum()
    keep = len(probs)
    if params.min_p > 0.0:
        keep = int(np.count_nonzero(probs >= params.min_p * probs[0]))
    if params.top_p < 1.0:
        reach = int(np.searchsorted(np.cumsum(probs[:keep]), params.top_p, side="left")) + 1
        keep = min(keep, reach)
    keep = max(keep, 1)

    tempered = np.exp((logits[:keep] - logits[0]) / params.temperature)
    return Distribution(ids=candidates[:keep], probs=tempered / tempered.sum())


# The draft's confidence check runs once per drafted token, so it must be far cheaper than a
# softmax over 150k logits (~0.5 ms here). Real logits put a few dozen tokens within 12 of the
# best and tens of thousands further down, each weighing under e^-12: summing only the near
# ones gives an upper bound on the top probability, off by well under 1% on real rows. The
# check decides how far to draft, never what is emitted, so this cannot affect the output.
_NEGLIGIBLE_LOGIT_GAP = 12.0


def greedy_with_confidence(row: np.ndarray) -> tuple[int, float]:
    """The argmax token and (an upper bound on) its softmax probability, for the draft's cut-off."""
    token = int(row.argmax())
    best = row[token]
    near = row[row > best - _NEGLIGIBLE_LOGIT_GAP]  # a mask, not its indices: one pass over the row fewer
    return token, float(1.0 / np.exp(near - best).sum())


def top_two(row: np.ndarray) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two most likely tokens and (upper bounds on) their probabilities: where a tree draft should fork."""
    near_ids = np.flatnonzero(row > row.max() - _NEGLIGIBLE_LOGIT_GAP)
    if near_ids.size < 2:  # the second is negligible: fall back to an exact partition
        near_ids = np.argpartition(row, -2)[-2:]
    weights = np.exp(row[near_ids] - row[near_ids].max())
    weights /= weights.sum()
    order = np.argsort(-weights, kind="stable")[:2]
    (first, second) = order
    return (int(near_ids[first]), float(weights[first])), (int(near_ids[second]), float(weights[second]))
