"""Markdown and JUnit renderings of a gate report."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from evalsentry.gate import Comparison, GateReport, Verdict
from evalsentry.report import gate_junit, gate_markdown


def comparison(
    verdict: Verdict, *, gating: bool = True, metric: str = "accuracy", slice_: str = ""
) -> Comparison:
    """A comparison with the numbers filled in."""
    return Comparison(
        evaluation_id="e",
        week="2026-W41",
        model="m",
        version=2,
        evalset="toy",
        reference="previous-week",
        metric=metric,
        slice=slice_,
        verdict=verdict,
        reason="why | not",
        gating=gating,
        reference_week="2026-W40",
        reference_value=0.9,
        value=0.85,
        delta=-0.05,
        drop=0.05,
        tolerance=0.01,
        p_value=0.001,
        p_adjusted=0.002,
        method="mcnemar-exact",
        newly_wrong=50,
        newly_right=0,
        n=1000,
    )


def test_junit_maps_verdicts_to_failures_errors_and_skips() -> None:
    """FAIL is a failure, ERROR an error, a report-only FAIL a skip, PASS a plain testcase."""
    report = GateReport(
        "2026-W41",
        [
            comparison(Verdict.FAIL),
            comparison(Verdict.ERROR, metric="nll"),
            comparison(Verdict.FAIL, gating=False, slice_="half=odd"),
            comparison(Verdict.PASS, metric="ece"),
        ],
    )
    suite = ET.fromstring(gate_junit(report))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert suite.get("tests") == "4" and suite.get("failures") == "1" and suite.get("errors") == "1"
    assert cases["accuracy vs previous-week (2026-W41)"].find("failure") is not None
    assert cases["nll vs previous-week (2026-W41)"].find("error") is not None
    assert cases["accuracy[half=odd] vs previous-week (2026-W41)"].find("skipped") is not None
    assert cases["ece vs previous-week (2026-W41)"].find("system-out") is not None
    assert report.exit_code == 2  # an ERROR outranks a FAIL: the run cannot be trusted


def test_markdown_lists_worst_first_and_escapes_pipes() -> None:
    """The summary table starts with the worst verdict and keeps table syntax intact."""
    text = gate_markdown(
        GateReport("2026-W41", [comparison(Verdict.PASS), comparison(Verdict.FAIL, metric="nll")])
    )
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "❌ FAIL" in rows[1] and "✅ PASS" in rows[2]
    assert "why \\| not" in rows[1]
    assert "1 regression(s)" in text
