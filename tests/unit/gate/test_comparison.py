"""The pure comparison of aligned columns: exact counts, families, and the three verdicts."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from evalsentry.gate.comparison import (
    Measurement,
    Unit,
    allowed_examples,
    decide,
    detectable_of,
    measure,
)
from evalsentry.gate.margin import margin_p
from evalsentry.gate.week import Verdict
from evalsentry.sections import GatePolicy, Tolerance
from tests.synthetic import CLASSES, predictions, simulated_pair

Columns = dict[str, NDArray[Any]]
OVERALL = [Unit("", None, "gate")]
FIVE = ["accuracy", "macro_f1", "nll", "ece", "top5_accuracy"]


def pair(
    newly_wrong: int, newly_right: int, both_right: int, both_wrong: int
) -> tuple[Columns, Columns]:
    """Reference and current columns with the given discordant counts (3 classes)."""
    ref = np.array(
        [1] * newly_wrong + [0] * newly_right + [1] * both_right + [0] * both_wrong, bool
    )
    cur = np.array(
        [0] * newly_wrong + [1] * newly_right + [1] * both_right + [0] * both_wrong, bool
    )
    return predictions(ref), predictions(cur)


def judge(
    ref: Columns,
    cur: Columns,
    names: list[str],
    policy: GatePolicy,
    units: list[Unit] = OVERALL,
    num_classes: int | None = CLASSES,
) -> list[tuple[Measurement, Any]]:
    """Measure and decide one comparison; (measurement, decision) pairs."""
    measured = measure(ref, cur, names, units, policy, num_classes)
    return list(zip(measured, decide(measured, policy), strict=True))


class TestExactTolerance:
    def test_absolute_and_relative_tolerances_in_examples(self) -> None:
        """0.02 of 1000 examples is exactly 20; 5% of a reference with 900 right is exactly 45."""
        assert allowed_examples(Tolerance(max_drop=0.02), 900, 1000) == 20
        assert allowed_examples(Tolerance(max_drop="5%"), 900, 1000) == 45
        assert allowed_examples(Tolerance(max_drop=0.07), 900, 300) == Fraction(21)

    def test_a_drop_equal_to_the_tolerance_never_fails(self) -> None:
        """0.900 -> 0.880 on 1000 examples (25 newly wrong, 5 newly right), tolerance 0.02: no FAIL,
        though the drop is clear against no change; the margin test's p is above one half."""
        ref, cur = pair(25, 5, 875, 95)
        policy = GatePolicy(metrics={"accuracy": Tolerance(max_drop=0.02)})
        ((m, d),) = judge(ref, cur, ["accuracy"], policy)
        assert (m.reference_value, m.value) == (0.9, 0.88) and not m.beyond
        assert m.p_zero < 0.001 and d.p_adjusted > 0.5
        assert d.verdict == Verdict.INCONCLUSIVE and d.kind == "unresolved"

    def test_fail_needs_the_drop_significantly_beyond_the_tolerance(self) -> None:
        """One example beyond a 20-example tolerance is a possible regression, not a FAIL; a drop
        of 4.5 points against 2 is a FAIL."""
        policy = GatePolicy(metrics={"accuracy": Tolerance(max_drop=0.02)})
        ((m, d),) = judge(*pair(26, 5, 874, 95), ["accuracy"], policy)
        assert m.beyond and d.verdict == Verdict.INCONCLUSIVE and d.kind == "possible-regression"
        ((m, d),) = judge(*pair(50, 5, 850, 95), ["accuracy"], policy)
        assert m.beyond and d.verdict == Verdict.FAIL and d.p_adjusted < 0.01
        assert d.reason == "drop significantly beyond tolerance"

    def test_relative_tolerance_ties_are_within_too(self) -> None:
        """'5%' of 0.9 on 1000 examples is 45 examples: a 45-example drop is not beyond it."""
        policy = GatePolicy(metrics={"accuracy": Tolerance(max_drop="5%")})
        ((m, _),) = judge(*pair(45, 0, 855, 100), ["accuracy"], policy)
        assert not m.beyond and m.tolerance == pytest.approx(0.045)


class TestThreeVerdicts:
    def test_no_flips_on_a_small_evalset_is_inconclusive(self) -> None:
        """72 rows and no change cannot rule out a drop 3.6x the tolerance: INCONCLUSIVE, saying so."""
        ((m, d),) = judge(*pair(0, 0, 65, 7), ["accuracy"], GatePolicy())
        assert d.verdict == Verdict.INCONCLUSIVE and m.bound == pytest.approx(0.036, abs=1e-3)
        assert d.kind == "unresolved"
        assert d.reason.startswith(
            "cannot resolve ±1.0 pts on 72 examples (observed change +0.0 pts; "
            "the drop may be up to 3.6 pts, 95% bound); this evalset detects drops of about"
        )

    def test_no_flips_on_a_large_evalset_passes(self) -> None:
        """1000 rows and no change: the drop's bound (0.0027) is within 0.01, PASS."""
        ((m, d),) = judge(*pair(0, 0, 900, 100), ["accuracy"], GatePolicy())
        assert d.verdict == Verdict.PASS and m.within and m.bound < 0.003

    def test_a_large_drop_on_a_tiny_evalset_is_inconclusive_not_a_warning(self) -> None:
        """72 rows, 7 points lost (5 newly wrong): beyond tolerance, not significant: INCONCLUSIVE."""
        ((_, d),) = judge(*pair(6, 1, 59, 6), ["accuracy"], GatePolicy())
        assert d.verdict == Verdict.INCONCLUSIVE and d.kind == "possible-regression"
        assert d.reason.startswith(
            "possible regression (observed drop 6.9 pts beyond the tolerance 1.0 pts, "
            "not significant: p="
        )
        assert d.detectable is not None and d.detectable > 0.07

    def test_significant_drop_shown_within_tolerance_warns(self) -> None:
        """A real drop whose bound is within a lenient tolerance: WARN, not FAIL, not PASS."""
        policy = GatePolicy(metrics={"accuracy": Tolerance(max_drop=0.10)})
        ((_, d),) = judge(*pair(45, 0, 855, 100), ["accuracy"], policy)
        assert d.verdict == Verdict.WARN and d.reason == "significant drop within tolerance"


class TestFamilies:
    def test_report_only_slices_never_cost_the_gating_tests_power(self) -> None:
        """Ten report-only slices leave the gating family's adjusted p-values exactly as they were."""
        ref, cur = simulated_pair(np.random.default_rng(4), 360, 0.03, 0.045)
        group = np.arange(360) % 10
        slices = [Unit(f"g={g}", group == g, "report") for g in range(10)]
        alone = judge(ref, cur, FIVE, GatePolicy(), OVERALL, 10)
        with_slices = judge(ref, cur, FIVE, GatePolicy(), OVERALL + slices, 10)
        gating = [d.p_adjusted for m, d in with_slices if m.family == "gate"]
        assert gating == [d.p_adjusted for _, d in alone]
        reported = [(m, d) for m, d in with_slices if m.family == "report"]
        assert len(reported) == 50 and all(d.p_adjusted >= m.p_value for m, d in reported)

    def test_primary_keeps_nearly_its_raw_p_among_correlated_metrics(self) -> None:
        """Accuracy's family-adjusted p stays within a fifth of its exact p (Holm would multiply by 5)."""
        ref, cur = simulated_pair(np.random.default_rng(5), 1000, 0.03, 0.02)
        accuracy = next((m, d) for m, d in judge(ref, cur, FIVE, GatePolicy(), OVERALL, 10))
        m, d = accuracy
        assert m.metric == "accuracy" and m.p_value <= d.p_adjusted <= m.p_value / 0.8 + 1e-12

    def test_family_wise_false_fail_rate_is_at_most_alpha(self) -> None:
        """Exchangeable checkpoints, zero tolerance (every significant drop would FAIL), five metrics:
        a FAIL anywhere in the family happens at most ~alpha of the time (300 seeded trials)."""
        rng = np.random.default_rng(7)
        zero = Tolerance(max_drop=0.0)
        policy = GatePolicy(
            default=zero, metrics=dict.fromkeys(FIVE, zero), bootstrap_resamples=500
        )
        trials = 300
        failed = sum(
            any(
                d.verdict == Verdict.FAIL
                for _, d in judge(*simulated_pair(rng, 300, 0.1, 0.0), FIVE, policy, OVERALL, 10)
            )
            for _ in range(trials)
        )
        assert failed <= stats.binom.isf(1e-3, trials, 0.05)

    @pytest.mark.parametrize(
        ("n", "churn", "drop", "seed"), [(360, 0.03, 0.045, 8), (1000, 0.01, 0.02, 18)]
    )
    def test_accuracy_power_matches_the_exact_single_metric_test(
        self, n: int, churn: float, drop: float, seed: int
    ) -> None:
        """On the same simulated pairs the family FAILs accuracy within 0.03 of accuracy alone
        (the exact margin test at full alpha), and never where accuracy alone would not."""
        rng = np.random.default_rng(seed)
        policy = GatePolicy()
        gate, oracle = [], []
        for _ in range(150):
            ref, cur = simulated_pair(rng, n, churn, drop)
            m, d = judge(ref, cur, FIVE, policy, OVERALL, 10)[0]
            gate.append(d.verdict == Verdict.FAIL)
            b, c = m.newly_wrong or 0, m.newly_right or 0
            oracle.append(margin_p(b, c, n, Fraction("0.01") * n) < 0.05)
        assert np.mean(oracle) > 0.3 and np.mean(oracle) - np.mean(gate) <= 0.03
        assert not any(g and not o for g, o in zip(gate, oracle, strict=True))


class TestDetectableDrop:
    def test_the_stated_drop_is_detected_about_80_percent_of_the_time(self) -> None:
        """The drop an INCONCLUSIVE comparison states is FAILed in 70-90% of simulated retrains."""
        rng = np.random.default_rng(9)
        n, churn, policy = 360, 0.03, GatePolicy()
        ref, cur = simulated_pair(rng, n, churn, 0.0)
        _, first = judge(ref, cur, FIVE, policy, OVERALL, 10)[0]
        stated = first.detectable
        if stated is None:  # PASS: ask for it the way an INCONCLUSIVE would
            m = measure(ref, cur, FIVE, OVERALL, policy, 10)[0]
            stated = detectable_of(m, 0.05)
        assert stated is not None and stated > 0.01
        trials = 200
        hits = sum(
            judge(*simulated_pair(rng, n, churn, stated), ["accuracy"], policy, OVERALL, 10)[0][
                1
            ].verdict
            == Verdict.FAIL
            for _ in range(trials)
        )
        assert 0.7 <= hits / trials <= 0.9


class TestRegression:
    def test_examples_worse_by_more_than_a_delta_are_counted(self) -> None:
        """Regression flips count examples whose absolute error grew (or shrank) by more than delta."""
        target = np.linspace(0, 10, 200)
        ref = {"target": target, "prediction": target + 0.1}
        error = np.r_[np.full(30, 1.0), np.full(10, -0.01), np.full(160, 0.1)]
        cur = {"target": target, "prediction": target + error}
        policy = GatePolicy(regression_delta=0.5)
        (m, _), *_ = judge(ref, cur, ["mae", "rmse", "r2"], policy, OVERALL, None)
        assert (m.newly_wrong, m.newly_right, m.flip_delta) == (30, 0, 0.5)

    def test_default_delta_is_a_share_of_the_targets_spread_and_r2_tolerance_is_absolute(
        self,
    ) -> None:
        """Without gate.regression_delta, delta is 5% of the targets' sd; r2 allows 0.01 absolute."""
        rng = np.random.default_rng(10)
        target = rng.normal(size=500)
        ref = {"target": target, "prediction": target + rng.normal(scale=0.9, size=500)}
        cur = {"target": target, "prediction": target + rng.normal(scale=0.9, size=500)}
        results = judge(ref, cur, ["mae", "r2"], GatePolicy(), OVERALL, None)
        assert results[0][0].flip_delta == pytest.approx(0.05 * np.std(target))
        r2 = results[1][0]
        assert abs(r2.reference_value) < 0.5 and r2.tolerance == 0.01
