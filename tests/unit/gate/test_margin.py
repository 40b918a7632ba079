"""The exact margin test: Tango's statistic, exact size at the tolerance, power, detectable drops."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import evalsentry.gate.margin as margin_module
from evalsentry.gate import tail_tables
from evalsentry.gate.margin import (
    GAMMA,
    GRID_SLACK,
    MarginTest,
    detectable_drop,
    first_at_least,
    margin_p,
    tango_z,
)
from evalsentry.gate.stats import mcnemar_p

ALPHA = 0.05

ROOT = Path(__file__).parents[3]


def every_outcome(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (newly wrong, newly right) pair possible on n examples."""
    b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = b + c <= n
    return b[keep], c[keep]


def failing(n: int, allowed: Fraction) -> np.ndarray:
    """For every outcome of :func:`every_outcome`, whether the margin test FAILs it."""
    b, c = every_outcome(n)
    return np.array(
        [margin_p(int(x), int(y), n, allowed) <= ALPHA for x, y in zip(b, c, strict=True)]
    )


def fail_probability(n: int, p_b: float, p_c: float, fails: np.ndarray) -> float:
    """P(FAIL) summed exactly over every outcome, for the given cell probabilities."""
    b, c = every_outcome(n)
    cells = np.stack([b, c, n - b - c], axis=1)
    weight = stats.multinomial.pmf(cells, n, [p_b, p_c, 1 - p_b - p_c])
    return float((weight * fails).sum())


class TestStatistic:
    def test_at_margin_zero_it_is_mcnemars(self) -> None:
        """Tango's z at margin 0 is McNemar's (b - c) / sqrt(b + c)."""
        b, c = np.array([5, 12, 30]), np.array([1, 12, 7])
        assert tango_z(b, c, 500, 0.0) == pytest.approx((b - c) / np.sqrt(b + c))

    @pytest.mark.parametrize(
        ("n", "margin"), [(40, 0.05), (360, 0.01), (1000, 0.02), (5000, 0.005)]
    )
    def test_grows_with_newly_wrong_at_a_fixed_discordant_count(
        self, n: int, margin: float
    ) -> None:
        """The test's rejection region is "at least b newly wrong" for each m: z rises with b."""
        for m in range(0, min(n, 400)):
            b = np.arange(m + 1)
            assert np.all(np.diff(tango_z(b, m - b, n, margin)) > 0)

    def test_first_at_least_is_the_smallest_count_reaching_z(self) -> None:
        """For each m, the returned b reaches z and b - 1 does not; m + 1 when nothing does."""
        n, margin, m = 360, 0.01, np.arange(0, 60)
        first = first_at_least(m, n, margin, 1.5)
        for count, b in zip(m, first, strict=True):
            reached = tango_z(np.arange(count + 1), count - np.arange(count + 1), n, margin) >= 1.5
            assert b == (np.flatnonzero(reached)[0] if reached.any() else count + 1)


class TestExactSize:
    @pytest.mark.parametrize(("n", "tolerance"), [(5, "0.05"), (12, "0.01"), (40, "0.05")])
    def test_never_fails_a_drop_at_the_tolerance_more_than_alpha(
        self, n: int, tolerance: str
    ) -> None:
        """Every outcome enumerated: FAIL at drop == tolerance has chance <= alpha, wherever the
        nuisance (how many examples change) sits on the margin, from none to nearly all."""
        allowed = Fraction(tolerance) * n
        margin = float(allowed / n)
        fails = failing(n, allowed)
        for p_c in np.r_[0.0, np.geomspace(1e-3, (1 - margin) / 2 - 1e-6, 40)]:
            assert fail_probability(n, p_c + margin, p_c, fails) <= ALPHA

    def test_inside_the_null_it_fails_even_less(self) -> None:
        """A drop below the tolerance (or none, or a gain) FAILs less often than one at it."""
        n, allowed = 40, Fraction(2)
        fails = failing(n, allowed)
        at_margin = fail_probability(n, 0.07, 0.02, fails)
        assert fail_probability(n, 0.045, 0.02, fails) <= at_margin
        assert fail_probability(n, 0.02, 0.02, fails) <= at_margin
        assert fail_probability(n, 0.03, 0.0, fails) <= fail_probability(n, 0.05, 0.0, fails)

    @pytest.mark.parametrize("n", [360, 1000, 5000])
    def test_fail_rate_at_the_tolerance_is_at_most_alpha_in_the_issue_cells(self, n: int) -> None:
        """At n 360/1000/5000 and churn 1/3/5% (exact sums), a drop equal to 1 pt FAILs <= alpha."""
        test = MarginTest(n, Fraction("0.01") * n)
        for churn in (0.01, 0.03, 0.05):
            assert 0.03 < test.power(churn / 2, 0.01, ALPHA) <= ALPHA

    def test_the_grid_misses_far_less_than_its_slack(self) -> None:
        """The largest tail probability over the grid is within GRID_SLACK of a 10x finer grid's."""
        for n, tolerance in [(360, "0.01"), (1000, "0.005"), (719, "0.02")]:
            allowed = Fraction(tolerance) * n
            coarse = MarginTest(n, allowed)
            saved = (
                margin_module._GRID_SDS,
                margin_module._NEAR_GRID_SDS,
                margin_module._GRID_MIN_STEP,
            )
            try:
                margin_module._GRID_SDS = saved[0] / 10
                margin_module._NEAR_GRID_SDS = saved[1] / 10
                margin_module._GRID_MIN_STEP = saved[2] / 10
                fine = MarginTest(n, allowed)
            finally:
                (
                    margin_module._GRID_SDS,
                    margin_module._NEAR_GRID_SDS,
                    margin_module._GRID_MIN_STEP,
                ) = saved
            last = int(np.searchsorted(coarse.grid, 0.1))
            last_fine = int(np.searchsorted(fine.grid, coarse.grid[last]))
            for z in np.linspace(1.0, 3.0, 9):
                top = coarse._tails(z, 0, last).max()
                assert fine._tails(z, 0, last_fine).max() <= top * GRID_SLACK


class TestPValue:
    def test_a_drop_at_the_tolerance_is_far_from_significant(self) -> None:
        """25 newly wrong and 5 newly right on 1000 examples is a drop of exactly 0.02: p > 0.5."""
        assert margin_p(25, 5, 1000, Fraction(20)) > 0.5

    def test_significant_against_zero_is_not_significant_against_the_tolerance(self) -> None:
        """A drop of 2.6 points is clear against no change but not against a 2-point tolerance."""
        assert float(mcnemar_p(26, 26)) < 1e-6
        assert margin_p(26, 0, 1000, Fraction(20)) > 0.05

    def test_far_beyond_the_tolerance_is_significant_down_to_the_floor(self) -> None:
        """60 newly wrong, 10 newly right on 1000 examples: 5 points against a 1-point tolerance
        leaves only GAMMA, the share spent on the discordance's confidence interval."""
        assert margin_p(60, 10, 1000, Fraction(10)) == pytest.approx(GAMMA, rel=1e-3)

    def test_p_values_near_alpha_are_finely_spaced(self) -> None:
        """Near alpha the p-values take many values, not a few coarse steps: a family's small
        correction then moves a FAIL only where the evidence is that close (1000 examples)."""
        test = MarginTest(1000, Fraction(10))
        values = {
            round(p, 4)
            for c in range(0, 30)
            for b in range(c + 10, c + 40)
            if 0.03 < (p := test.p_value(b, c)) < 0.05
        }
        assert len(values) > 20

    def test_a_tolerance_of_every_example_can_never_fail(self) -> None:
        """With the whole evalset allowed, the p-value is 1."""
        assert margin_p(10, 0, 10, Fraction(10)) == 1.0

    def test_falls_as_newly_wrong_grow(self) -> None:
        """More newly wrong examples, same newly right: smaller p."""
        p = [margin_p(b, 4, 360, Fraction("3.6")) for b in range(4, 30, 3)]
        assert all(later < earlier for earlier, later in itertools.pairwise(p))

    def test_power_agrees_with_the_p_values_it_sums(self) -> None:
        """The exact power of MarginTest equals P(p <= level) summed outcome by outcome."""
        n, allowed = 40, Fraction(2)
        fails = failing(n, allowed)
        test = MarginTest(n, allowed)
        for rate, drop in [(0.02, 0.05), (0.01, 0.15), (0.05, 0.2)]:
            exact = fail_probability(n, rate + drop, rate, fails)
            assert test.power(rate, drop, ALPHA) == pytest.approx(exact, abs=2e-3)


class TestDetectableDrop:
    def test_power_sum_matches_simulation(self) -> None:
        """The exact power of the margin test agrees with 4,000 simulated pairs to 0.02."""
        n, churn, drop, allowed = 360, 0.015, 0.04, Fraction("0.01") * 360
        rng = np.random.default_rng(3)
        cells = rng.multinomial(n, [churn + drop, churn, 1 - 2 * churn - drop], size=4000)
        test = MarginTest(n, allowed)
        cache: dict[tuple[int, int], bool] = {}
        for b, c in cells[:, :2]:
            key = (int(b), int(c))
            if key not in cache:
                cache[key] = test.p_value(*key) <= ALPHA
        simulated = np.mean([cache[(int(b), int(c))] for b, c in cells[:, :2]])
        assert test.power(churn, drop, ALPHA) == pytest.approx(simulated, abs=0.02)

    @pytest.mark.parametrize(("n", "newly_right"), [(360, 0), (360, 9), (1000, 15), (5000, 50)])
    def test_is_the_80_percent_power_point_and_above_the_tolerance(
        self, n: int, newly_right: int
    ) -> None:
        """At the stated drop the test FAILs 80% of the time; it is never below the tolerance."""
        allowed = Fraction("0.01") * n
        drop = detectable_drop(n, newly_right, allowed, ALPHA)
        assert drop is not None and drop > 0.01
        test, rate = MarginTest(n, allowed), newly_right / n
        assert test.power(rate, drop, ALPHA) == pytest.approx(0.8, abs=1e-3)
        assert test.power(rate, drop * 0.9, ALPHA) < 0.8

    def test_beyond_400_expected_changes_the_normal_critical_value_agrees(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where power uses the statistic's normal critical value (440 examples expected to
        change at the margin), it is within 0.005 of the exact critical values' power."""
        test = MarginTest(4000, Fraction(40))
        for drop in (0.013, 0.02):
            normal = test.power(0.05, drop, ALPHA)
            monkeypatch.setattr(margin_module, "_NORMAL_COUNT", 10**9)
            exact = test.power(0.05, drop, ALPHA)
            monkeypatch.undo()
            assert 0.1 < exact < 0.99 and normal == pytest.approx(exact, abs=0.005)

    def test_more_churn_and_a_stricter_level_need_bigger_drops(self) -> None:
        """Noisier retrains and a family's smaller level both raise the detectable drop."""
        allowed = Fraction("0.01") * 1000
        base = detectable_drop(1000, 5, allowed, ALPHA)
        assert base is not None
        assert detectable_drop(1000, 25, allowed, ALPHA) > base  # type: ignore[operator]
        assert detectable_drop(1000, 5, allowed, ALPHA / 5) > base  # type: ignore[operator]

    def test_too_small_an_evalset_detects_nothing(self) -> None:
        """Five examples cannot detect a drop of at most half of them 80% of the time: None."""
        assert detectable_drop(5, 0, Fraction("0.01") * 5, ALPHA, largest=0.5) is None
        assert detectable_drop(5, 0, Fraction("0.01") * 5, ALPHA) is not None  # 4 of 5 wrong


def _table(test: MarginTest, last: int) -> tail_tables.TailTable:
    """The tail table of grid points 0 to ``last`` (or the first of them that fit)."""
    point, count, probability = test._cells_of(0, last)
    return tail_tables.TailTable(point, count, probability, test.share[point], test)


class TestTailTables:
    """The critical z's bisection reads tails from tables; they are the exact sums it replaced."""

    @pytest.mark.parametrize(
        ("n", "allowed"), [(360, Fraction(18, 5)), (1000, Fraction(0)), (719, 14)]
    )
    def test_every_tail_is_the_exact_sum(self, n: int, allowed: Fraction) -> None:
        """At every grid point up to d = 0.3 and z from -4 to 9: equal to 1e-9 relative (1e-15 absolute: each count leaves out 1e-18)."""
        test = MarginTest(n, Fraction(allowed))
        last = int(np.searchsorted(test.grid, 0.3))
        table = _table(test, last)
        points = table.points
        for z in np.linspace(-4.0, 9.0, 27):
            exact = test._tails(float(z), 0, points - 1)
            looked_up = table.tails(np.full(points, z))
            np.testing.assert_allclose(looked_up, exact, rtol=1e-9, atol=1e-15)

    def test_a_table_too_big_for_its_budget_covers_fewer_points(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Under a small budget the points come a few at a time, with the same critical z's."""
        whole = MarginTest(1000, Fraction(10))._critical_upto(ALPHA, 60)
        monkeypatch.setattr(tail_tables, "TABLE_SIZE", 5_000)
        assert _table(MarginTest(1000, Fraction(10)), 60).points < 10
        np.testing.assert_array_equal(
            MarginTest(1000, Fraction(10))._critical_upto(ALPHA, 60), whole
        )

    def test_the_detectable_drops_of_the_implementation_before(self) -> None:
        """13 cases of a grid on which the per-step tail sums and the tables agreed exactly."""
        reference = ROOT / "tests/data/detectable_drops_before_tail_tables.json"
        for case in json.loads(reference.read_text())["cases"]:
            drop = detectable_drop(
                case["n"], case["newly_right"], Fraction(case["allowed"]), case["level"]
            )
            assert drop == pytest.approx(case["drop"], rel=5e-4), case
