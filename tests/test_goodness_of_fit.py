"""The sampling tests' chi-square helper: a p-value for every valid input, a loud failure for every invalid one.

Samples are built by hand (exact proportions, or a plainly different distribution), not drawn from a random
generator, so these tests hold whatever numpy version is installed.
"""

from __future__ import annotations

import math

import pytest

from tests.goodness_of_fit import FitError, fit_p_value


def proportional_samples(expected: dict[str, float], n: int) -> list[str]:
    """n samples in exactly the expected proportions (rounded): the best possible fit."""
    samples = [outcome for outcome, p in expected.items() for _ in range(round(p * n))]
    return samples[:n] + [max(expected, key=expected.get)] * (n - len(samples))


@pytest.mark.parametrize("expected", [
    {"a": 0.5, "b": 0.5},  # nothing rare: the old helper's "rest" bucket was expected exactly 0 times (NaN)
    {"a": 0.6, "b": 0.4 - 1e-15, "c": 1e-15},  # a rounding speck of a rare outcome
    {"a": 0.5, "b": 0.3, "c": 0.1999, "d": 1e-4},
    {f"t{i}": 1 / 1000 for i in range(1000)},  # every outcome rare (3 expected): pooled into buckets of ≥ 5
    {"a": 0.5, "b": 0.25, "c": 0.0, "d": 0.25},  # an outcome the distribution lists with probability 0
])
def test_a_perfect_fit_is_accepted(expected):
    p_value = fit_p_value(proportional_samples(expected, 3000), expected)
    assert math.isfinite(p_value) and p_value > 0.5


def test_probabilities_that_sum_to_one_only_within_float32_rounding_are_accepted():
    expected = {"a": 0.3 + 3e-7, "b": 0.3, "c": 0.4}
    assert fit_p_value(proportional_samples(expected, 3000), expected) > 0.5


def test_a_different_distribution_is_rejected():
    expected = {"a": 0.5, "b": 0.3, "c": 0.2}
    other = {"a": 0.45, "b": 0.3, "c": 0.25}
    assert fit_p_value(proportional_samples(other, 3000), expected) < 1e-3


def test_differences_among_rare_outcomes_are_still_seen():
    """Pooling rare outcomes with each other, not all into one bucket, keeps the power to see a shift among them."""
    expected = {"big": 0.9, **{f"r{i}": 0.1 / 20 for i in range(20)}}
    shifted = {"big": 0.9, **{f"r{i}": (0.1 / 10 if i < 10 else 0.0) for i in range(20)}}
    assert fit_p_value(proportional_samples(shifted, 3000), expected) < 1e-3


def test_an_outcome_outside_the_support_rejects():
    expected = {"a": 0.5, "b": 0.5}
    assert fit_p_value(proportional_samples(expected, 1000)[:-1] + ["z"], expected) == 0.0


@pytest.mark.parametrize("expected,message", [
    ({"a": math.nan, "b": 0.5}, "invalid probabilities"),
    ({"a": 1.2, "b": -0.2}, "invalid probabilities"),
    ({"a": math.inf}, "invalid probabilities"),
    ({"a": 0.5, "b": 0.4}, "sum to"),
    ({}, "sum to"),
])
def test_invalid_distributions_are_errors_not_p_values(expected, message):
    with pytest.raises(FitError, match=message):
        fit_p_value(["a"] * 100, expected)


def test_no_samples_is_an_error():
    with pytest.raises(FitError, match="no samples"):
        fit_p_value([], {"a": 1.0})


def test_a_single_bucket_is_an_error_not_a_pass():
    with pytest.raises(FitError, match="single bucket"):
        fit_p_value(["a"] * 10, {"a": 0.9, "b": 0.1})
