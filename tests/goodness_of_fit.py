"""A chi-square goodness-of-fit test that gives a p-value, or fails loudly: never NaN, never a silent pass.

Why a helper of our own: scipy's `chisquare` returns NaN for a bucket expected 0 times and raises when the
expected and observed totals differ by a rounding speck, and which of those a sampling test meets depends on
the CPU's kernels and on the numpy/scipy versions of the day. Here the buckets are built so that neither can
happen: probabilities are checked, renormalised, and rare outcomes pooled (least likely first) into buckets
each expected at least `MIN_EXPECTED` times. The grouping depends on the expected probabilities only, never
on what was observed, so the test keeps its size; and pooling rare outcomes with each other, rather than all
into one "rest", keeps as much of its power as the sample allows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

from scipy.stats import chisquare

MIN_EXPECTED = 5.0  # Cochran's rule: the chi-square approximation holds when every bucket expects ≥ 5
SUM_TOLERANCE = 1e-4  # float32 probabilities, multiplied over a few tokens, sum to 1 within this


class FitError(AssertionError):
    """The inputs cannot be tested: a bug in the test, reported as a failure, never as a p-value."""


def fit_p_value(samples: Sequence[Hashable], expected: Mapping[Hashable, float]) -> float:
    """The p-value of `samples` under the distribution `expected` (outcome -> probability).

    A sample outside the distribution's support is an outcome the distribution cannot produce: p = 0.
    """
    probabilities = _checked(expected)
    if not samples:
        raise FitError("no samples to test")
    n = len(samples)
    counts = Counter(samples)
    outside = sum(count for outcome, count in counts.items() if outcome not in probabilities)
    if outside:
        return 0.0
    observed, wanted = _pooled_buckets(counts, probabilities, n)
    if len(observed) < 2:
        raise FitError(f"{n} samples leave a single bucket of expected counts ≥ {MIN_EXPECTED}: nothing to test")
    p_value = float(chisquare(observed, wanted).pvalue)
    if not math.isfinite(p_value):
        raise FitError(f"chi-square gave {p_value} for observed {observed}, expected {wanted}")
    return p_value


def _checked(expected: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """Finite, non-negative probabilities summing to 1 (within float32 rounding), renormalised exactly."""
    bad = {outcome: p for outcome, p in expected.items() if not (math.isfinite(p) and p >= 0.0)}
    if bad:
        raise FitError(f"invalid probabilities: {dict(list(bad.items())[:5])}")
    total = math.fsum(expected.values())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise FitError(f"the expected probabilities sum to {total}, not 1")
    return {outcome: p / total for outcome, p in expected.items() if p > 0.0}


def _pooled_buckets(
    counts: Counter, probabilities: dict[Hashable, float], n: int
) -> tuple[list[int], list[float]]:
    """Outcomes, least likely first, gathered into buckets each expected at least MIN_EXPECTED times."""
    observed: list[int] = []
    wanted: list[float] = []
    pool_observed, pool_wanted = 0, 0.0
    for outcome, p in sorted(probabilities.items(), key=lambda item: item[1]):
        pool_observed += counts[outcome]
        pool_wanted += p * n
        if pool_wanted >= MIN_EXPECTED:
            observed.append(pool_observed)
            wanted.append(pool_wanted)
            pool_observed, pool_wanted = 0, 0.0
    if pool_wanted > 0.0:  # a remainder short of MIN_EXPECTED joins the last bucket (or is the only one)
        if observed:
            observed[-1] += pool_observed
            wanted[-1] += pool_wanted
        else:
            observed.append(pool_observed)
            wanted.append(pool_wanted)
    scale = n / math.fsum(wanted)  # equal totals exactly, which chisquare insists on
    return observed, [w * scale for w in wanted]
