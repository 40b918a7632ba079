"""Clustered statistics: whole clusters swapped and resampled, cluster-robust t on the drop."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import optimize, stats

from evalsentry.gate.clusters import (
    Clusters,
    cluster_intervals,
    cluster_mismatch,
    clustered_se,
    clustered_t,
    paired_clusters,
    score_bound,
)
from evalsentry.gate.comparison import Measurement, Unit, decide, measure
from evalsentry.gate.metrics import compute_metrics
from evalsentry.gate.week import Verdict
from evalsentry.sections import GatePolicy, Tolerance
from tests.synthetic import CLASSES, predictions

Columns = dict[str, NDArray[Any]]
OVERALL = [Unit("", None, "gate")]
CLUSTERS, SIZE = 40, 10
N = CLUSTERS * SIZE
#: Any real drop of accuracy fails: the test of the drop against zero decides.
STRICT = GatePolicy(metrics={"accuracy": Tolerance(max_drop=0.0)})


def correlated() -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Whole passages flip together: 8 of 40 all newly wrong, 4 all newly right (b=80, c=40)."""
    ref = np.ones(N, bool)
    cur = np.ones(N, bool)
    cur[: 8 * SIZE] = False  # passages 0-7: newly wrong
    ref[8 * SIZE : 12 * SIZE] = False  # passages 8-11: newly right
    return ref, cur


def passages() -> NDArray[Any]:
    return np.array([f"p{i // SIZE:02d}" for i in range(N)], dtype=object)


def with_clusters(columns: Columns, clusters: NDArray[Any]) -> Columns:
    return {**columns, "cluster": clusters, "cluster_key": np.full(N, "passage", dtype=object)}


def judge(ref: Columns, cur: Columns, names: list[str]) -> list[tuple[Measurement, Any]]:
    measured = measure(ref, cur, names, OVERALL, STRICT, CLASSES)
    return list(zip(measured, decide(measured, STRICT), strict=True))


def hand_se() -> float:
    """Miller's SE by hand: centred cluster sums 9 (x8), -11 (x4), -1 (x28), over n."""
    return math.sqrt(8 * 9**2 + 4 * 11**2 + 28 * 1**2) / N


class TestClusteredSE:
    def test_matches_a_hand_computation(self) -> None:
        """The cluster-robust SE of the correlated drops is sqrt(1160) / 400."""
        ref, cur = correlated()
        index = np.arange(N) // SIZE
        assert clustered_se(ref.astype(float) - cur.astype(float), index) == pytest.approx(
            hand_se()
        )

    def test_singletons_give_the_plain_standard_error(self) -> None:
        """With every example its own cluster it is sd / sqrt(n) (ddof 0)."""
        d = np.random.default_rng(1).normal(size=50)
        expected = float(np.std(d) / math.sqrt(d.size))
        assert clustered_se(d, np.arange(50)) == pytest.approx(expected)


class TestScoreBound:
    def test_at_the_bound_the_t_statistic_centred_there_is_the_critical_value(self) -> None:
        """The bound solves (bound - drop) / se(bound) = t, se's cluster sums centred at bound."""
        ref, cur = correlated()
        d = ref.astype(float) - cur.astype(float)
        index = np.arange(N) // SIZE
        t = float(stats.t.ppf(0.95, CLUSTERS - 1))
        bound = score_bound(d, Clusters(index, CLUSTERS), t)
        sums = np.bincount(index, weights=d - bound)
        se = math.sqrt(CLUSTERS / (CLUSTERS - 1) * float(np.sum(sums**2))) / N
        assert (bound - d.mean()) / se == pytest.approx(t, rel=1e-9)
        assert bound > d.mean() + t * clustered_se(d, index)  # above the Wald bound here

    def test_a_true_drop_at_the_tolerance_passes_at_most_alpha(self) -> None:
        """20 passages of 5 correlated questions (each passage's flip rates drawn from a Beta of
        concentration 2), true drop 2 pts = the tolerance, 5% churn: PASS (the bound within the
        tolerance) in at most 5% + 2 SE of 3,000 weeks. The bound around the observed drop
        PASSed 7.1% of them."""
        rng = np.random.default_rng(7)
        trials, groups, size, margin, churn, alpha = 3000, 20, 5, 0.02, 0.05, 0.05
        clusters = Clusters(np.repeat(np.arange(groups), size), groups)
        passes = 0
        for _ in range(trials):
            wrong = rng.beta((churn + margin) * 2, (1 - churn - margin) * 2, groups)
            right = rng.beta(churn * 2, (1 - churn) * 2, groups)
            total = np.maximum(wrong + right, 1.0)
            u = rng.random((groups, size))
            d = (u < (wrong / total)[:, None]).astype(float)
            d -= u > 1 - (right / total)[:, None]
            passes += clustered_t(d.ravel(), clusters, margin, alpha).bound <= margin
        assert passes / trials <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / trials)


class TestClusteredGate:
    def test_correlated_clusters_turn_a_significant_drop_into_a_possible_one(self) -> None:
        """Unclustered exact McNemar FAILs; clustered (t, 39 df) it is not significant."""
        ref, cur = correlated()
        ((plain, plain_d),) = judge(predictions(ref), predictions(cur), ["accuracy"])
        assert plain.method == "exact-margin" and plain_d.verdict == Verdict.FAIL
        groups = passages()
        clustered = judge(
            with_clusters(predictions(ref), groups),
            with_clusters(predictions(cur), groups),
            ["accuracy"],
        )
        ((m, d),) = clustered
        assert m.method == "clustered-t" and m.drop == pytest.approx(0.1)
        assert m.p_zero == pytest.approx(float(stats.t.sf(0.1 / hand_se(), CLUSTERS - 1)))
        assert m.p_zero > 0.05
        assert d.verdict == Verdict.INCONCLUSIVE
        assert "clustered by passage: 40 clusters" in d.reason

    def test_the_bound_widens_to_the_hand_computed_one(self) -> None:
        """The drop's upper bound is the delta with delta - 0.1 = t(0.95, 39) * SE(delta), the
        SE's cluster sums centred at delta (x 40/39), well above the unclustered bound."""
        ref, cur = correlated()
        ((plain, _),) = judge(predictions(ref), predictions(cur), ["accuracy"])
        groups = passages()
        ((m, _),) = judge(
            with_clusters(predictions(ref), groups),
            with_clusters(predictions(cur), groups),
            ["accuracy"],
        )
        t, index = float(stats.t.ppf(0.95, CLUSTERS - 1)), np.arange(N) // SIZE
        d = ref.astype(float) - cur.astype(float)

        def beyond(delta: float) -> float:
            sums = np.bincount(index, weights=d - delta)
            return delta - 0.1 - t * math.sqrt(40 / 39 * float(np.sum(sums**2))) / N

        expected = optimize.brentq(beyond, 0.1, 1.0, xtol=1e-14)
        assert m.bound == pytest.approx(expected)
        assert m.bound > 0.1 + t * hand_se()  # the bound around the observed drop: lower
        assert m.bound - m.drop > 1.5 * (plain.bound - plain.drop)

    def test_independent_clusters_agree_with_the_unclustered_test(self) -> None:
        """Flips scattered over the passages: both tests call the drop significant (FAIL)."""
        ref, cur = correlated()
        order = np.random.default_rng(7).permutation(N)
        ref, cur = ref[order], cur[order]
        ((plain, plain_d),) = judge(predictions(ref), predictions(cur), ["accuracy"])
        groups = passages()
        ((m, d),) = judge(
            with_clusters(predictions(ref), groups),
            with_clusters(predictions(cur), groups),
            ["accuracy"],
        )
        assert plain_d.verdict == d.verdict == Verdict.FAIL
        assert m.p_zero < 0.01 and plain.p_zero < 0.01
        assert m.bound == pytest.approx(plain.bound, rel=0.25)

    def test_other_metrics_swap_whole_clusters(self) -> None:
        """nll's sign flips swap passages: 12 moved passages, P(S >= 4 of 12 signs) = 794/4096."""
        ref, cur = correlated()
        groups = passages()
        ((m, _),) = judge(
            with_clusters(predictions(ref), groups),
            with_clusters(predictions(cur), groups),
            ["nll"],
        )
        assert m.method == "cluster-sign-flip" and m.clustered.endswith("40 clusters")
        assert m.p_zero == pytest.approx(794 / 4096, abs=0.03)
        ((plain, _),) = judge(predictions(ref), predictions(cur), ["nll"])
        assert plain.method == "sign-flip" and plain.p_zero < 0.01

    def test_one_side_without_clusters_is_not_clustered_and_the_pair_is_refused(self) -> None:
        """Clusters hold only when both sides carry the same grouping; where they do not, the
        comparison is refused (read_pairs' reason), never tested as unclustered."""
        ref, cur = correlated()
        groups = passages()
        clustered = with_clusters(predictions(cur), groups)
        assert paired_clusters(predictions(ref), clustered) is None
        assert cluster_mismatch(predictions(ref), clustered) == (
            "not comparable: only this run is grouped into clusters (by passage); import both "
            "runs with --cluster passage, or neither"
        )
        other = with_clusters(predictions(ref), np.roll(groups, 1))
        assert paired_clusters(other, clustered) is None
        reason = cluster_mismatch(other, clustered)
        assert reason is not None and reason.startswith("not comparable: the clusters differ (")
        assert cluster_mismatch(with_clusters(predictions(ref), groups), clustered) is None
        assert cluster_mismatch(predictions(ref), predictions(cur)) is None


class TestClusterIntervals:
    def test_resampling_clusters_widens_the_interval(self) -> None:
        """Whole passages right or wrong: the cluster bootstrap's interval is wider."""
        _, cur = correlated()
        columns = predictions(cur)
        plain = compute_metrics(columns, ["accuracy"], num_classes=CLASSES, n_resamples=400)
        index = np.arange(N) // SIZE
        grouped = cluster_intervals(
            columns, ["accuracy"], Clusters(index, CLUSTERS), n_resamples=400
        )
        assert grouped["accuracy"].value == plain["accuracy"].value == pytest.approx(0.8)
        width = grouped["accuracy"].ci_high - grouped["accuracy"].ci_low
        assert width > 2 * (plain["accuracy"].ci_high - plain["accuracy"].ci_low)
