"""Paired drop tests: McNemar, paired bootstrap, Holm, and detectable-drop sizing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from evalsentry.metrics import get_metric
from evalsentry.stats import (
    PairedResult,
    holm,
    mcnemar_drop_pvalue,
    minimum_detectable_drop,
    paired_bootstrap_drop_pvalue,
    paired_drop_pvalue,
)
from tests.synthetic import classification

Columns = dict[str, NDArray[Any]]
ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 1000


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


def degrade(columns: Columns, share: float, seed: int) -> Columns:
    """The same model with a share of its correct predictions turned wrong."""
    rng = np.random.default_rng(seed)
    flip = (columns["prediction"] == columns["target"]) & (
        rng.random(columns["target"].size) < share
    )
    prediction = np.where(flip, (columns["target"] + 1) % 10, columns["prediction"])
    return {**columns, "prediction": prediction}


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


class TestPairedBootstrap:
    def test_detects_a_clear_degradation(self) -> None:
        """Turning 10% of hits wrong lowers macro-F1 with p < 0.01."""
        ref = classification(2000, 0.8, seed=1)
        cur = degrade(ref, 0.10, seed=2)
        result = paired_bootstrap_drop_pvalue(
            "macro_f1", ref, cur, num_classes=10, n_resamples=BOOTSTRAP_RESAMPLES
        )
        assert result.p_value < 0.01
        assert result.method == "paired-bootstrap"
        assert result.newly_wrong > 100
        assert result.newly_right == 0

    def test_identical_model_is_not_flagged(self) -> None:
        """The same outputs give every resample a zero delta, hence p = 1."""
        ref = classification(2000, 0.8, seed=3)
        result = paired_bootstrap_drop_pvalue("nll", ref, dict(ref), num_classes=10)
        assert result == PairedResult(1.0, 0, 0, 2000, "paired-bootstrap")

    def test_improvement_is_not_flagged(self) -> None:
        """Lower loss for the current model gives a large p-value for nll."""
        ref = classification(2000, 0.8, seed=4)
        cur = {**ref, "loss": ref["loss"] * 0.8}
        assert paired_bootstrap_drop_pvalue("nll", ref, cur, num_classes=10).p_value > 0.99

    def test_orientation_follows_metric_direction(self) -> None:
        """Higher loss (lower-is-better) and lower R^2 (higher-is-better) both count as drops."""
        rng = np.random.default_rng(5)
        target = rng.normal(size=1500)
        ref = {"target": target, "prediction": target + rng.normal(scale=0.3, size=1500)}
        cur = {"target": target, "prediction": target + rng.normal(scale=0.6, size=1500)}
        for name in ("rmse", "mae", "r2"):
            result = paired_bootstrap_drop_pvalue(
                name, ref, cur, num_classes=None, n_resamples=BOOTSTRAP_RESAMPLES
            )
            assert result.p_value < 0.01
            assert (result.newly_wrong, result.newly_right) == (0, 0)
            reverse = paired_bootstrap_drop_pvalue(
                name, cur, ref, num_classes=None, n_resamples=BOOTSTRAP_RESAMPLES
            )
            assert reverse.p_value > 0.99

    def test_pairing_detects_a_small_consistent_shift(self) -> None:
        """A +0.01 loss on every example is invisible unpaired but certain when paired."""
        ref = classification(1000, 0.8, seed=6)
        ref["loss"] = np.random.default_rng(7).exponential(1.0, 1000)  # SE of the mean ~0.03
        cur = {**ref, "loss": ref["loss"] + 0.01}
        result = paired_bootstrap_drop_pvalue(
            "nll", ref, cur, num_classes=10, n_resamples=BOOTSTRAP_RESAMPLES
        )
        assert result.p_value == pytest.approx(1 / (BOOTSTRAP_RESAMPLES + 1))

    def test_is_seeded(self) -> None:
        """The same seed reproduces the p-value exactly."""
        ref = classification(500, 0.7, seed=8)
        cur = degrade(ref, 0.03, seed=9)
        first = paired_bootstrap_drop_pvalue("ece", ref, cur, num_classes=10, seed=11)
        again = paired_bootstrap_drop_pvalue("ece", ref, cur, num_classes=10, seed=11)
        assert first == again

    def test_different_examples_are_rejected(self) -> None:
        """Columns with different targets or lengths cannot be compared pairwise."""
        ref = classification(100, 0.7, seed=10)
        shuffled = {**ref, "target": ref["target"][::-1]}
        with pytest.raises(ValueError, match="targets differ"):
            paired_bootstrap_drop_pvalue("nll", ref, shuffled, num_classes=10)
        shorter = {name: column[:50] for name, column in ref.items()}
        with pytest.raises(ValueError, match="length"):
            paired_bootstrap_drop_pvalue("nll", ref, shorter, num_classes=10)

    def test_single_example_is_never_significant(self) -> None:
        """One example cannot show a real drop, so p = 1."""
        ref = {"target": np.array([1]), "prediction": np.array([1]), "loss": np.array([0.1])}
        cur = {**ref, "loss": np.array([5.0])}
        assert paired_bootstrap_drop_pvalue("nll", ref, cur, num_classes=3).p_value == 1.0


class TestPairedDropPvalue:
    def test_dispatches_on_the_metric(self) -> None:
        """Accuracy goes to exact McNemar, NLL to the paired bootstrap."""
        ref = classification(1000, 0.8, seed=12)
        cur = degrade(ref, 0.1, seed=13)
        mcnemar = paired_drop_pvalue("accuracy", ref, cur, num_classes=10)
        correct = get_metric("accuracy").correct
        assert mcnemar == mcnemar_drop_pvalue(correct(ref), correct(cur))
        assert paired_drop_pvalue("nll", ref, cur, num_classes=10).method == "paired-bootstrap"


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


class TestMinimumDetectableDrop:
    def test_hand_computed_value(self) -> None:
        """(z_.95 + z_.8) * sqrt(2 * .9 * .1 / 10000) ~ 0.01055."""
        expected = (1.6448536269514722 + 0.8416212335729143) * math.sqrt(0.18 / 10_000)
        assert minimum_detectable_drop(10_000, 0.9, 0.05) == pytest.approx(expected)

    def test_shrinks_with_more_examples_and_grows_with_stricter_alpha(self) -> None:
        """Four times the data halves the drop; a smaller alpha needs a bigger drop."""
        assert minimum_detectable_drop(40_000, 0.8, 0.05) == pytest.approx(
            minimum_detectable_drop(10_000, 0.8, 0.05) / 2
        )
        assert minimum_detectable_drop(10_000, 0.8, 0.01) > minimum_detectable_drop(
            10_000, 0.8, 0.05
        )

    def test_perfect_accuracy_needs_enough_flips_for_the_exact_test(self) -> None:
        """At accuracy 1 the floor is the fewest flips McNemar can call significant."""
        n = 1000
        drop = minimum_detectable_drop(n, 1.0, ALPHA)
        flips = round(drop * n)
        assert mcnemar_drop_pvalue(*paired_outcomes(flips, 0, n - flips, 0)).p_value <= ALPHA
        assert mcnemar_drop_pvalue(*paired_outcomes(flips - 1, 0, n - flips + 1, 0)).p_value > ALPHA

    def test_power_at_the_detectable_drop_is_as_promised(self) -> None:
        """Simulated independent models that far apart are flagged about 80% of the time."""
        n, accuracy = 5000, 0.8
        drop = minimum_detectable_drop(n, accuracy, ALPHA)
        rng = np.random.default_rng(14)
        trials = 400
        hits = sum(
            mcnemar_drop_pvalue(rng.random(n) < accuracy, rng.random(n) < accuracy - drop).p_value
            <= ALPHA
            for _ in range(trials)
        )
        # 400 trials estimate the power to about +-0.02 (one standard error)
        assert 0.7 <= hits / trials <= 0.9

    @pytest.mark.parametrize(
        ("n", "accuracy", "alpha", "power"),
        [(0, 0.9, 0.05, 0.8), (10, 1.2, 0.05, 0.8), (10, 0.9, 0.0, 0.8), (10, 0.9, 0.05, 1.0)],
    )
    def test_rejects_invalid_arguments(
        self, n: int, accuracy: float, alpha: float, power: float
    ) -> None:
        """Sizes below 1 and probabilities outside their ranges are errors."""
        with pytest.raises(ValueError):
            minimum_detectable_drop(n, accuracy, alpha, power)
