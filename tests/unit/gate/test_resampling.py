"""Paired sign flips: shared swaps for every metric and slice, and their p-values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from evalsentry.gate.metrics import compute_metrics, default_metrics, get_metric
from evalsentry.gate.resampling import permutation_p_values, swap_values
from tests.synthetic import classification, simulated_pair

Columns = dict[str, NDArray[Any]]
SWAPS = 1000


def degrade(columns: Columns, share: float, seed: int) -> Columns:
    """The same model with a share of its correct predictions turned wrong."""
    rng = np.random.default_rng(seed)
    flip = (columns["prediction"] == columns["target"]) & (
        rng.random(columns["target"].size) < share
    )
    prediction = np.where(flip, (columns["target"] + 1) % 10, columns["prediction"])
    return {**columns, "prediction": prediction}


def drops(name: str, ref: Columns, cur: Columns, **kwargs: Any) -> NDArray[np.float64]:
    """Oriented drops of one metric: observed first, then under each swap."""
    metric = get_metric(name)
    (values,) = swap_values([metric], ref, cur, num_classes=10, n_swaps=SWAPS, **kwargs)
    a, b = values.reference[:, 0], values.current[:, 0]
    return np.asarray(a - b if metric.higher_is_better else b - a)


class TestSwapValues:
    def test_row_zero_is_the_observed_pair_for_every_metric_and_slice(self) -> None:
        """Unswapped, the values equal each model's own metrics, overall and on a slice."""
        ref, cur = simulated_pair(np.random.default_rng(1), 600, 0.05, 0.02)
        names = list(default_metrics("classification", 10))
        half = ref["target"] < 5
        overall, sliced = swap_values(
            [get_metric(n) for n in names], ref, cur, num_classes=10, masks=[None, half]
        )
        for values, mask in ((overall, None), (sliced, half)):
            for model, row in ((ref, values.reference[0]), (cur, values.current[0])):
                expected = compute_metrics(model, names, num_classes=10, n_resamples=0, mask=mask)
                assert row == pytest.approx([expected[n].value for n in names], abs=1e-12)
        assert (overall.n, sliced.n) == (600, int(half.sum()))

    def test_identical_models_give_no_spread_and_p_one(self) -> None:
        """The same outputs on both sides: every swap is the observed pair, p = 1."""
        ref = classification(500, 0.8, seed=3)
        null = drops("nll", ref, dict(ref))
        assert np.all(null == 0)
        assert permutation_p_values(null[1:], float(null[0]))[0] == 1.0

    def test_count_metric_swaps_follow_the_exact_mcnemar_law(self) -> None:
        """Swapping the discordant pairs makes newly-wrong counts Binomial(b + c, 1/2)."""
        ref = classification(2000, 0.8, seed=4)
        cur = degrade(ref, 0.05, seed=5)
        null = drops("accuracy", ref, cur)[1:]
        ok_r, ok_c = ref["prediction"] == ref["target"], cur["prediction"] == cur["target"]
        m = int((ok_r != ok_c).sum())
        newly_wrong = np.rint((m + null * 2000) / 2)
        assert newly_wrong.mean() == pytest.approx(m / 2, rel=0.02)
        assert newly_wrong.var() == pytest.approx(m / 4, rel=0.15)

    def test_detects_a_clear_degradation(self) -> None:
        """Turning 10% of hits wrong lowers macro-F1 with the smallest p the swaps can give."""
        ref = classification(2000, 0.8, seed=1)
        null = drops("macro_f1", ref, degrade(ref, 0.10, seed=2))
        assert permutation_p_values(null[1:], float(null[0]))[0] == pytest.approx(1 / (SWAPS + 1))

    def test_orientation_follows_metric_direction(self) -> None:
        """Higher error (lower-is-better) and lower R^2 (higher-is-better) both count as drops."""
        rng = np.random.default_rng(5)
        target = rng.normal(size=1500)
        ref = {"target": target, "prediction": target + rng.normal(scale=0.3, size=1500)}
        cur = {"target": target, "prediction": target + rng.normal(scale=0.6, size=1500)}
        for name in ("rmse", "mae", "r2"):
            worse = drops(name, ref, cur)
            assert worse[0] > 0 and permutation_p_values(worse[1:], float(worse[0]))[0] < 0.01
            better = drops(name, cur, ref)
            assert permutation_p_values(better[1:], float(better[0]))[0] > 0.99

    def test_pairing_detects_a_small_consistent_shift(self) -> None:
        """A +0.01 loss on every example is invisible unpaired but certain when paired."""
        ref = classification(1000, 0.8, seed=6)
        ref["loss"] = np.random.default_rng(7).exponential(1.0, 1000)  # SE of the mean ~0.03
        null = drops("nll", ref, {**ref, "loss": ref["loss"] + 0.01})
        assert permutation_p_values(null[1:], float(null[0]))[0] == pytest.approx(1 / (SWAPS + 1))

    def test_is_seeded(self) -> None:
        """The same seed reproduces every swap exactly; another seed does not."""
        ref = classification(500, 0.7, seed=8)
        cur = degrade(ref, 0.03, seed=9)
        assert np.array_equal(drops("ece", ref, cur, seed=11), drops("ece", ref, cur, seed=11))
        assert not np.array_equal(drops("ece", ref, cur, seed=11), drops("ece", ref, cur, seed=12))

    def test_different_examples_are_rejected(self) -> None:
        """Columns with different targets or lengths cannot be compared pairwise."""
        ref = classification(100, 0.7, seed=10)
        with pytest.raises(ValueError, match="targets differ"):
            drops("nll", ref, {**ref, "target": ref["target"][::-1]})
        with pytest.raises(ValueError, match="length"):
            drops("nll", ref, {name: column[:50] for name, column in ref.items()})

    def test_exchangeable_models_are_flagged_at_most_alpha_of_the_time(self) -> None:
        """Under the null, the sign-flip test of nll rejects at most ~alpha (seeded, 300 pairs)."""
        rng = np.random.default_rng(12)
        trials, alpha = 300, 0.05
        rejections = 0
        for _ in range(trials):
            ref, cur = simulated_pair(rng, 300, 0.05, 0.0)
            null = drops("nll", ref, cur, seed=int(rng.integers(2**31)))
            rejections += permutation_p_values(null[1:], float(null[0]))[0] <= alpha
        assert rejections <= stats.binom.isf(1e-3, trials, alpha)


class TestPermutationPValues:
    def test_counts_the_observed_and_ties(self) -> None:
        """p = (1 + #{null >= observed}) / (R + 1); each swap's own p is its upper-tail share."""
        p, own = permutation_p_values(np.array([0.1, 0.2, 0.3, 0.2]), 0.2)
        assert p == pytest.approx(4 / 5)
        assert own.tolist() == pytest.approx([1.0, 0.75, 0.25, 0.75])

    def test_nan_counts_as_extreme(self) -> None:
        """A swap whose metric is undefined never makes the observed drop look rarer."""
        p, _ = permutation_p_values(np.array([np.nan, 0.0]), 0.5)
        assert p == pytest.approx(2 / 3)
