"""Markdown and JUnit renderings of a gate report."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import xmlschema

from evalsentry.gate.week import Comparison, GateReport, Verdict
from evalsentry.reports.report import gate_junit, gate_markdown

JUNIT_XSD = Path(__file__).parents[2] / "data" / "junit.xsd"


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


def mixed_report() -> GateReport:
    """Gating FAIL, ERROR, WARN, PASS and BASELINE, and report-only slices of every verdict."""
    return GateReport(
        "2026-W41",
        [
            comparison(Verdict.FAIL),
            comparison(Verdict.ERROR, metric="nll"),
            comparison(Verdict.WARN, metric="ece"),
            comparison(Verdict.PASS, metric="top5"),
            comparison(Verdict.BASELINE, metric="f1"),
            comparison(Verdict.FAIL, gating=False, slice_="half=odd"),
            comparison(Verdict.WARN, gating=False, slice_="half=even"),
            comparison(Verdict.ERROR, gating=False, metric="nll", slice_="half=odd"),
            comparison(Verdict.PASS, gating=False, metric="nll", slice_="half=even"),
        ],
    )


def assert_counts_match_elements(root: ET.Element) -> None:
    """Every count in the suite headers equals the elements it counts."""
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    for suite in suites:
        assert suite.get("tests") == str(len(suite.findall("testcase")))
        for kind, element in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
            assert suite.get(kind) == str(len(suite.findall(f"testcase/{element}"))), kind
    for kind in ("tests", "failures", "errors"):
        assert root.get(kind) == str(sum(int(s.get(kind, "0")) for s in suites)), kind


class TestJunit:
    def test_maps_verdicts_to_failures_errors_and_skips(self) -> None:
        """FAIL is a failure, ERROR an error, a report-only FAIL a skip, PASS a plain testcase."""
        report = mixed_report()
        cases = {c.get("name"): c for c in ET.fromstring(gate_junit(report)).iter("testcase")}
        assert cases["accuracy vs previous-week (2026-W41)"].find("failure") is not None
        assert cases["nll vs previous-week (2026-W41)"].find("error") is not None
        assert cases["accuracy[half=odd] vs previous-week (2026-W41)"].find("skipped") is not None
        assert cases["nll[half=odd] vs previous-week (2026-W41)"].find("skipped") is not None
        assert cases["top5 vs previous-week (2026-W41)"].find("system-out") is not None
        report_only_pass = cases["nll[half=even] vs previous-week (2026-W41)"]
        assert [child.tag for child in report_only_pass] == ["system-out"]
        assert report.exit_code == 2  # an ERROR outranks a FAIL: the run cannot be trusted

    def test_counts_equal_elements_and_file_is_schema_valid(self) -> None:
        """The header counts equal the elements written, and the file is valid JUnit XML."""
        text = gate_junit(mixed_report())
        xmlschema.XMLSchema(JUNIT_XSD).validate(text)
        root = ET.fromstring(text)
        assert_counts_match_elements(root)
        suite = root.find("testsuite")
        assert suite is not None
        counts = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
        assert counts == {"tests": "9", "failures": "1", "errors": "1", "skipped": "3"}
        assert "time" not in suite.attrib  # the gate times nothing; no invented durations

    def test_inconclusive_is_skipped_unless_strict_then_a_failure(self) -> None:
        """INCONCLUSIVE shows as a skip ("inconclusive: ...") and fails the build only when strict."""
        unsure = comparison(Verdict.INCONCLUSIVE)
        root = ET.fromstring(gate_junit(GateReport("2026-W41", [unsure])))
        (skipped,) = root.iter("skipped")
        assert skipped.get("message", "").startswith("inconclusive: INCONCLUSIVE m@v2")
        strict = ET.fromstring(gate_junit(GateReport("2026-W41", [unsure], strict=True)))
        assert [f.get("type") for f in strict.iter("failure")] == ["inconclusive"]
        assert_counts_match_elements(strict)
        assert GateReport("2026-W41", [unsure]).exit_code == 0
        assert GateReport("2026-W41", [unsure], strict=True).exit_code == 1

    def test_empty_report_is_a_valid_empty_suite(self) -> None:
        """A week with nothing to compare is a valid suite with zero tests."""
        text = gate_junit(GateReport("2026-W41", []))
        xmlschema.XMLSchema(JUNIT_XSD).validate(text)
        assert_counts_match_elements(ET.fromstring(text))


def test_markdown_lists_worst_first_and_escapes_pipes() -> None:
    """The summary table starts with the worst verdict and keeps table syntax intact."""
    text = gate_markdown(
        GateReport("2026-W41", [comparison(Verdict.PASS), comparison(Verdict.FAIL, metric="nll")])
    )
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "❌ FAIL" in rows[1] and "✅ PASS" in rows[2]
    assert "why \\| not" in rows[1]
    assert "1 regression(s)" in text


def test_markdown_marks_report_only_rows_and_counts_only_gating_ones() -> None:
    """Report-only rows say so and follow the gating ones; the headline counts gating rows."""
    text = gate_markdown(mixed_report())
    rows = [line for line in text.splitlines() if line.startswith("| ")][1:]
    verdicts = [row.split(" | ")[0].removeprefix("| ") for row in rows]
    assert verdicts == [
        "⛔ ERROR",
        "❌ FAIL",
        "⚠️ WARN",
        "📌 BASELINE",
        "✅ PASS",
        "⛔ ERROR (report only)",
        "❌ FAIL (report only)",
        "⚠️ WARN (report only)",
        "✅ PASS (report only)",
    ]
    assert "1 regression(s), 1 error(s), 1 warning(s) over 5 gating comparison(s)." in text
    assert "The 4 row(s) marked report only do not gate." in text
    overall = gate_markdown(mixed_report(), include_slices=False)
    assert "report only" not in overall  # no report-only row shown, none announced


def test_markdown_marks_inconclusive_and_says_what_it_means() -> None:
    """INCONCLUSIVE rows are marked, counted in the headline, and the note says when it fails."""
    report = GateReport("2026-W41", [comparison(Verdict.INCONCLUSIVE), comparison(Verdict.PASS)])
    text = gate_markdown(report)
    assert "| ❔ INCONCLUSIVE |" in text
    assert "0 regression(s), 0 error(s), 1 inconclusive, 0 warning(s)" in text
    assert "does not fail it (only --strict)" in text
    assert "fails the gate (strict)" in gate_markdown(
        GateReport("2026-W41", report.comparisons, True)
    )


def test_markdown_counts_unresolved_apart_from_inconclusive() -> None:
    """An unresolved INCONCLUSIVE is counted as information after the warnings, not as an
    inconclusive: the week it leaves alone reads PASS."""
    unresolved = replace(comparison(Verdict.INCONCLUSIVE), inconclusive_kind="unresolved")
    report = GateReport("2026-W41", [unresolved, comparison(Verdict.PASS)])
    text = gate_markdown(report)
    assert "0 regression(s), 0 error(s), 0 warning(s), 1 unresolved" in text
    assert report.verdict == Verdict.PASS


def test_regression_flips_say_worse_and_better_by_a_delta() -> None:
    """Regression rows count examples worse/better by more than the delta, not -0/+0 flips."""
    row = comparison(Verdict.PASS, metric="mae")
    from dataclasses import replace

    worse = replace(row, newly_wrong=31, newly_right=12, flip_delta=0.05, method="sign-flip")
    assert worse.flips == "-31/+12 by >0.05"
    assert "worse/better -31/+12 by >0.05" in worse.describe()
    assert "-31/+12 by >0.05" in gate_markdown(GateReport("2026-W41", [worse]))


def judged(verdict: Verdict, metric: str = "accuracy", **fields: object) -> Comparison:
    """A comparison of m@v2 on toy vs the previous week (2026-W40), accuracy 0.90 -> 0.85."""
    base = {
        **comparison(verdict, metric=metric).__dict__,
        "reason": "drop beyond tolerance and significant",
        "delta": -0.05,
    }
    return Comparison(**{**base, **fields})  # type: ignore[arg-type]


class TestWeeklyMarkdown:
    @staticmethod
    def regressed_week() -> GateReport:
        """accuracy FAILs against the previous week and the baseline; nll passes, then warns."""
        return GateReport(
            "2026-W41",
            [
                judged(Verdict.FAIL, p_adjusted=6e-11),
                judged(Verdict.FAIL, reference="baseline", reference_week="2025-W50"),
                judged(Verdict.PASS, "nll", method="paired-bootstrap", delta=0.0123),
                judged(
                    Verdict.WARN,
                    "nll",
                    reference="baseline",
                    reference_week="2025-W50",
                    method="paired-bootstrap",
                    delta=0.0523,
                ),
                judged(Verdict.FAIL, slice="half=odd", gating=False),
            ],
        )

    def test_headline_and_a_narrow_summary_lead_and_details_follow(self) -> None:
        """The report opens with the headline and one short row per metric; the wide table is below."""
        from evalsentry.reports.weekly import weekly_markdown

        report = self.regressed_week()
        text = weekly_markdown(report, [], [], {})
        summary_at, details_at = text.index("| checkpoint |"), text.index("### Gate details")
        assert text.index(report.headline()) < summary_at < details_at
        summary = [line for line in text[summary_at:details_at].splitlines() if line]
        assert summary[0].count("|") == 7  # checkpoint, evalset, metric, now, two references
        assert summary[2] == (
            "| m@v2 | toy | accuracy | 0.8500 | FAIL -5.0 pts (W40, p=6e-11) "
            "| FAIL -5.0 pts (2025-W50, p=0.002) |"
        )
        assert (
            summary[3]
            == "| m@v2 | toy | nll | 0.8500 | PASS +0.0123 (W40) | WARN +0.0523 (2025-W50, p=0.002) |"
        )
        # Cell text of the widest row: at about 8 px a character and 24 px of padding a cell,
        # (828 - 6 * 24) / 8 = 85 characters in 6 cells fit the UI's 828 px artifact panel.
        assert max(sum(len(cell.strip()) for cell in row.split("|")) for row in summary) <= 85
        assert "| change | allowed |" in text[details_at:] and "## evalsentry gate" not in text

    def test_candidates_get_a_production_column_and_first_weeks_say_baseline(self) -> None:
        """A candidate's row compares with production; a first week says it becomes the baseline."""
        from evalsentry.reports.report import summary_table

        candidate = judged(Verdict.FAIL, reference="production", version=None, gating=False)
        first = judged(Verdict.BASELINE, "*", reference="none", model="new", delta=None, value=None)
        lines = summary_table(GateReport("2026-W41", [first, candidate]))
        assert lines[0] == "| checkpoint | evalset | metric | now | vs production |"
        assert lines[2] == "| new@v2 | toy |  |  | BASELINE first week, the baseline |"
        assert lines[3].startswith("| m (candidate file) | toy | accuracy | 0.8500 | FAIL -5.0 pts")

    def test_an_invalid_evalset_is_a_row_of_its_own(self) -> None:
        """Nothing ran on a tampered evalset: one ERROR row for every checkpoint, first."""
        from evalsentry.reports.report import summary_table

        invalid = judged(
            Verdict.ERROR,
            "*",
            model="*",
            version=None,
            reference="none",
            reason="evalset invalid, nothing evaluated: data/part-000.parquet changed",
            delta=None,
            value=None,
        )
        lines = summary_table(GateReport("2026-W41", [judged(Verdict.PASS), invalid]))
        assert (
            lines[2]
            == "| every checkpoint | toy |  |  | ERROR evalset invalid, nothing evaluated |"
        )


class TestArtifactHelpers:
    def test_metrics_table_is_rounded_json_safe_and_overall_only(self) -> None:
        """Table rows carry 4 significant digits, no NaN, plain ints, and no slice rows."""
        import json

        import numpy as np

        from evalsentry.reports.report import metrics_table

        evaluations = [{"evaluation_id": "e", "model": "m", "version": 2, "stage": "production"}]
        metrics = [
            {
                "evaluation_id": "e",
                "evalset": "toy",
                "metric": "accuracy",
                "slice": "",
                "value": 0.8820134567891234,
                "ci_low": float("nan"),
                "ci_high": 0.000123456789,
                "n": np.int64(1000),
            },
            {"evaluation_id": "e", "evalset": "toy", "metric": "accuracy", "slice": "half=odd"},
        ]
        rows = metrics_table(evaluations, metrics)
        assert rows == [
            {
                "checkpoint": "m@v2",
                "stage": "production",
                "evalset": "toy",
                "metric": "accuracy",
                "value": 0.882,
                "ci_low": None,
                "ci_high": 0.0001235,
                "n": 1000,
            }
        ]
        json.dumps(rows, allow_nan=False)

    def test_a_local_report_links_over_http_never_file(self, tmp_path: Path) -> None:
        """A local report links to the report server (its default URL, or reports_url), never
        to file://, which browsers refuse from a web page; a store that cannot sign says so."""
        import fsspec

        from evalsentry.reports.report import DEFAULT_REPORTS_URL, browser_link

        local, note = browser_link(fsspec.filesystem("file"), str(tmp_path / "r 1.html"))
        assert local == f"{DEFAULT_REPORTS_URL}/r%201.html" and "serve-reports" in note
        served, note = browser_link(
            fsspec.filesystem("file"), str(tmp_path / "r.html"), reports_url="http://h:9/x/"
        )
        assert served == "http://h:9/x/r.html" and "http://h:9/x/" in note
        memory, note = browser_link(fsspec.filesystem("memory"), "/reports/r.html")
        assert memory == "memory:///reports/r.html" and "cannot sign" in note

    def test_file_stem_keeps_run_names_and_tames_others(self) -> None:
        """A generated run name is its own file name; slashes and spaces cannot make folders."""
        from evalsentry.reports.report import file_stem

        assert (
            file_stem("weekly-eval-2026-W49-manual-3f9a1c") == "weekly-eval-2026-W49-manual-3f9a1c"
        )
        assert file_stem("../my run/x") == "my-run-x"
