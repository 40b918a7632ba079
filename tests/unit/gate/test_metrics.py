"""Metrics: hand-computed values, the registry, and the seeded vectorised bootstrap."""

from __future__ import annotations

import itertools
import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from evalsentry.gate.metrics import (
    DEFAULT_METRICS,
    ECE_BINS,
    METRICS,
    MetricValue,
    UnknownMetric,
    bootstrap_metric_values,
    compute_metrics,
    default_metrics,
    get_metric,
)
from tests.synthetic import classification

Columns = dict[str, NDArray[Any]]

# Five examples worked through by hand in the tests below.
HAND = {
    "target": np.array([0, 1, 2, 2, 1]),
    "prediction": np.array([0, 2, 2, 2, 1]),
    "loss": np.array([0.1, 2.0, 0.3, 0.5, 0.6]),
    "confidence": np.array([0.9, 0.6, 0.8, 0.7, 0.95]),
    "target_rank": np.array([0, 1, 0, 0, 0]),
}
REGRESSION = {
    "target": np.array([1.0, 2.0, 3.0, 4.0]),
    "prediction": np.array([1.5, 2.0, 2.0, 4.0]),
}


def value(columns: Columns, name: str, num_classes: int | None = 3) -> float:
    points, _ = bootstrap_metric_values(
        [(get_metric(name), columns)], num_classes=num_classes, n_resamples=0
    )
    return float(points[0])


def reference_macro_f1(target: NDArray[Any], prediction: NDArray[Any]) -> float:
    """Per-class F1 averaged over classes present in target or prediction (sklearn)."""
    scores = []
    for label in np.union1d(target, prediction):
        tp = np.sum((prediction == label) & (target == label))
        fp = np.sum((prediction == label) & (target != label))
        fn = np.sum((prediction != label) & (target == label))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def reference_ece(confidence: NDArray[Any], correct: NDArray[Any]) -> float:
    """Guo et al. (2017) ECE with (lo, hi] bins, written as a plain loop."""
    edges = np.linspace(0.0, 1.0, ECE_BINS + 1)
    total = 0.0
    for low, high in itertools.pairwise(edges):
        in_bin = (confidence > low) & (confidence <= high)
        if low == 0.0:
            in_bin |= confidence == 0.0
        if in_bin.any():
            gap = abs(correct[in_bin].mean() - confidence[in_bin].mean())
            total += in_bin.mean() * gap
    return total


class TestClassificationMetrics:
    def test_accuracy_by_hand(self) -> None:
        """Four of five predictions match their target."""
        assert value(HAND, "accuracy") == pytest.approx(0.8)

    def test_top_k_accuracy_by_hand(self) -> None:
        """Top-1 counts rank 0 only; top-2 also counts the example ranked second."""
        assert value(HAND, "top1_accuracy") == pytest.approx(0.8)
        assert value(HAND, "top2_accuracy") == pytest.approx(1.0)

    def test_nll_is_mean_loss(self) -> None:
        """NLL averages the per-example losses: 3.5 / 5."""
        assert value(HAND, "nll") == pytest.approx(0.7)

    def test_macro_f1_by_hand(self) -> None:
        """Classes score F1 1, 2/3 and 4/5, so the macro average is 37/45."""
        assert value(HAND, "macro_f1") == pytest.approx((1 + 2 / 3 + 4 / 5) / 3)

    def test_macro_f1_ignores_classes_absent_from_target_and_prediction(self) -> None:
        """Declaring more classes than occur does not drag the average towards 0."""
        assert value(HAND, "macro_f1", num_classes=50) == pytest.approx(value(HAND, "macro_f1"))

    def test_macro_f1_counts_a_class_only_predicted_as_zero(self) -> None:
        """A class that is predicted but never the target counts with F1 = 0."""
        columns = {"target": np.array([0, 0, 1, 1]), "prediction": np.array([0, 2, 1, 1])}
        # class 0: 2/3, class 1: 1, class 2: 0
        assert value(columns, "macro_f1") == pytest.approx((2 / 3 + 1 + 0) / 3)

    def test_ece_by_hand(self) -> None:
        """Each example sits alone in its bin: ECE = (0.1+0.6+0.2+0.3+0.05) / 5."""
        assert value(HAND, "ece") == pytest.approx(0.25)

    def test_ece_is_zero_when_calibrated(self) -> None:
        """A bin whose accuracy equals its mean confidence contributes nothing."""
        columns = {
            "target": np.array([1, 1, 1, 1]),
            "prediction": np.array([1, 1, 1, 0]),
            "confidence": np.full(4, 0.75),
        }
        assert value(columns, "ece") == pytest.approx(0.0)

    def test_ece_bin_edges_are_right_closed(self) -> None:
        """Confidence 1/15 joins the first bin, 0 and 1 land in the end bins."""
        columns = {
            "target": np.array([0, 0, 0, 0]),
            "prediction": np.array([0, 1, 0, 1]),
            "confidence": np.array([1 / 15, 0.05, 1.0, 0.0]),
        }
        # first bin: 3 examples, accuracy 1/3, mean confidence (1/15 + 0.05 + 0) / 3
        first_gap = abs(1 / 3 - (1 / 15 + 0.05) / 3)
        assert value(columns, "ece") == pytest.approx(3 / 4 * first_gap)

    @settings(max_examples=25, deadline=None, derandomize=True, database=None)
    @given(
        seed=st.integers(0, 2**32 - 1),
        n=st.integers(1, 300),
        num_classes=st.integers(2, 12),
    )
    def test_match_reference_implementations(self, seed: int, n: int, num_classes: int) -> None:
        """Vectorised metrics equal plain per-class and per-bin loops on random data."""
        columns = classification(n, 0.6, seed, num_classes)
        correct = columns["prediction"] == columns["target"]
        got = compute_metrics(
            columns, ["accuracy", "macro_f1", "nll", "ece"], num_classes=num_classes, n_resamples=0
        )
        assert got["accuracy"].value == pytest.approx(correct.mean())
        assert got["nll"].value == pytest.approx(columns["loss"].mean())
        expected_f1 = reference_macro_f1(columns["target"], columns["prediction"])
        assert got["macro_f1"].value == pytest.approx(expected_f1)
        assert got["ece"].value == pytest.approx(reference_ece(columns["confidence"], correct))


class TestRegressionMetrics:
    def test_mae_and_rmse_by_hand(self) -> None:
        """Errors 0.5, 0, -1, 0 give MAE 1.5/4 and RMSE sqrt(1.25/4)."""
        assert value(REGRESSION, "mae", None) == pytest.approx(0.375)
        assert value(REGRESSION, "rmse", None) == pytest.approx(math.sqrt(1.25 / 4))

    def test_r2_by_hand(self) -> None:
        """Residual sum of squares 1.25 against total sum of squares 5."""
        assert value(REGRESSION, "r2", None) == pytest.approx(1 - 1.25 / 5)

    def test_r2_of_least_squares_fit_matches_scipy(self) -> None:
        """For least-squares fitted values R^2 equals scipy's squared correlation."""
        rng = np.random.default_rng(3)
        x = rng.normal(size=500)
        y = 1e6 + 2.0 * x + rng.normal(size=500)  # large offset probes cancellation
        fit = stats.linregress(x, y)
        columns = {"target": y, "prediction": fit.intercept + fit.slope * x}
        assert value(columns, "r2", None) == pytest.approx(fit.rvalue**2, rel=1e-9)

    def test_r2_with_constant_target_is_finite(self) -> None:
        """Constant targets score 1 when fitted exactly and 0 otherwise, never NaN."""
        exact = {"target": np.full(3, 2.0), "prediction": np.full(3, 2.0)}
        wrong = {"target": np.full(3, 2.0), "prediction": np.array([2.0, 3.0, 2.0])}
        assert value(exact, "r2", None) == 1.0
        assert value(wrong, "r2", None) == 0.0


class TestRegistry:
    @pytest.mark.parametrize(
        ("name", "higher", "test", "task"),
        [
            ("accuracy", True, "mcnemar", "classification"),
            ("top5_accuracy", True, "mcnemar", "classification"),
            ("macro_f1", True, "bootstrap", "classification"),
            ("nll", False, "bootstrap", "classification"),
            ("ece", False, "bootstrap", "classification"),
            ("mae", False, "bootstrap", "regression"),
            ("rmse", False, "bootstrap", "regression"),
            ("r2", True, "bootstrap", "regression"),
        ],
    )
    def test_direction_test_and_task(self, name: str, higher: bool, test: str, task: str) -> None:
        """Each metric declares its direction, paired test and task family."""
        metric = get_metric(name)
        assert (metric.higher_is_better, metric.paired_test, metric.task) == (higher, test, task)

    def test_defaults_are_registered(self) -> None:
        """Every default metric name resolves and belongs to its task.

        Multiple choice is read as a classification over each row's choices.
        """
        for task, names in DEFAULT_METRICS.items():
            owner = "classification" if task == "multiple_choice" else task
            assert all(METRICS[name].task == owner for name in names)

    def test_unknown_metric_suggests_the_closest_name(self) -> None:
        """A near miss raises a KeyError subclass with a did-you-mean hint."""
        with pytest.raises(UnknownMetric) as caught:
            get_metric("acc")
        assert isinstance(caught.value, KeyError)
        assert str(caught.value) == "Unknown metric 'acc'. Did you mean 'accuracy'?"

    def test_unknown_metric_without_a_close_match_lists_known_names(self) -> None:
        """A name unlike any metric lists the known ones instead of guessing."""
        with pytest.raises(UnknownMetric, match="Known metrics: accuracy, ece"):
            get_metric("zzzzzz")

    def test_top_k_for_any_k(self) -> None:
        """``top<K>_accuracy`` builds a McNemar metric offered only above K classes."""
        metric = get_metric("top3_accuracy")
        assert metric.paired_test == "mcnemar"
        assert not metric.is_applicable(3)
        assert metric.is_applicable(4)
        with pytest.raises(UnknownMetric):
            get_metric("top0_accuracy")

    def test_top5_is_not_offered_for_five_classes(self) -> None:
        """Default metrics drop top-5 for <= 5 classes, and asking for it explicitly fails."""
        assert "top5_accuracy" not in default_metrics("classification", 5)
        assert "top5_accuracy" in default_metrics("classification", 6)
        with pytest.raises(ValueError, match="num_classes >= 6"):
            compute_metrics(HAND, ["top5_accuracy"], num_classes=5)

    def test_correct_is_given_for_mcnemar_metrics_only(self) -> None:
        """McNemar metrics expose per-example correctness; bootstrap metrics return None."""
        np.testing.assert_array_equal(
            get_metric("accuracy").correct(HAND), [True, False, True, True, True]
        )
        np.testing.assert_array_equal(
            get_metric("top2_accuracy").correct(HAND), [True, True, True, True, True]
        )
        assert get_metric("nll").correct(HAND) is None

    def test_missing_column_is_named(self) -> None:
        """A metric whose column is absent fails with the column's name."""
        with pytest.raises(ValueError, match="'confidence'"):
            compute_metrics(
                {"target": HAND["target"], "prediction": HAND["prediction"]}, ["ece"], num_classes=3
            )

    def test_labels_out_of_range_are_rejected(self) -> None:
        """Class indices at or above num_classes are a data error, not a new class."""
        with pytest.raises(ValueError, match="outside"):
            compute_metrics(HAND, ["macro_f1"], num_classes=2)


class TestBootstrap:
    def test_interval_contains_the_point_value(self) -> None:
        """Every default metric's CI brackets its point estimate."""
        columns = classification(2000, 0.8, seed=1)
        results = compute_metrics(columns, default_metrics("classification", 10), num_classes=10)
        for result in results.values():
            assert result.ci_low <= result.value <= result.ci_high
            assert result.ci_low < result.ci_high
            assert result.n == 2000

    def test_same_seed_same_interval_other_seed_other_interval(self) -> None:
        """The CI is a pure function of the data and the seed."""
        columns = classification(1000, 0.7, seed=2)
        names = ["accuracy", "macro_f1", "ece"]
        first = compute_metrics(columns, names, num_classes=10, seed=7)
        again = compute_metrics(columns, names, num_classes=10, seed=7)
        other = compute_metrics(columns, names, num_classes=10, seed=8)
        assert first == again
        assert all(
            first[name].ci_low != other[name].ci_low or first[name].ci_high != other[name].ci_high
            for name in names
        )

    def test_interval_narrows_with_more_data(self) -> None:
        """100x the examples shrinks the CI about 10x (at least 5x here)."""
        small = compute_metrics(classification(500, 0.8, 3), ["accuracy", "nll"], num_classes=10)
        large = compute_metrics(classification(50_000, 0.8, 3), ["accuracy", "nll"], num_classes=10)
        for name in ("accuracy", "nll"):
            small_width = small[name].ci_high - small[name].ci_low
            large_width = large[name].ci_high - large[name].ci_low
            assert large_width < small_width / 5

    def test_interval_matches_binomial_standard_error(self) -> None:
        """For accuracy the 95% CI width is close to 2 * 1.96 * sqrt(p(1-p)/n)."""
        columns = classification(10_000, 0.8, seed=4)
        result = compute_metrics(columns, ["accuracy"], num_classes=10, n_resamples=2000)[
            "accuracy"
        ]
        p = result.value
        expected = 2 * stats.norm.ppf(0.975) * math.sqrt(p * (1 - p) / 10_000)
        assert result.ci_high - result.ci_low == pytest.approx(expected, rel=0.15)

    def test_resamples_follow_the_multinomial_distribution(self) -> None:
        """With one hit in two examples, resample accuracy is 0, 1/2, 1 w.p. 1/4, 1/2, 1/4."""
        columns = {"target": np.array([0, 1]), "prediction": np.array([0, 0])}
        _, samples = bootstrap_metric_values(
            [(get_metric("accuracy"), columns)], num_classes=2, n_resamples=4000, seed=0
        )
        shares = [np.mean(samples[:, 0] == level) for level in (0.0, 0.5, 1.0)]
        # 4 standard errors of a share near 1/2 estimated from 4000 draws is ~0.03
        assert shares == pytest.approx([0.25, 0.5, 0.25], abs=0.03)

    def test_metrics_share_the_same_resamples(self) -> None:
        """Accuracy and top-1 accuracy agree resample by resample, not just on average."""
        columns = classification(3000, 0.75, seed=5)
        _, samples = bootstrap_metric_values(
            [(get_metric("accuracy"), columns), (get_metric("top1_accuracy"), columns)],
            num_classes=10,
            n_resamples=200,
        )
        np.testing.assert_array_equal(samples[:, 0], samples[:, 1])
        assert samples[:, 0].std() > 0

    def test_mask_equals_computing_on_the_slice(self) -> None:
        """A mask gives exactly the values and CIs of the selected rows alone."""
        columns = classification(3000, 0.7, seed=6)
        mask = columns["target"] < 4
        names = ["accuracy", "macro_f1", "nll", "ece"]
        masked = compute_metrics(columns, names, num_classes=10, mask=mask)
        sliced = compute_metrics({k: v[mask] for k, v in columns.items()}, names, num_classes=10)
        assert masked == sliced
        assert masked["accuracy"].n == int(mask.sum())
        assert masked["nll"].value != compute_metrics(columns, ["nll"], num_classes=10)["nll"].value

    def test_mask_must_be_boolean_per_row(self) -> None:
        """An integer index array or a wrong-length mask is rejected, not misread."""
        with pytest.raises(ValueError, match="boolean"):
            compute_metrics(HAND, ["accuracy"], num_classes=3, mask=np.array([0, 1, 2]))
        with pytest.raises(ValueError, match="boolean"):
            compute_metrics(HAND, ["accuracy"], num_classes=3, mask=np.ones(4, dtype=bool))

    def test_no_metric_named_is_the_error_with_or_without_a_mask(self) -> None:
        """An empty metric list is said to be one, not blamed on a valid mask."""
        for mask in (None, np.ones(5, dtype=bool)):
            with pytest.raises(ValueError, match="no metric named"):
                compute_metrics(HAND, [], num_classes=3, mask=mask)

    def test_single_example_has_value_but_no_interval(self) -> None:
        """With n = 1 the value is reported and the CI is NaN."""
        mask = np.array([True, False, False, False, False])
        result = compute_metrics(HAND, ["accuracy", "nll"], num_classes=3, mask=mask)
        assert result["accuracy"].value == 1.0
        assert result["nll"].value == pytest.approx(0.1)
        assert math.isnan(result["accuracy"].ci_low)
        assert math.isnan(result["nll"].ci_high)
        assert result["accuracy"].n == 1

    def test_everything_masked_gives_nan_without_crashing(self) -> None:
        """An empty slice yields NaN value and CI with n = 0 for every metric."""
        names = list(default_metrics("classification", 3))
        result = compute_metrics(HAND, names, num_classes=3, mask=np.zeros(5, dtype=bool))
        for metric_value in result.values():
            assert metric_value.n == 0
            assert all(
                math.isnan(x)
                for x in (metric_value.value, metric_value.ci_low, metric_value.ci_high)
            )

    def test_zero_resamples_skips_the_interval(self) -> None:
        """n_resamples = 0 returns point values with NaN bounds."""
        result = compute_metrics(REGRESSION, ["mae"], num_classes=None, n_resamples=0)["mae"]
        assert result.value == pytest.approx(0.375)
        assert math.isnan(result.ci_low)

    def test_regression_interval_contains_point(self) -> None:
        """Regression metrics get intervals around their point values too."""
        rng = np.random.default_rng(9)
        target = rng.normal(size=3000)
        columns = {"target": target, "prediction": target + rng.normal(scale=0.5, size=3000)}
        for result in compute_metrics(columns, ["mae", "rmse", "r2"], num_classes=None).values():
            assert isinstance(result, MetricValue)
            assert result.ci_low < result.value < result.ci_high

    def test_invalid_confidence_is_rejected(self) -> None:
        """A confidence level outside (0, 1) is an error."""
        with pytest.raises(ValueError, match="confidence"):
            compute_metrics(HAND, ["accuracy"], num_classes=3, confidence=95)

    def test_memory_stays_bounded_for_large_inputs(self) -> None:
        """Bootstrapping 100k examples allocates a few MB, far from the 200 MB budget."""
        columns = classification(100_000, 0.8, seed=10)
        names = default_metrics("classification", 10)
        tracemalloc.start()
        try:
            compute_metrics(columns, names, num_classes=10, n_resamples=20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 50 * 2**20
