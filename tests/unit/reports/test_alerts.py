"""The one alert of a failed run: counts, the worst rows rounded, JSON-safe."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from evalsentry.gate.drift import DriftResult
from evalsentry.gate.week import Comparison, GateReport, Verdict
from evalsentry.reports.alerts import failure_summary, summary


def _comparison(verdict: Verdict, **fields: Any) -> Comparison:
    base: dict[str, Any] = {
        "evaluation_id": "e1",
        "week": "2026-W41",
        "model": "toy-model",
        "version": 2,
        "evalset": "toy",
        "reference": "previous-week",
        "metric": "accuracy",
        "verdict": verdict,
        "reason": "drop beyond tolerance and significant",
    }
    return Comparison(**{**base, **fields})


def _fail(drop: float, metric: str = "accuracy", **fields: Any) -> Comparison:
    numbers: dict[str, Any] = {
        "reference_value": 0.912345678,
        "value": 0.912345678 - drop,
        "delta": -drop,
        "drop": drop,
        "tolerance": 0.02,
        "p_adjusted": 1.23456e-5,
        "newly_wrong": np.int64(30),
        "newly_right": np.int64(2),
    }
    return _comparison(Verdict.FAIL, metric=metric, **{**numbers, **fields})


def _error() -> Comparison:
    return _comparison(
        Verdict.ERROR,
        model="*",
        version=None,
        metric="*",
        reference="none",
        reason="evalset invalid, nothing evaluated: file changed since freeze",
    )


class TestSummary:
    def test_counts_only_gating_verdicts(self) -> None:
        """FAIL, ERROR, INCONCLUSIVE and WARN are counted over gating comparisons only; an
        unresolved INCONCLUSIVE is counted apart, as information, not as an inconclusive."""
        report = GateReport(
            "2026-W41",
            [
                _fail(0.3),
                _fail(0.2, metric="macro_f1"),
                _fail(0.5, gating=False),
                _comparison(Verdict.WARN),
                _comparison(Verdict.INCONCLUSIVE, inconclusive_kind="possible-regression"),
                _comparison(Verdict.INCONCLUSIVE, metric="nll", inconclusive_kind="unresolved"),
                _comparison(Verdict.PASS),
                _error(),
            ],
        )
        payload = summary(report)
        assert payload["counts"] == {
            "FAIL": 2,
            "ERROR": 1,
            "INCONCLUSIVE": 1,
            "WARN": 1,
            "DRIFT": 0,
            "UNRESOLVED": 1,
        }
        assert "2 regression(s), 1 error(s), 1 inconclusive, 1 warning(s)" in payload["text"]
        assert "(1 unresolved, informational)" in payload["text"]
        assert payload["gate"] == "ERROR" and payload["week"] == "2026-W41"

    def test_rows_follow_the_headline_s_order_and_the_rest_are_counted(self) -> None:
        """Rows come in the order of GateReport.problems (ERROR, then FAIL overall before
        slices, in gate order), so the first row is the headline's; past the limit a count."""
        report = GateReport(
            "2026-W41",
            [
                _fail(0.1, metric="a"),
                _fail(0.3, metric="b", slice="colour=red"),
                _error(),
                _fail(0.2, metric="c"),
            ],
        )
        payload = summary(report, limit=3)
        assert [(r["verdict"], r["metric"]) for r in payload["worst"]] == [
            ("ERROR", "*"),
            ("FAIL", "a"),
            ("FAIL", "c"),
        ]
        assert payload["more"] == 1
        assert payload["text"].endswith("... and 1 more")
        assert payload["models"] == ["toy-model"]  # the evalset's ERROR names no model

    def test_the_first_row_is_the_headline_not_the_largest_raw_drop(self) -> None:
        """An accuracy FAIL of 6.7 points leads, though nll's raw drop (another scale) is larger."""
        accuracy = _fail(0.067, method="exact-margin", p_adjusted=0.001)
        nll = _fail(0.9, metric="nll", method="sign-flip")
        ece = _fail(0.08, metric="ece", method="sign-flip")
        report = GateReport("2026-W41", [accuracy, nll, ece])
        payload = summary(report)
        assert payload["worst"][0]["metric"] == "accuracy"
        assert payload["headline"] == report.headline()
        assert payload["text"].splitlines()[0] == (
            "evalsentry: 2026-W41: FAIL toy-model@v2 accuracy -6.7 pts (p=0.001) and 2 more"
        )

    def test_numbers_are_rounded_for_reading(self) -> None:
        """Values and drops keep 4 decimals, p-values 2 significant figures, flips plain ints."""
        row = summary(GateReport("2026-W41", [_fail(0.3)]))["worst"][0]
        assert row == {
            "verdict": "FAIL",
            "model": "toy-model",
            "version": 2,
            "evalset": "toy",
            "metric": "accuracy",
            "slice": "",
            "reference": "previous-week",
            "was": 0.9123,
            "now": 0.6123,
            "change": -0.3,
            "allowed": -0.02,
            "drop": 0.3,
            "tolerance": 0.02,
            "p": 1.2e-05,
            "flips": {"newly_wrong": 30, "newly_right": 2},
            "reason": "drop beyond tolerance and significant",
        }
        assert type(row["flips"]["newly_wrong"]) is int

    def test_payload_is_strict_json_even_with_nan_and_numpy_values(self) -> None:
        """NaN and infinite numbers become null and numpy scalars plain numbers: JSON without NaN."""
        odd = _fail(
            float("nan"), value=np.float64(0.5), p_adjusted=float("inf"), version=np.int64(3)
        )
        payload = summary(GateReport("2026-W41", [odd]), run_name="weekly-eval-2026-W41")
        text = json.dumps(payload, allow_nan=False)
        row = json.loads(text)["worst"][0]
        assert row["drop"] is None and row["change"] is None and row["p"] is None
        assert row["now"] == 0.5 and row["version"] == 3

    def test_text_names_each_row_its_numbers_and_the_run(self) -> None:
        """The text a chat webhook shows has the headline, each worst row's numbers and the run link."""
        url = "http://127.0.0.1:4200/flow-runs/flow-run/abc"
        payload = summary(
            GateReport("2026-W41", [_fail(0.3), _error()]),
            run_name="weekly-eval-2026-W41",
            run_url=url,
        )
        lines = payload["text"].splitlines()
        assert lines[0] == f"evalsentry: {payload['headline']}"
        assert lines[1] == "1 regression(s), 1 error(s), 0 warning(s), 0 drifted feature(s)"
        assert lines[2] == (
            "ERROR every checkpoint on toy: "
            "evalset invalid, nothing evaluated: file changed since freeze"
        )
        assert lines[3] == (
            "FAIL toy-model@v2 on toy: accuracy vs previous-week: "
            "0.9123 -> 0.6123 (change -0.3, p=1.2e-05, flips -30/+2)"
        )
        assert lines[-1] == f"run: {url}"
        assert payload["run"] == {"name": "weekly-eval-2026-W41", "url": url}

    def test_a_run_failed_by_drift_alone_is_summarised(self) -> None:
        """Drift that failed the week (drift.fail_run) is the verdict, counted and listed, rounded."""
        drift = DriftResult(
            evalset="toy",
            feature="mean",
            kind="input",
            psi=0.87654321,
            statistic=0.5,
            p_value=1e-9,
            p_adjusted=3.456e-9,
            n_reference=200,
            n_live=200,
            verdict=Verdict.FAIL,
        )
        report = GateReport(
            "2026-W41", [_comparison(Verdict.PASS)], drift=[drift], drift_fails=True
        )
        payload = summary(report)
        assert payload["gate"] == "FAIL" and payload["counts"]["DRIFT"] == 1
        assert payload["drift"] == [
            {
                "verdict": "FAIL",
                "evalset": "toy",
                "model": None,
                "feature": "mean",
                "kind": "input",
                "psi": 0.8765,
                "p": 3.5e-09,
                "reason": "",
            }
        ]
        assert payload["text"].splitlines()[0] == (
            "evalsentry: 2026-W41: FAIL drift in 1 feature(s): toy mean PSI 0.877; "
            "the gate: PASS, 0 warning(s)"
        )
        assert "FAIL drift toy mean: PSI 0.877, p=3.5e-09" in payload["text"]


class TestFailureSummary:
    def test_a_run_that_failed_before_its_gate_has_the_same_shape(self) -> None:
        """Nothing to evaluate: one ERROR, the headline and the reason in the text, the run linked."""
        url = "http://127.0.0.1:4200/flow-runs/flow-run/abc"
        payload = failure_summary(
            "2026-W41",
            "2026-W41: ERROR nothing to evaluate",
            ["the registry holds no checkpoint"],
            run_name="weekly-eval-2026-W41-manual-abc123",
            run_url=url,
        )
        shaped = summary(GateReport("2026-W41", [_fail(0.3)]))
        assert set(payload) == set(shaped) and set(payload["counts"]) == set(shaped["counts"])
        assert payload["gate"] == "ERROR" and payload["counts"]["ERROR"] == 1
        assert payload["alert"] == "failed" and payload["worst"] == []
        assert payload["text"].splitlines() == [
            "evalsentry: 2026-W41: ERROR nothing to evaluate",
            "the registry holds no checkpoint",
            f"run: {url}",
        ]
        json.dumps(payload, allow_nan=False)
