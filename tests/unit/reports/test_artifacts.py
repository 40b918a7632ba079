"""The run's Markdown artifacts: a narrow report artifact that leads with the verdict, details apart."""

from __future__ import annotations

from evalsentry.gate.week import GateReport, Verdict
from evalsentry.reports.artifacts import details_artifact, report_artifact
from tests.unit.gate.test_gate import drifted
from tests.unit.reports.test_report import TestWeeklyMarkdown, judged

#: Cell text a table row of the report artifact may hold: at about 8 px a character and 24 px of
#: padding a cell, (828 - 4 * 24) / 8 = 91 characters in 4 cells fit the UI's 828 px panel at a
#: 1280 px window; a row of the old single table held 6 cells and up to 82 characters.
ROW_CHARS = 80
COLUMNS = 4


def _rows(markdown: str) -> list[list[str]]:
    """Every Markdown table row of ``markdown``, as its stripped cells."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|")
    ]


class TestReportArtifact:
    def test_it_leads_with_the_verdict_and_its_tables_are_narrow(self) -> None:
        """Verdict and headline first; one small table per checkpoint (metric, now, a column
        per reference) and the drift table: none wider than 4 columns or 80 characters."""
        week = GateReport(
            "2026-W41",
            TestWeeklyMarkdown.regressed_week().comparisons,
            drift=[drifted("mean", 7.05, Verdict.FAIL)],
        )
        text = report_artifact(week, more="details: the `weekly-eval-details` artifact")
        lines = text.splitlines()
        assert lines[0] == "## evalsentry 2026-W41: FAIL"
        assert lines[2] == f"**{week.headline()}**"
        rows = _rows(text)
        assert ["metric", "now", "vs W40 (previous)", "vs 2025-W50 (baseline)"] in rows
        assert ["accuracy", "0.85", "FAIL -5.0 pts, p=6e-11", "FAIL -5.0 pts, p=0.002"] in rows
        assert ["toy", "mean", "7.05", "FAIL"] in rows  # the drift, in the first artifact too
        assert max(len(row) for row in rows) <= COLUMNS
        assert max(sum(len(cell) for cell in row) for row in rows) <= ROW_CHARS
        assert lines[-2:] == ["details: the `weekly-eval-details` artifact", ""]

    def test_a_version_s_timing_row_joins_its_metrics_table(self) -> None:
        """The speed comparison of m@v2 (recorded without the file's sha) is a row of m@v2's
        table, not a second table under the same heading."""
        sha = "9ae2a1ad" + "0" * 56
        week = GateReport(
            "2026-W41",
            [
                judged(Verdict.FAIL, p_adjusted=6e-11, checkpoint_sha256=sha),
                judged(Verdict.PASS, "microseconds_per_example", value=11.6, gating=False),
            ],
        )
        text = report_artifact(week, more="")
        assert text.count("**m@v2 on toy**") == 1
        assert ["microseconds_per_example", "11.6"] in [r[:2] for r in _rows(text)]

    def test_the_details_artifact_holds_every_reason(self) -> None:
        """Each comparison's numbers and reason, and each drifted feature, are in the details."""
        week = GateReport(
            "2026-W41",
            [judged(Verdict.FAIL, p_adjusted=6e-11)],
            drift=[drifted("mean", 7.05, Verdict.FAIL)],
        )
        text = details_artifact(week, [], [], {})
        assert text.startswith("## evalsentry 2026-W41: details")
        assert "drop beyond tolerance and significant" in text
        assert f"- {week.drifted[0].describe()}" in text
        assert max((len(row) for row in _rows(text)), default=0) <= COLUMNS
