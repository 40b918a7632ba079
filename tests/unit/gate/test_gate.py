"""The regression gate: every verdict branch, fail-closed cases, baselines, slices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalsentry.gate.drift import DriftResult
from evalsentry.gate.verdicts import brief_reason
from evalsentry.gate.week import Comparison, GateReport, Verdict, gate_candidate, gate_week
from evalsentry.history.store import History
from evalsentry.sections import GatePolicy, Tolerance
from tests.synthetic import accuracy_mask, predictions, record_week

N = 1000
POLICY = GatePolicy(default=Tolerance(max_drop=0.01), metrics={"nll": Tolerance(max_drop="50%")})


@pytest.fixture
def history(tmp_path: Path) -> History:
    """An empty history store."""
    return History(str(tmp_path / "store"))


def overall(report: GateReport, reference: str, metric: str = "accuracy") -> object:
    """The overall comparison of one metric against one reference."""
    return next(
        c
        for c in report.comparisons
        if c.reference == reference and c.metric == metric and not c.slice
    )


class TestVerdicts:
    def test_first_week_is_the_baseline(self, history: History) -> None:
        """The first week of a model line has nothing to compare with: BASELINE, exit 0."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        report = gate_week(history, "2026-W40", POLICY)
        assert [c.verdict for c in report.comparisons] == [Verdict.BASELINE]
        assert report.exit_code == 0

    def test_same_predictions_pass_with_no_flips(self, history: History) -> None:
        """The same checkpoint with the same predictions PASSes with flip rate 0."""
        correct = accuracy_mask(N, 0.9)
        record_week(history, "2026-W40", correct)
        record_week(history, "2026-W41", correct)
        report = gate_week(history, "2026-W41", POLICY)
        acc = overall(report, "previous-week")
        assert acc.verdict == Verdict.PASS and (acc.newly_wrong, acc.newly_right) == (0, 0)
        assert report.verdict == Verdict.PASS and report.exit_code == 0

    def test_nothing_to_compare_is_an_error_naming_where_it_looked(self, history: History) -> None:
        """Predictions on both sides, no metric rows, no manifest naming metrics: an ERROR (exit
        2) naming the metrics folder, although accuracy dropped 10 points; never a PASS."""
        before = accuracy_mask(N, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[:90]] = False
        record_week(history, "2026-W40", before, metrics=())
        record_week(history, "2026-W41", after, checkpoint="d" * 64, version=2, metrics=())
        report = gate_week(history, "2026-W41", POLICY)
        assert {c.verdict for c in report.comparisons} == {Verdict.ERROR}
        assert report.verdict == Verdict.ERROR and report.exit_code == 2
        reason = report.comparisons[0].reason
        assert reason.startswith("not comparable: no metric to compare")
        assert f"{history.path}/metrics" in reason

    def test_a_line_that_did_not_run_this_week_is_missing(self, history: History) -> None:
        """Lines m and m2 in W40 and W41, only m in W42: m2 is MISSING (an ERROR, exit 2) named
        with its last result; not when another flow records it, and said once: W43's reference
        week (W42) holds no m2."""
        mask = accuracy_mask(N, 0.9)
        for week in ("2026-W40", "2026-W41"):
            record_week(history, week, mask)
            record_week(history, week, mask, model="m2", version=3)
        record_week(history, "2026-W42", mask)
        report = gate_week(history, "2026-W42", POLICY)
        missing = [c for c in report.comparisons if c.model == "m2"]
        assert [c.verdict for c in missing] == [Verdict.ERROR]
        assert missing[0].reason.startswith(
            "MISSING: no result in 2026-W42 (last: 2026-W41 on toy)"
        )
        assert report.verdict == Verdict.ERROR and report.exit_code == 2
        assert report.headline().startswith("2026-W42: ERROR m2@v3 (MISSING: no result in 2026-W42")
        assert gate_week(history, None, POLICY).exit_code == 2  # the latest week, the same
        assert gate_week(history, "2026-W42", POLICY, model="m").exit_code == 0
        assert gate_week(history, "2026-W42", POLICY, recorded_elsewhere=["m2"]).exit_code == 0
        record_week(history, "2026-W43", mask)
        assert gate_week(history, "2026-W43", POLICY).exit_code == 0

    def test_a_line_with_an_error_row_this_week_is_not_also_missing(self, history: History) -> None:
        """A failed evaluation this week is the line's ERROR, reported once, not MISSING too."""
        mask = accuracy_mask(N, 0.9)
        record_week(history, "2026-W40", mask)
        record_week(history, "2026-W41", mask, status="error")
        reasons = [c.reason for c in gate_week(history, "2026-W41", POLICY).comparisons]
        assert len(reasons) == 1 and not reasons[0].startswith("MISSING")

    def test_real_drop_fails_naming_model_metric_drop_p_and_flips(self, history: History) -> None:
        """A 5% relative accuracy drop on the same examples FAILs, with the evidence in the message."""
        before = accuracy_mask(N, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[:45]] = False  # 0.900 -> 0.855
        record_week(history, "2026-W40", before)
        record_week(history, "2026-W41", after, checkpoint="d" * 64, version=2)
        report = gate_week(history, "2026-W41", POLICY)
        acc = overall(report, "previous-week")
        assert acc.verdict == Verdict.FAIL
        # 4.5 points against a 1-point tolerance: the margin test's floor (GAMMA, 0.001).
        assert acc.drop == pytest.approx(0.045) and acc.p_adjusted < 0.0011
        assert (acc.newly_wrong, acc.newly_right) == (45, 0)
        assert report.exit_code == 1
        message = report.message()
        assert message.splitlines()[0] == report.headline()
        assert report.headline().startswith("2026-W41: FAIL m@v2 accuracy -4.5 pts (p=")
        assert "m@v2 on toy: accuracy vs previous-week" in message
        assert "change -0.0450, allowed -0.0100" in message and "p=" in message
        assert "flips -45/+0" in message

    def test_drop_beyond_tolerance_but_not_significant_is_inconclusive_with_detectable_drop(
        self, history: History
    ) -> None:
        """On too few examples a large drop is INCONCLUSIVE (exit 0) saying what it can detect."""
        before = accuracy_mask(20, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[:2]] = False
        record_week(history, "2026-W40", before)
        record_week(history, "2026-W41", after, checkpoint="d" * 64)
        report = gate_week(history, "2026-W41", POLICY)
        acc = overall(report, "previous-week")
        assert acc.verdict == Verdict.INCONCLUSIVE
        assert acc.inconclusive_kind == "possible-regression"
        assert acc.reason.startswith("possible regression (observed drop 10.0 pts beyond")
        assert "not significant" in acc.reason and "detects drops of about" in acc.reason
        assert report.verdict == Verdict.INCONCLUSIVE and report.exit_code == 0
        assert report.headline().startswith("2026-W41: INCONCLUSIVE: m@v1 accuracy -10.0 pts")
        assert acc.describe() in report.message()

    def test_strict_makes_inconclusive_exit_1(self, history: History) -> None:
        """With gate.strict an INCONCLUSIVE week is a problem: it leads the headline, exit 1."""
        record_week(history, "2026-W40", accuracy_mask(72, 0.9))
        record_week(history, "2026-W41", accuracy_mask(72, 0.9), checkpoint="d" * 64)
        strict = POLICY.model_copy(update={"strict": True})
        report = gate_week(history, "2026-W41", strict)
        assert report.strict and report.exit_code == 1
        assert report.headline().startswith("2026-W41: INCONCLUSIVE m@v1 accuracy")
        assert gate_week(history, "2026-W41", POLICY).exit_code == 0

    def test_an_unchanged_model_on_too_few_examples_is_inconclusive_not_pass(
        self, history: History
    ) -> None:
        """No flip at all on 72 rows: a drop 3.6x the tolerance is not ruled out: INCONCLUSIVE."""
        correct = accuracy_mask(72, 0.9)
        record_week(history, "2026-W40", correct)
        record_week(history, "2026-W41", correct)
        acc = overall(gate_week(history, "2026-W41", POLICY), "previous-week")
        assert (acc.newly_wrong, acc.newly_right) == (0, 0)
        assert acc.verdict == Verdict.INCONCLUSIVE and acc.drop_bound == pytest.approx(
            0.036, abs=1e-3
        )

    def test_an_unresolved_week_reads_as_a_pass_and_records_its_kind(
        self, history: History
    ) -> None:
        """An unchanged model on 72 rows is INCONCLUSIVE of kind "unresolved": the headline says
        PASS and counts it as information, the report's verdict is PASS (INCONCLUSIVE when strict)
        and the history's comparisons table records the kind."""
        correct = accuracy_mask(72, 0.9)
        record_week(history, "2026-W40", correct)
        record_week(history, "2026-W41", correct)
        report = gate_week(history, "2026-W41", POLICY)
        acc = overall(report, "previous-week")
        assert acc.verdict == Verdict.INCONCLUSIVE and acc.inconclusive_kind == "unresolved"
        assert acc.reason.startswith("cannot resolve ±1.0 pts on 72 examples")
        assert report.verdict == Verdict.PASS and report.exit_code == 0
        assert report.headline().startswith("2026-W41: PASS, 0 warning(s)")
        assert report.headline().endswith(f", {len(report.unresolved)} unresolved")
        assert not report.possible_regressions
        strict = gate_week(history, "2026-W41", POLICY.model_copy(update={"strict": True}))
        assert strict.verdict == Verdict.INCONCLUSIVE and strict.exit_code == 1
        now = pd.Timestamp.now(tz="UTC")
        history.append_comparisons([c.row("run", now) for c in report.comparisons])
        stored = history.comparisons()
        kinds = stored.loc[stored["metric"] == "accuracy", "inconclusive_kind"]
        assert "unresolved" in set(kinds)

    def test_a_drop_equal_to_the_tolerance_is_within_it(self, history: History) -> None:
        """0.900 -> 0.880 on 1000 examples with a 0.02 tolerance: never FAIL (the float says 0.0200000...02)."""
        before = accuracy_mask(N, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[:25]] = False
        after[np.flatnonzero(~before)[:5]] = True
        record_week(history, "2026-W40", before)
        record_week(history, "2026-W41", after, checkpoint="d" * 64)
        policy = POLICY.model_copy(update={"metrics": {"accuracy": Tolerance(max_drop=0.02)}})
        acc = overall(gate_week(history, "2026-W41", policy), "previous-week")
        assert (acc.newly_wrong, acc.newly_right) == (25, 5) and acc.verdict != Verdict.FAIL
        assert acc.drop == pytest.approx(0.02) and acc.tolerance == pytest.approx(0.02)

    def test_significant_drop_within_tolerance_warns(self, history: History) -> None:
        """A real but tolerated drop is a WARN, not a FAIL."""
        before = accuracy_mask(N, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[:45]] = False
        record_week(history, "2026-W40", before)
        record_week(history, "2026-W41", after, checkpoint="d" * 64)
        lenient = GatePolicy(
            default=Tolerance(max_drop=0.10), metrics={"nll": Tolerance(max_drop="90%")}
        )
        acc = overall(gate_week(history, "2026-W41", lenient), "previous-week")
        assert acc.verdict == Verdict.WARN and acc.reason == "significant drop within tolerance"

    def test_same_checkpoint_different_predictions_warns_naming_the_environment(
        self, history: History
    ) -> None:
        """Flips with the same weights and data mean the environment changed; say what changed."""
        before = accuracy_mask(N, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[:2]] = False
        after[np.flatnonzero(~before)[:2]] = True
        record_week(history, "2026-W40", before, torch_version="2.12.0")
        record_week(history, "2026-W41", after, torch_version="2.13.0")
        acc = overall(gate_week(history, "2026-W41", POLICY), "previous-week")
        assert acc.verdict == Verdict.WARN
        assert (
            "4 different prediction(s)" in acc.reason
            and "torch_version 2.12.0 -> 2.13.0" in acc.reason
        )

    def test_family_adjusts_upward(self, history: History) -> None:
        """Family-adjusted p-values are never below the raw ones."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        record_week(history, "2026-W41", accuracy_mask(N, 0.88, seed=1), checkpoint="d" * 64)
        tested = [
            c for c in gate_week(history, "2026-W41", POLICY).comparisons if c.p_value is not None
        ]
        assert tested and all(c.p_adjusted >= c.p_value for c in tested)


class TestFailClosed:
    def test_changed_evalset_is_an_error(self, history: History) -> None:
        """Results on a different evalset hash are never compared."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        record_week(history, "2026-W41", accuracy_mask(N, 0.9), evalset_sha="f" * 64)
        report = gate_week(history, "2026-W41", POLICY)
        assert report.verdict == Verdict.ERROR and report.exit_code == 2
        assert "evalset changed" in report.errors[0].reason

    def test_missing_predictions_is_an_error(self, history: History) -> None:
        """Without per-example predictions there is no paired test: ERROR, not PASS."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9), store_predictions=False)
        record_week(history, "2026-W41", accuracy_mask(N, 0.9))
        assert "predictions missing" in gate_week(history, "2026-W41", POLICY).errors[0].reason

    def test_missing_metric_is_an_error(self, history: History) -> None:
        """A metric recorded last week but not this week fails closed."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9), metrics=("accuracy", "nll"))
        record_week(history, "2026-W41", accuracy_mask(N, 0.9), metrics=("accuracy",))
        errors = gate_week(history, "2026-W41", POLICY).errors
        assert [(e.metric, e.reason) for e in errors] == [("nll", "not comparable: metric missing")]

    def test_failed_evaluation_is_an_error(self, history: History) -> None:
        """A checkpoint that failed to evaluate is an ERROR naming the reason."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        record_week(history, "2026-W41", accuracy_mask(N, 0.9), status="error", model="other")
        errors = gate_week(history, "2026-W41", POLICY).errors
        assert errors[0].model == "other" and "checkpoint corrupt" in errors[0].reason


class TestBaseline:
    def test_slow_drift_fails_against_the_baseline(self, history: History) -> None:
        """Drops each within tolerance week over week still FAIL against the first week."""
        correct = accuracy_mask(N, 0.95)
        record_week(history, "2026-W40", correct.copy())
        for week in range(41, 45):  # lose 6 correct answers a week: 0.6 points < 1 point tolerance
            correct[np.flatnonzero(correct)[:6]] = False
            record_week(history, f"2026-W{week}", correct.copy(), checkpoint=f"{week}" * 32)
        report = gate_week(history, "2026-W44", POLICY)
        # 6 more wrong out of 1000 is real (p = 1/64) but not shown beyond, nor within, 0.01
        assert overall(report, "previous-week").verdict == Verdict.INCONCLUSIVE
        base = overall(report, "baseline")
        assert base.reference_week == "2026-W40" and base.verdict == Verdict.FAIL
        assert base.drop == pytest.approx(0.024)

    def test_pinned_baseline_week_is_used(self, history: History) -> None:
        """`baseline set` moves the baseline comparison to the pinned week."""
        for week in range(40, 44):
            record_week(history, f"2026-W{week}", accuracy_mask(N, 0.9))
        history.set_baseline("m", "2026-W41")
        report = gate_week(history, "2026-W43", POLICY)
        assert overall(report, "baseline").reference_week == "2026-W41"


class TestSlices:
    def test_slices_report_by_default_and_gate_when_configured(self, history: History) -> None:
        """Per-slice comparisons are report-only unless the policy says slices gate."""
        before = accuracy_mask(N, 0.9)
        after = before.copy()
        after[np.flatnonzero(before)[::2][:60]] = False
        record_week(history, "2026-W40", before)
        record_week(history, "2026-W41", after, checkpoint="d" * 64)
        report = gate_week(history, "2026-W41", POLICY)
        sliced = [c for c in report.comparisons if c.slice]
        assert {c.slice for c in sliced} == {"half=even", "half=odd"}
        assert not any(c.gating for c in sliced)
        gated = gate_week(history, "2026-W41", POLICY.model_copy(update={"slices": "gate"}))
        assert all(c.gating for c in gated.comparisons if c.slice)


class TestCandidate:
    def test_candidate_is_compared_with_production(self, history: History) -> None:
        """A candidate is gated against the latest production result of its model."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        before = accuracy_mask(N, 0.9)
        worse = before.copy()
        worse[np.flatnonzero(before)[:80]] = False
        candidate_id = record_week(
            history, "2026-W41", worse, kind="candidate", stage="candidate", checkpoint="d" * 64
        )
        row = history.evaluations(kind="candidate").set_index("evaluation_id").loc[candidate_id]
        row["evaluation_id"] = candidate_id
        report = gate_candidate(history, row, POLICY)
        assert overall(report, "production").verdict == Verdict.FAIL

    def test_candidates_never_count_as_the_weeks_production_result(self, history: History) -> None:
        """A week with only a candidate has no production result: nothing evaluated, ERROR."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        record_week(history, "2026-W41", accuracy_mask(N, 0.5), kind="candidate", stage="candidate")
        report = gate_week(history, "2026-W41", POLICY)
        assert [c.verdict for c in report.comparisons] == [Verdict.ERROR]
        assert report.exit_code == 2

    def test_a_candidate_as_bad_as_a_degraded_production_fails_against_the_baseline(
        self, history: History
    ) -> None:
        """Production degraded in week 41; a candidate equal to it passes that, not the baseline."""
        before = accuracy_mask(N, 0.9)
        worse = before.copy()
        worse[np.flatnonzero(before)[:80]] = False
        record_week(history, "2026-W40", before)
        record_week(history, "2026-W41", worse, checkpoint="d" * 64, version=2)
        candidate_id = record_week(
            history, "2026-W42", worse, kind="candidate", stage="candidate", checkpoint="e" * 64
        )
        row = history.evaluations(kind="candidate").set_index("evaluation_id").loc[candidate_id]
        row["evaluation_id"] = candidate_id
        report = gate_candidate(history, row, POLICY)
        assert overall(report, "production").verdict == Verdict.PASS
        baseline = overall(report, "baseline")
        assert baseline.verdict == Verdict.FAIL and baseline.reference_week == "2026-W40"
        assert report.verdict == Verdict.FAIL and report.exit_code == 1


class TestNothingEvaluated:
    def test_a_week_never_evaluated_is_an_error_naming_the_latest(self, history: History) -> None:
        """No result in the week: one ERROR saying so and which week has results, exit 2."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        report = gate_week(history, "2030-W05", POLICY)
        (error,) = report.comparisons
        assert error.verdict == Verdict.ERROR and report.exit_code == 2
        assert error.reason == (
            "no result of week 2030-W05; the latest week with results is 2026-W40"
        )
        assert report.headline().startswith("2030-W05: ERROR nothing evaluated (no result")

    def test_an_empty_history_says_so(self, history: History) -> None:
        """Nothing recorded at all: ERROR, never PASS."""
        report = gate_week(history, "2026-W40", POLICY)
        assert report.verdict == Verdict.ERROR
        assert report.comparisons[0].reason.endswith("no weekly result is recorded yet")

    def test_a_mistyped_model_or_evalset_gets_a_did_you_mean(self, history: History) -> None:
        """A model or evalset that never had a result is named, with the closest that did."""
        record_week(history, "2026-W40", accuracy_mask(N, 0.9), model="wine")
        (by_model,) = gate_week(history, "2026-W40", POLICY, model="wien").comparisons
        assert "model 'wien' has none in any week. Did you mean 'wine'?" in by_model.reason
        (by_set,) = gate_week(history, "2026-W40", POLICY, evalset="toys").comparisons
        assert "evalset 'toys' has none in any week. Did you mean 'toy'?" in by_set.reason
        assert by_set.evalset == "toys" and by_set.verdict == Verdict.ERROR


def test_gate_can_be_restricted_to_some_models(history: History) -> None:
    """A run of some models gates only their lines, not another model's regression."""
    before = accuracy_mask(N, 0.9)
    after = before.copy()
    after[np.flatnonzero(before)[:80]] = False
    for model, week2 in (("kept", before), ("other", after)):
        record_week(history, "2026-W40", before, model=model)
        record_week(history, "2026-W41", week2, model=model, checkpoint="d" * 64)
    assert gate_week(history, "2026-W41", POLICY).verdict == Verdict.FAIL
    only = gate_week(history, "2026-W41", POLICY, models=["kept"])
    assert only.verdict == Verdict.PASS and {c.model for c in only.comparisons} == {"kept"}


def test_align_reorders_the_reference_and_refuses_other_examples() -> None:
    """Pairs are matched by example id, whatever the order; different example sets do not pair."""
    import numpy as np

    from evalsentry.gate.pairs import align

    reference = {"example_id": np.array(["b", "a", "c"]), "prediction": np.array([2, 1, 3])}
    current = {"example_id": np.array(["a", "b", "c"]), "prediction": np.array([0, 0, 0])}
    assert align(reference, current)["prediction"].tolist() == [1, 2, 3]  # type: ignore[index]
    assert align(reference, {"example_id": np.array(["a", "b", "d"])}) is None
    assert align(reference, {"example_id": np.array(["a", "b"])}) is None
    # Ids as a history reads them (Python strings), the current in id order or in any other.
    stored = {k: v.astype(object) for k, v in reference.items()}
    for ids, expected in ((["a", "b", "c"], [1, 2, 3]), (["c", "a", "b"], [3, 1, 2])):
        aligned = align(stored, {"example_id": np.array(ids, dtype=object)})
        assert aligned is not None and aligned["prediction"].tolist() == expected
        assert aligned["example_id"].tolist() == ids
    # An id given twice pairs each current row with the reference's first row of that id.
    twice = {"example_id": np.array(["a", "a", "b"]), "prediction": np.array([1, 2, 3])}
    assert align(twice, {"example_id": np.array(["a", "a", "b"])})["prediction"].tolist() == [1, 1, 3]  # type: ignore[index]  # fmt: skip


def test_different_examples_are_an_error(history: History) -> None:
    """Results on another set of examples cannot be paired: ERROR, not PASS."""
    record_week(history, "2026-W40", accuracy_mask(N, 0.9))
    record_week(history, "2026-W41", accuracy_mask(N - 10, 0.9))
    assert "different example ids" in gate_week(history, "2026-W41", POLICY).errors[0].reason


def judged(verdict: Verdict, metric: str = "accuracy", **fields: object) -> Comparison:
    """A comparison of m@v2 on toy vs the previous week: accuracy 0.90 -> 0.85, Holm p 0.002."""
    base: dict[str, object] = {
        "evaluation_id": "e",
        "week": "2026-W41",
        "model": "m",
        "version": 2,
        "evalset": "toy",
        "reference": "previous-week",
        "reason": "drop beyond tolerance and significant",
        "reference_week": "2026-W40",
        "reference_value": 0.9,
        "value": 0.85,
        "delta": -0.05,
        "drop": 0.05,
        "tolerance": 0.01,
        "p_value": 0.001,
        "p_adjusted": 0.002,
        "method": "mcnemar-exact",
        "newly_wrong": 50,
        "newly_right": 0,
        "n": 1000,
    }
    return Comparison(verdict=verdict, metric=metric, **{**base, **fields})  # type: ignore[arg-type]


class TestHeadline:
    def test_one_fail_reads_as_a_verdict_with_points_and_p(self) -> None:
        """An accuracy FAIL is one line: week, verdict, checkpoint, metric, points, p."""
        report = GateReport("2026-W41", [judged(Verdict.FAIL), judged(Verdict.PASS, "nll")])
        assert report.headline() == "2026-W41: FAIL m@v2 accuracy -5.0 pts (p=0.002)"

    def test_worst_leads_and_the_rest_are_counted(self) -> None:
        """An ERROR outranks a FAIL in the lead; each other problem is counted, warnings not."""
        report = GateReport(
            "2026-W41",
            [
                judged(Verdict.FAIL),
                judged(Verdict.WARN, "ece"),
                judged(Verdict.FAIL, reference="baseline"),
                judged(Verdict.ERROR, "nll", reason="not comparable: metric missing", delta=None),
            ],
        )
        assert report.headline() == (
            "2026-W41: ERROR m@v2 nll (not comparable: metric missing) and 2 more"
        )

    def test_other_metrics_change_in_their_unit_and_a_baseline_is_named(self) -> None:
        """A bootstrap-tested metric changes by its own value, not points; `vs baseline` is said."""
        nll = judged(Verdict.FAIL, "nll", reference="baseline", delta=0.1234, method="bootstrap")
        assert GateReport("2026-W41", [nll]).headline() == (
            "2026-W41: FAIL m@v2 nll +0.123 vs baseline (p=0.002)"
        )

    def test_the_evalset_is_named_when_the_week_has_several(self) -> None:
        """With two evalsets in the report, the lead says which one regressed."""
        report = GateReport(
            "2026-W41", [judged(Verdict.FAIL, evalset="digits"), judged(Verdict.PASS)]
        )
        assert report.headline().startswith("2026-W41: FAIL m@v2 on digits accuracy")

    def test_a_long_error_reason_is_cut(self) -> None:
        """A failed evaluation's error (paths, stack text) is cut short in the headline."""
        error = judged(
            Verdict.ERROR, "*", reference="none", reason="evaluation failed: " + "x" * 200
        )
        headline = GateReport("2026-W41", [error]).headline()
        assert headline.endswith("…)") and len(headline) < 130

    def test_an_error_headline_keeps_the_cause_not_the_path(self) -> None:
        """A deep absolute path in the reason is cut to its file's name, so the cause (changed
        since freeze) is in the headline; the details keep the whole path."""
        folder = "/srv/ci/builds/team/project/.evalsentry-cache/evalsets/digits/data"
        reason = f"not evaluated: the evalset is invalid: {folder}/inputs.parquet: evalset file "
        reason += "changed since freeze (sha256 expected 1f2e, got 9a8b)"
        report = GateReport(
            "2026-W41", [judged(Verdict.ERROR, "*", reference="none", reason=reason)]
        )
        assert report.headline().endswith(
            "(not evaluated: the evalset is invalid: evalset file changed since freeze (sha25…)"
        )
        checkpoint = "checkpoint file not found: /srv/ci/team/checkpoints/digits-3.pt"
        assert brief_reason(checkpoint) == "checkpoint file not found: digits-3.pt"
        tampered = (
            "the evalset is invalid: /srv/x/evalsets/digits/data/a.parquet: changed since freeze"
        )
        assert brief_reason(tampered) == "the evalset is invalid: changed since freeze (a.parquet)"
        assert folder in report.message()

    def test_without_problems_it_gives_the_verdict_and_warnings(self) -> None:
        """A passing week says PASS or WARN, the first warning, and how many; the message is just that."""
        report = GateReport("2026-W41", [judged(Verdict.WARN), judged(Verdict.PASS, "nll")])
        assert report.headline() == "2026-W41: WARN m@v2 accuracy -5.0 pts (p=0.002), 1 warning(s)"
        assert report.message() == report.headline()
        assert GateReport("2026-W41", [judged(Verdict.PASS)]).headline() == (
            "2026-W41: PASS, 0 warning(s)"
        )

    def test_possible_regressions_lead_and_unresolved_are_noted_apart(self) -> None:
        """A possible regression makes the week INCONCLUSIVE and leads the headline after a colon;
        an unresolved comparison is named after the warnings and changes neither."""
        maybe = judged(Verdict.INCONCLUSIVE, inconclusive_kind="possible-regression")
        unsure = judged(Verdict.INCONCLUSIVE, "nll", inconclusive_kind="unresolved")
        both = GateReport("2026-W41", [maybe, unsure])
        assert both.headline() == (
            "2026-W41: INCONCLUSIVE: m@v2 accuracy -5.0 pts (p=0.002), 0 warning(s), 1 unresolved"
        )
        only = GateReport("2026-W41", [judged(Verdict.PASS), unsure])
        assert only.headline() == "2026-W41: PASS, 0 warning(s), 1 unresolved"
        assert only.verdict == Verdict.PASS and only.exit_code == 0

    def test_an_inconclusive_of_unknown_kind_counts_as_a_possible_regression(self) -> None:
        """Rows from before the kinds existed (kind None) keep counting as inconclusive."""
        report = GateReport("2026-W41", [judged(Verdict.INCONCLUSIVE)])
        assert report.possible_regressions and not report.unresolved
        assert report.verdict == Verdict.INCONCLUSIVE

    def test_message_on_one_line_keeps_every_detail(self) -> None:
        """Joined for a state message, the lines hold no newline and still name every problem."""
        report = GateReport(
            "2026-W41", [judged(Verdict.FAIL), judged(Verdict.FAIL, reference="baseline")]
        )
        one_line = report.message(sep=" | ")
        assert "\n" not in one_line and one_line.startswith(report.headline() + " | FAIL")
        assert one_line.count("drop beyond tolerance and significant") == 2


def drifted(feature: str, psi: float, verdict: Verdict, model: str | None = None) -> DriftResult:
    """A drift result of the toy evalset's live sample (300 rows against 300)."""
    return DriftResult(
        "toy",
        feature,
        "input" if model is None else "prediction",
        psi,
        0.5,
        1e-9,
        2e-9,
        300,
        300,
        verdict,
        model,
    )


class TestDriftIsAVerdict:
    def test_any_drift_makes_a_passing_week_a_warn_that_leads_the_headline(self) -> None:
        """WARN- or FAIL-level drift without drift.fail_run: the week is a WARN, drift first,
        worst first, the gate's own verdict after it; the exit code stays 0."""
        report = GateReport(
            "2026-W41",
            [judged(Verdict.PASS)],
            drift=[
                drifted("std", 0.2, Verdict.WARN),
                drifted("mean", 7.05, Verdict.FAIL),
                drifted("max", 0.01, Verdict.PASS),
            ],
        )
        assert report.verdict == Verdict.WARN and report.exit_code == 0 and not report.failed
        assert report.headline() == (
            "2026-W41: WARN drift in 2 feature(s): toy mean PSI 7.05 and 1 more; "
            "the gate: PASS, 0 warning(s)"
        )
        assert report.details() == [
            "FAIL drift toy mean: PSI 7.050, p=2e-09 (KS, BH; 300 live vs 300 frozen rows)",
            "WARN drift toy std: PSI 0.200, p=2e-09 (KS, BH; 300 live vs 300 frozen rows)",
        ]

    def test_with_fail_run_failing_drift_fails_the_week(self) -> None:
        """drift.fail_run: FAIL-level drift is a FAIL of the week, exit 1, leading the headline."""
        report = GateReport(
            "2026-W41",
            [judged(Verdict.PASS)],
            drift=[drifted("mean", 7.05, Verdict.FAIL)],
            drift_fails=True,
        )
        assert report.verdict == Verdict.FAIL and report.exit_code == 1 and report.failed
        assert report.headline().startswith("2026-W41: FAIL drift in 1 feature(s): toy mean PSI")

    def test_a_worse_gate_verdict_leads_and_the_drift_follows(self) -> None:
        """A FAIL (or an INCONCLUSIVE) of the gate leads; the drift is named after it."""
        drift = [drifted("predicted_class", 0.3, Verdict.WARN, model="m")]
        failed = GateReport("2026-W41", [judged(Verdict.FAIL)], drift=drift)
        assert failed.headline() == (
            "2026-W41: FAIL m@v2 accuracy -5.0 pts (p=0.002), "
            "drift in 1 feature(s): toy predicted_class of m PSI 0.3"
        )
        maybe = judged(Verdict.INCONCLUSIVE, inconclusive_kind="possible-regression")
        unsure = GateReport("2026-W41", [maybe], drift=drift)
        assert unsure.headline().startswith("2026-W41: INCONCLUSIVE: m@v2 accuracy")
        assert unsure.headline().endswith(
            ", drift in 1 feature(s): toy predicted_class of m PSI 0.3"
        )

    def test_the_gate_reads_the_week_s_recorded_drift(self, tmp_path: Path) -> None:
        """gate_week reports the drift rows recorded for its week; fail_run makes FAIL fail it."""
        from evalsentry.sections import DriftPolicy

        history = History(str(tmp_path))
        record_week(history, "2026-W40", accuracy_mask(200, 0.9, seed=0), model="m")
        history.append_drift([drifted("mean", 7.05, Verdict.FAIL).row("r1", "2026-W40")])
        history.append_drift([drifted("mean", 9.0, Verdict.FAIL).row("r0", "2026-W39")])
        report = gate_week(history, "2026-W40", GatePolicy())
        assert [d.psi for d in report.drift] == [7.05] and report.verdict == Verdict.WARN
        failing = gate_week(history, "2026-W40", GatePolicy(), drift=DriftPolicy(fail_run=True))
        assert failing.verdict == Verdict.FAIL and failing.exit_code == 1


class TestNames:
    def test_a_version_read_back_as_a_float_still_reads_as_an_integer(self) -> None:
        """Parquet gives a fanned-out week's versions back as floats: m@v2, never m@v2.0."""
        from evalsentry.evaluation.pipeline import Target

        comparison = judged(Verdict.FAIL, version=np.float64(2.0))
        report = GateReport("2026-W41", [comparison])
        assert report.headline() == "2026-W41: FAIL m@v2 accuracy -5.0 pts (p=0.002)"
        assert comparison.describe().startswith("FAIL m@v2 on toy: ")
        target = Target("m", "m.pt", version=2.0, sha256="ab" * 32)  # type: ignore[arg-type]
        assert (target.label, target.slug) == ("m@v2", "m-v2")

    def test_a_candidate_file_is_named_by_its_sha256(self) -> None:
        """A file evaluated as a candidate names its bytes (`m (candidate 9ae2a1ad)`), in the
        headline, the task name part and the progress artifact's label alike."""
        from evalsentry.evaluation.pipeline import Target

        sha = "9ae2a1ad" + "0" * 56
        comparison = judged(Verdict.FAIL, version=None, checkpoint_sha256=sha)
        assert (
            GateReport("2026-W41", [comparison])
            .headline()
            .startswith("2026-W41: FAIL m (candidate 9ae2a1ad) accuracy -5.0 pts")
        )
        target = Target("m", "m.pt", sha256=sha)
        assert (target.label, target.slug) == ("m (candidate 9ae2a1ad)", "m-9ae2a1ad")


def _retrained(
    tmp_path: Path, recipe: dict[str, object], before: dict[str, object], after: dict[str, object]
) -> History:
    """v1 in W40 (95% right), v2 in W41 (85%): ``recipe`` in both lineages, and each its own."""
    history = History(str(tmp_path / "store"))
    record_week(history, "2026-W40", accuracy_mask(N, 0.95), **recipe, **before)  # type: ignore[arg-type]
    record_week(
        history,
        "2026-W41",
        accuracy_mask(N, 0.85),
        version=2,
        checkpoint="d" * 64,
        **recipe,
        **after,  # type: ignore[arg-type]
    )
    return history


class TestWhatChanged:
    """Model or data: a FAIL says what differs between the two checkpoints it compares."""

    def test_a_fail_names_the_training_data_change_first(self, tmp_path: Path) -> None:
        """v2 trained on other data, same code and config: the first detail says so, and the
        alert's text; a passing week says nothing of it."""
        from evalsentry.reports.alerts import summary

        recipe = {"git_sha": "c0de" * 10, "config_json": '{"lr": 0.01}', "seed": 1}
        history = _retrained(tmp_path, recipe, {"data_sha": "a1" * 32}, {"data_sha": "b2" * 32})
        report = gate_week(history, "2026-W40", POLICY)
        assert report.changes == [] and not any("what changed" in d for d in report.details())
        report = gate_week(history, "2026-W41", POLICY)
        assert report.problems
        said = "m v1 -> v2: training data changed (a1a1a1a1 -> b2b2b2b2); code and config the same"
        details = report.details()
        # After the problems it explains: the diagnosis, then what changed.
        assert details.index(f"what changed: {said}") == len(report.problems) + 1
        assert details[len(report.problems)] == f"diagnosis: {report.diagnosis}"
        assert report.diagnosis == (
            "likely data: m@v2 on toy: training data changed (a1a1a1a1 -> b2b2b2b2). "
            "Where: m@v2 on toy: the flips spread as chance would."
        )
        text = summary(report)["text"].splitlines()
        assert text[1] == f"diagnosis: {report.diagnosis}"  # the alert's second line
        assert f"what changed: {said}" in text

    def test_a_fail_of_the_same_data_finds_no_data_cause_and_says_what_changed(
        self, tmp_path: Path
    ) -> None:
        lineage = {"config_json": '{"lr": 0.01}', "seed": 1, "data_sha": "a1" * 32}
        history = _retrained(tmp_path, lineage, {"git_sha": "c0de" * 10}, {"git_sha": "beef" * 10})
        report = gate_week(history, "2026-W41", POLICY)
        assert report.diagnosis == (
            "no data cause found. Checked, nothing found: m@v2 on toy: the training data is "
            "the same. Where: m@v2 on toy: the flips spread as chance would. "
            "Also changed: code."
        )
        passing = gate_week(history, "2026-W40", POLICY)
        assert passing.diagnosis == "" and not any("diagnosis" in d for d in passing.details())

    def test_the_split_leak_verdict_is_a_data_cause_or_a_cleared_one(self, tmp_path: Path) -> None:
        """A line naming its training data: a leak found is a likely data cause, none is
        checked-and-cleared; without the check nothing is said of leaks."""
        from dataclasses import replace

        from evalsentry.gate.lineage import diagnose, lineage_changes
        from evalsentry.gate.verdicts import Reference
        from evalsentry.names import LEAK_METRIC

        lineage = {"config_json": '{"lr": 0.01}', "seed": 1, "data_sha": "a1" * 32}
        history = _retrained(tmp_path, lineage, {"git_sha": "c0de" * 10}, {"git_sha": "beef" * 10})
        report = gate_week(history, "2026-W41", POLICY)
        findings = lineage_changes(history.evaluations(), "2026-W41", report.comparisons, history)
        (current,) = {f.evaluation_id for f in findings}
        leak = Comparison(current, "2026-W41", "m", 2, "toy", Reference.NONE, LEAK_METRIC,
                          Verdict.WARN, "leaked", value=12.0, n=N)  # fmt: skip
        said = diagnose(findings, (), [leak])
        assert said.startswith(
            f"likely data: m@v2 on toy: 12 of {N:,} evalset rows are in its training data (a leak)."
        )
        clean = diagnose(findings, (), [replace(leak, value=0.0, verdict=Verdict.PASS)])
        assert clean.startswith("no data cause found. Checked, nothing found: m@v2 on toy: the ")
        assert "m@v2 on toy: no evalset row is in its training data." in clean
        assert "training data (a leak)" not in diagnose(findings, ())
        assert "in its training data" not in diagnose(findings, (), [replace(leak, n=None)])

    def test_the_config_seed_and_an_unchanged_checkpoint_are_named(self) -> None:
        from evalsentry.gate.lineage import what_changed

        before = {"model": "m", "version": 1, "checkpoint_sha256": "c" * 64, "git_sha": "a" * 40,
                  "data_sha": "d" * 64, "config_json": '{"lr": 0.01, "epochs": 10}', "seed": 1}  # fmt: skip
        after = {**before, "version": 2, "checkpoint_sha256": "e" * 64, "seed": 2,
                 "config_json": '{"lr": 0.1, "epochs": 10}'}  # fmt: skip
        assert what_changed(before, after) == (
            "m v1 -> v2: config lr 0.01 -> 0.1; seed 1 -> 2; training data and code the same"
        )
        same = {**before, "version": 1}
        assert (
            what_changed(before, same)
            == "m v1 -> v1: the same checkpoint (the model did not change)"
        )
        bare = {"model": "m", "version": 2, "checkpoint_sha256": "f" * 64}
        assert what_changed({**bare, "version": 1, "checkpoint_sha256": "0" * 64}, bare) is None


class TestWhereTheFlipsAre:
    """A FAIL says whether its newly wrong examples sit in some classes beyond chance."""

    def test_flips_in_one_class_are_named_and_spread_ones_are_not(self, tmp_path: Path) -> None:
        from evalsentry.gate.concentration import concentration
        from tests.synthetic import CLASSES

        rng = np.random.default_rng(5)
        target = np.arange(N) % CLASSES
        history = History(str(tmp_path / "store"))
        before = record_week(history, "2026-W40", np.ones(N, bool))
        broken = ~((target == 1) & (rng.random(N) < 0.3))  # a labelling batch on class 1
        after = record_week(history, "2026-W41", broken, version=2, checkpoint="d" * 64)
        found = concentration(history, after, before)
        flips = int((~broken).sum())
        assert found is not None and found.text.startswith(
            f"{flips} of {flips} flips are in classes 1 at p="
        )
        assert f"(hypergeometric, Holm over {CLASSES} classes and 2 slice values)" in found.text
        assert found.classes == ("1",) and found.slices == ()
        # Where class 1's examples went: the two cells off its diagonal grew, largest first.
        wrong = predictions(broken)["prediction"][~broken]
        grown = sorted(((int((wrong == p).sum()), p) for p in (0, 2)), reverse=True)
        assert found.cells == tuple(f"1 -> {p}" for _, p in grown)
        assert found.text.endswith(
            f"; grown cells (true -> predicted): 1 -> {grown[0][1]} +{grown[0][0]}, "
            f"1 -> {grown[1][1]} +{grown[1][0]}"
        )
        report = gate_week(history, "2026-W41", POLICY)
        assert any(d.startswith("where the flips are: m@v2 on toy: ") for d in report.details())

        spread = rng.random(N) > 0.08  # the same share lost in every class
        other = record_week(history, "2026-W42", spread, version=3, checkpoint="e" * 64)
        found = concentration(history, other, before)
        assert found is not None and "spread over the classes as chance would" in found.text
        assert found.classes == () and found.places == ""

    def test_flips_in_one_slice_value_are_named_with_the_classes_in_one_family(
        self, tmp_path: Path
    ) -> None:
        """A broken source (the odd half) is named as a slice; its classes spread as chance."""
        from evalsentry.gate.concentration import concentration
        from evalsentry.gate.lineage import diagnose, lineage_changes

        rng = np.random.default_rng(7)
        odd = np.arange(N) % 2 == 1
        history = History(str(tmp_path / "store"))
        before = record_week(history, "2026-W40", np.ones(N, bool))
        broken = ~(odd & (rng.random(N) < 0.2))
        after = record_week(history, "2026-W41", broken, version=2, checkpoint="d" * 64)
        found = concentration(history, after, before)
        flips = int((~broken).sum())
        assert found is not None and found.slices == ("half=odd",) and found.classes == ()
        assert found.text.startswith(f"{flips} of {flips} flips are in slice half=odd at p=")
        assert found.places == "slice half=odd"
        report = gate_week(history, "2026-W41", POLICY)
        findings = lineage_changes(history.evaluations(), "2026-W41", report.comparisons, history)
        assert "Where: m@v2 on toy: flips concentrate in slice half=odd." in diagnose(findings, ())

    @pytest.mark.parametrize(
        ("hits", "total", "in_class", "drawn"),
        [
            (5, 700, 70, 52),
            (20, 700, 70, 52),
            (0, 700, 70, 52),
            (1, 100, 10, 5),
            (40, 1000, 50, 60),
        ],
    )
    def test_the_tail_is_scipys_hypergeometric_tail(
        self, hits: int, total: int, in_class: int, drawn: int
    ) -> None:
        """Summed in log space without scipy (the gate's command starts without it)."""
        from scipy.stats import hypergeom

        from evalsentry.gate.concentration import _upper_tail

        expected = float(hypergeom.sf(hits - 1, total, in_class, drawn))
        assert _upper_tail(hits, total, in_class, drawn) == pytest.approx(expected, rel=1e-9)


def test_right_or_wrong_rows_concentrate_only_by_slice(tmp_path: Path) -> None:
    """An imported harness run's rows (target 1, prediction right or wrong) have no classes to
    name: without a slice nothing is said; with one, only slices are tested."""
    from evalsentry.gate.concentration import concentration

    history = History(str(tmp_path / "store"))
    ids = np.array([f"doc-{i:04d}" for i in range(N)])
    odd = np.arange(N) % 2 == 1
    lost = odd & (np.arange(N) % 10 == 1)

    def harness(right: np.ndarray, sliced: bool) -> dict[str, np.ndarray]:
        columns = {"example_id": ids, "target": np.ones(N, np.int64),
                   "prediction": right.astype(np.int64)}  # fmt: skip
        return {**columns, "slice:half": np.where(odd, "odd", "even")} if sliced else columns

    for sliced, week in ((False, 40), (True, 42)):
        before = record_week(history, f"2026-W{week}", np.ones(N, bool), metrics=(),
                             columns=harness(np.ones(N, bool), sliced))  # fmt: skip
        after = record_week(history, f"2026-W{week + 1}", ~lost, metrics=(), version=2,
                            checkpoint="d" * 64, columns=harness(~lost, sliced))  # fmt: skip
        found = concentration(history, after, before)
        if not sliced:
            assert found is None
            continue
        assert found is not None and found.classes == () and found.cells == ()
        assert found.slices == ("half=odd",)
        assert found.text.endswith("(hypergeometric, Holm over 2 slice values)")
