"""Binomial terms and tails, against exact rational sums and against scipy.special."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import special

from evalsentry.gate.binomial import binomial_pmf, binomial_tails


def _exact_tails(k: int, n: int, p: Fraction) -> tuple[float, float]:
    terms = [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]
    return float(sum(terms[: max(k + 1, 0)])), float(sum(terms[max(k + 1, 0) :]))


@pytest.mark.parametrize("n", [1, 2, 7, 16, 40, 250])
@pytest.mark.parametrize(
    "p", [Fraction(1, 2), Fraction(1, 100), Fraction(37, 100), Fraction(9, 10)]
)
def test_tails_equal_exact_sums(n: int, p: Fraction) -> None:
    """Every tail from k = -2 to n + 2 matches the exact rational sum to 1e-12 relative."""
    ks = np.arange(-2, n + 3)
    lower, upper = binomial_tails(ks, n, float(p))
    for k, low, up in zip(ks, lower, upper, strict=True):
        exact_low, exact_up = _exact_tails(int(k), n, p)
        for got, want in ((low, exact_low), (up, exact_up)):
            if want < 1e-300:  # subnormal: only absolute sense
                assert got < 1e-300
            else:
                assert got == pytest.approx(want, rel=1e-12)


def test_pmf_equals_exact_terms() -> None:
    n, p = 500, Fraction(3, 10)
    ks = np.arange(n + 1)
    exact = [float(math.comb(n, k) * p**k * (1 - p) ** (n - k)) for k in range(n + 1)]
    np.testing.assert_allclose(binomial_pmf(ks, n, float(p)), exact, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("n", [10**4, 10**6])
def test_large_counts_agree_with_scipy(n: int) -> None:
    """Where exact sums are too slow, scipy's Cephes routines agree to their own accuracy."""
    rng = np.random.default_rng(0)
    k = np.concatenate([rng.integers(0, n, 300), [n // 2 - 1, n // 2, n // 2 + 1]])
    for p in (0.5, 0.02):
        lower, upper = binomial_tails(k, n, p)
        np.testing.assert_allclose(lower, special.bdtr(k, n, p), rtol=1e-7, atol=1e-300)
        np.testing.assert_allclose(upper, special.bdtrc(k, n, p), rtol=1e-7, atol=1e-300)


def test_edges_are_certain() -> None:
    lower, upper = binomial_tails([-1, 0, 3, 5], 5, 0.0)
    assert lower.tolist() == [0.0, 1.0, 1.0, 1.0]
    lower, upper = binomial_tails([-1, 0, 4, 5], 5, 1.0)
    assert lower.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert upper.tolist() == [1.0, 1.0, 1.0, 0.0]


def test_a_tail_alone_equals_the_same_tail_among_many() -> None:
    """A few tails walk in Python floats, many in numpy arrays: the numbers agree bit for bit."""
    rng = np.random.default_rng(1)
    n = rng.integers(1, 20_000, 2_000).astype(np.float64)
    k = np.floor(rng.random(n.size) * n * 1.1) - 2
    p = rng.choice([0.5, 0.3, 0.01, 0.99], n.size)
    lower, upper = binomial_tails(k, n, p)
    alone = [binomial_tails(k[i], n[i], p[i]) for i in range(n.size)]
    assert np.array_equal(lower, [float(low) for low, _ in alone])
    assert np.array_equal(upper, [float(up) for _, up in alone])


def test_many_tails_of_one_binomial_equal_each_alone() -> None:
    """A p-value per swap asks the same tails again and again: each is computed once, and each
    equals the tail asked alone, bit for bit, in the shape asked."""
    k = np.random.default_rng(2).integers(-3, 700, (50, 20)).astype(np.float64)
    lower, upper = binomial_tails(k, 660, 0.5)
    assert lower.shape == upper.shape == k.shape
    for index in np.ndindex(k.shape):
        alone = binomial_tails(k[index], 660, 0.5)
        assert (lower[index], upper[index]) == (float(alone[0]), float(alone[1]))
