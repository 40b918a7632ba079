"""Paired count tests: exact McNemar, exact tolerance, the non-inferiority bound, Holm.

The margin test that FAIL needs, and detectable drops, are tested in test_margin.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from evalsentry.gate.stats import (
    PairedResult,
    beyond,
    drop_upper_bound,
    holm,
    mcnemar_drop_pvalue,
    within_tolerance,
)

ALPHA = 0.05


def paired_outcomes(
    newly_wrong: int, newly_right: int, both_right: int, both_wrong: int
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Reference and current 0/1 correctness with the given discordant counts."""
    ref = np.array(
        [1] * newly_wrong + [0] * newly_right + [1] * both_right + [0] * both_wrong, dtype=bool
    )
    cur = np.array(
        [0] * newly_wrong + [1] * newly_right + [1] * both_right + [0] * both_wrong, dtype=bool
    )
    return ref, cur


class TestMcNemar:
    @pytest.mark.parametrize(("b", "c"), [(15, 5), (7, 9), (1, 0), (40, 25)])
    def test_matches_scipy_binomtest(self, b: int, c: int) -> None:
        """p = P(X >= b) for X ~ Binomial(b + c, 1/2), as scipy computes it."""
        ref, cur = paired_outcomes(b, c, both_right=50, both_wrong=10)
        result = mcnemar_drop_pvalue(ref, cur)
        expected = stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue
        assert result.p_value == pytest.approx(expected, rel=1e-12)
        assert (result.newly_wrong, result.newly_right, result.n) == (b, c, b + c + 60)
        assert result.method == "mcnemar-exact"

    def test_hand_computed_value(self) -> None:
        """Three newly wrong and none newly right: p = (1/2)^3."""
        assert mcnemar_drop_pvalue(*paired_outcomes(3, 0, 10, 2)).p_value == pytest.approx(0.125)

    def test_no_discordant_pairs_gives_one(self) -> None:
        """If no example changed there is no evidence of a drop."""
        result = mcnemar_drop_pvalue(*paired_outcomes(0, 0, 30, 5))
        assert result == PairedResult(1.0, 0, 0, 35, "mcnemar-exact")

    def test_is_one_sided(self) -> None:
        """An improvement is not a drop: its p-value is large."""
        assert mcnemar_drop_pvalue(*paired_outcomes(5, 30, 50, 5)).p_value > 0.99

    def test_accepts_integer_zero_one_arrays(self) -> None:
        """0/1 integer arrays work like booleans."""
        ref, cur = paired_outcomes(6, 2, 20, 3)
        as_int = mcnemar_drop_pvalue(ref.astype(int), cur.astype(np.int64))
        assert as_int == mcnemar_drop_pvalue(ref, cur)

    def test_rejects_unpaired_or_non_binary_input(self) -> None:
        """Arrays of different lengths or with values other than 0/1 are errors."""
        with pytest.raises(ValueError, match="length"):
            mcnemar_drop_pvalue(np.ones(3, bool), np.ones(4, bool))
        with pytest.raises(ValueError, match="0/1"):
            mcnemar_drop_pvalue(np.array([0, 2]), np.array([0, 1]))

    @settings(max_examples=10, deadline=None, derandomize=True, database=None)
    @given(seed=st.integers(0, 2**32 - 1), accuracy=st.floats(0.55, 0.95))
    def test_equal_accuracy_rejection_rate_is_at_most_alpha(
        self, seed: int, accuracy: float
    ) -> None:
        """Two independent models of equal accuracy are flagged at most ~alpha of the time."""
        n_pairs, n_examples = 200, 2000
        rng = np.random.default_rng(seed)
        ref = rng.random((n_pairs, n_examples)) < accuracy
        cur = rng.random((n_pairs, n_examples)) < accuracy
        rejections = sum(
            mcnemar_drop_pvalue(r, c).p_value <= ALPHA for r, c in zip(ref, cur, strict=True)
        )
        # The exact test has size <= alpha, so rejections are stochastically at
        # most Binomial(200, alpha). Allowing that law's 99.9th percentile (21,
        # i.e. a rate of 0.105) fails an honest test < 0.1% of the time, while a
        # test of size ~0.1 (e.g. one reporting half the p-value) fails most draws.
        limit = stats.binom.isf(1e-3, n_pairs, ALPHA)
        assert rejections <= limit

    @settings(max_examples=10, deadline=None, derandomize=True, database=None)
    @given(seed=st.integers(0, 2**32 - 1), churn=st.floats(0.0, 0.02))
    def test_five_percent_relative_drop_is_detected(self, seed: int, churn: float) -> None:
        """0.90 -> 0.855 accuracy on 10,000 examples is flagged in >= 95% of trials."""
        n_trials, n_examples = 100, 10_000
        rng = np.random.default_rng(seed)
        detected = 0
        for _ in range(n_trials):
            ref = rng.random(n_examples) < 0.90
            cur = ref & (rng.random(n_examples) >= 0.05)  # 5% of hits turn wrong
            # Balanced churn (as many fixes as new errors) keeps the accuracy
            # but adds discordant noise in both directions.
            swaps = int(churn * n_examples)
            fixed = rng.choice(np.flatnonzero(~cur), swaps, replace=False)
            broken = rng.choice(np.flatnonzero(cur), swaps, replace=False)
            cur[fixed], cur[broken] = True, False
            detected += mcnemar_drop_pvalue(ref, cur).p_value < ALPHA
        assert detected >= 0.95 * n_trials


class TestHolm:
    def test_hand_computed_example(self) -> None:
        """Sorted p (.005, .01, .03, .04) times (4, 3, 2, 1), made monotone."""
        assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])

    def test_nan_passes_through_and_is_not_counted(self) -> None:
        """NaN stays in place and the remaining two tests use m = 2."""
        adjusted = holm([0.01, math.nan, 0.04])
        assert math.isnan(adjusted[1])
        assert [adjusted[0], adjusted[2]] == pytest.approx([0.02, 0.04])

    def test_capped_at_one(self) -> None:
        """Adjusted values never exceed 1."""
        assert holm([0.5, 0.6, 0.9]) == [1.0, 1.0, 1.0]

    def test_single_and_empty(self) -> None:
        """A single test is unadjusted and no tests give no output."""
        assert holm([0.03]) == [0.03]
        assert holm([]) == []

    @settings(max_examples=50, deadline=None, derandomize=True, database=None)
    @given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=20))
    def test_monotone_and_never_below_raw(self, p_values: list[float]) -> None:
        """Adjusted p-values keep the order of the raw ones and are at least as large."""
        adjusted = np.array(holm(p_values))
        raw = np.array(p_values)
        assert np.all(adjusted >= raw - 1e-15)
        assert np.all(adjusted <= 1.0)
        order = np.argsort(raw, kind="stable")
        assert np.all(np.diff(adjusted[order]) >= 0)

    def test_rejects_values_outside_unit_interval(self) -> None:
        """A p-value above 1 signals a bug upstream."""
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            holm([0.2, 1.5])


class TestExactTolerance:
    def test_a_drop_equal_to_the_tolerance_is_within_it(self) -> None:
        """1000 examples, 25 newly wrong and 5 newly right: a drop of exactly 0.02 is not beyond 0.02."""
        allowed = Fraction("0.02") * 1000
        assert not beyond(25, 5, allowed)
        assert beyond(26, 5, allowed)
        assert (0.900 - 0.880) > 0.02  # the float comparison the gate used to make

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(n=st.integers(10, 100_000), hundredths=st.integers(1, 10))
    def test_ties_never_exceed_for_any_n(self, n: int, hundredths: int) -> None:
        """For every n and tolerance, the drop of exactly tolerance * n examples is within it."""
        allowed = Fraction(hundredths, 100) * n
        if allowed.denominator == 1 and allowed <= n:
            assert not beyond(int(allowed), 0, allowed)
            assert beyond(int(allowed) + 1, 0, allowed)


class TestUpperBound:
    def test_no_flip_on_a_small_evalset_still_leaves_a_drop_possible(self) -> None:
        """72 examples and no change: a drop of ~3.6 points cannot be ruled out (~z^2 / n)."""
        bound = drop_upper_bound(0, 0, 72, ALPHA)
        assert bound == pytest.approx(0.0362, abs=5e-4)
        assert not within_tolerance(0, 0, 72, 0.01, ALPHA)
        assert within_tolerance(0, 0, 1000, 0.01, ALPHA)

    def test_bound_and_test_agree(self) -> None:
        """within_tolerance holds exactly when the bound is at most the margin."""
        for b, c, n in [(4, 5, 719), (25, 5, 1000), (3, 0, 360), (0, 6, 200)]:
            bound = drop_upper_bound(b, c, n, ALPHA)
            assert bound >= (b - c) / n
            assert within_tolerance(b, c, n, bound + 1e-6, ALPHA)
            assert not within_tolerance(b, c, n, bound - 1e-6, ALPHA)

    @pytest.mark.parametrize(("n", "churn"), [(360, 0.015), (1000, 0.005), (1000, 0.025)])
    def test_false_pass_rate_at_the_tolerance_is_at_most_alpha(self, n: int, churn: float) -> None:
        """A true drop equal to the tolerance is shown within it at most ~alpha of the time (exact sum)."""
        tolerance = 0.01
        b = np.arange(0, 80)[:, None]
        c = np.arange(0, 80)[None, :]
        p_b, p_c = churn + tolerance, churn
        probability = stats.multinomial.pmf(
            np.stack(np.broadcast_arrays(b, c, n - b - c), axis=-1), n, [p_b, p_c, 1 - p_b - p_c]
        )
        passed = np.vectorize(lambda x, y: within_tolerance(int(x), int(y), n, tolerance, ALPHA))(
            b, c
        )
        assert probability.sum() > 0.999
        assert (probability * passed).sum() <= ALPHA + 0.002
