"""The GitHub renderings of a gate report: annotations, the job summary and the one PR comment."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from evalsentry.gate.flips import ExampleFlips
from evalsentry.gate.week import GateReport, Verdict
from evalsentry.reports.ci_github import (
    COMMENT_LIMIT,
    SUMMARY_LIMIT,
    Block,
    comment_marker,
    error_report,
    escape_data,
    escape_property,
    fit,
    md_code,
    md_text,
    pr_comment,
    run_url,
    step_summary,
    workflow_annotations,
    workflow_command,
)
from tests.unit.reports.test_report import comparison, mixed_report

MARKER = "<!-- evalsentry:digits -->"


def _size(text: str) -> int:
    return len(text.encode())


def huge_report(rows: int = 20_000) -> GateReport:
    """A FAIL among ``rows`` report-only slice comparisons with long reasons."""
    slices = [
        replace(
            comparison(Verdict.WARN, gating=False, slice_=f"region=r{i:05d}"),
            reason="the drop is within tolerance but significant " * 3,
        )
        for i in range(rows)
    ]
    return GateReport("2026-W41", [comparison(Verdict.FAIL), *slices])


def many_flips() -> list[ExampleFlips]:
    """Two pairs with a hundred thousand flipped examples each."""
    ids = [f"example-{i:07d}" for i in range(100_000)]
    return [
        ExampleFlips("m@v2 on toy vs previous-week (v1, 2026-W40)", ids, ids[:10]),
        ExampleFlips("m@v2 on toy vs baseline (v1, 2026-W30)", ids[:3], []),
    ]


class TestWorkflowCommands:
    def test_data_and_properties_are_escaped_as_github_reads_them(self) -> None:
        """`%`, CR and LF are encoded in data; properties also encode `:` and `,`."""
        assert escape_data("50% drop\r\nnext") == "50%25 drop%0D%0Anext"
        assert escape_property("FAIL: a, b%\n") == "FAIL%3A a%2C b%25%0A"
        line = workflow_command("error", "two\nlines: 5%", title="evalsentry FAIL: m, toy")
        assert line == "::error title=evalsentry FAIL%3A m%2C toy::two%0Alines: 5%25"
        assert "\n" not in line

    def test_one_error_per_problem_and_one_warning_per_warn(self) -> None:
        """FAIL and ERROR rows are errors, WARN a warning; PASS and report-only rows none."""
        lines = workflow_annotations(mixed_report())
        errors = [line for line in lines if line.startswith("::error ")]
        warnings = [line for line in lines if line.startswith("::warning ")]
        assert len(errors) == 2 and len(warnings) == 1 and len(lines) == 3
        assert errors[0].startswith("::error title=evalsentry ERROR%3A m@v2 on toy::ERROR")
        assert "::FAIL m@v2 on toy: accuracy vs previous-week: 0.9000 -> 0.8500" in errors[1]
        assert warnings[0].startswith("::warning title=evalsentry WARN%3A m@v2 on toy::WARN")

    def test_inconclusive_is_a_warning_an_error_when_strict_and_unresolved_is_silent(
        self,
    ) -> None:
        """A possible regression warns (errs when strict); an unresolved one is no news."""
        possible = comparison(Verdict.INCONCLUSIVE)
        unresolved = replace(possible, metric="nll", inconclusive_kind="unresolved")
        lenient = workflow_annotations(GateReport("2026-W41", [possible, unresolved]))
        assert [line.split(" ")[0] for line in lenient] == ["::warning"]
        assert "INCONCLUSIVE m@v2 on toy: accuracy" in lenient[0]
        strict = workflow_annotations(GateReport("2026-W41", [possible, unresolved], strict=True))
        assert [line.split(" ")[0] for line in strict] == ["::error", "::error"]

    def test_past_ten_of_a_kind_the_last_counts_the_rest(self) -> None:
        """GitHub shows 10 errors a step: 25 FAILs give 9 of them and one line for 16 more."""
        fails = [comparison(Verdict.FAIL, metric=f"m{i}") for i in range(25)]
        lines = workflow_annotations(GateReport("2026-W41", fails))
        assert len(lines) == 10 and all(line.startswith("::error ") for line in lines)
        assert "16 more error(s) of the gate: the job summary lists every one" in lines[-1]


class TestStepSummary:
    def test_the_verdict_comes_first_then_tables_then_folded_details(self) -> None:
        """Heading with the verdict, the headline, the link, the table; details folded."""
        flips = [ExampleFlips("m@v2 on toy vs previous-week (v1, 2026-W40)", ["a", "b"], ["c"])]
        text = step_summary(
            mixed_report(), "digits candidate new.pt", flips=flips, report_url="https://x/r (1)"
        )
        lines = text.splitlines()
        assert lines[0] == "## ⛔ ERROR · evalsentry: digits candidate new.pt"
        assert (
            lines[2] == "**2026-W41: ERROR m@v2 nll -5.0 pts (p=0.002) (why \\| not) and 1 more**"
        )
        assert "[HTML report and JUnit](https://x/r%20%281%29)" in text
        assert text.index("| checkpoint | evalset |") < text.index("<details>")
        assert "<details><summary>All 9 comparison(s), slices included</summary>" in text
        assert (
            "<details><summary>Flips: m@v2 on toy vs previous-week (v1, 2026-W40): "
            "2 newly wrong, 1 newly right</summary>"
        ) in text
        assert "**Newly wrong (2):** `a`, `b`" in text
        assert text.count("<details>") == text.count("</details>") == 2

    def test_a_huge_report_is_cut_well_below_a_mebibyte_with_a_note(self) -> None:
        """20,000 rows and 200,000 flipped ids: under 512 KiB, verdict first, details closed."""
        text = step_summary(huge_report(), "digits", flips=many_flips())
        assert _size(text) <= SUMMARY_LIMIT < 1024 * 1024
        assert text.startswith("## ❌ FAIL · evalsentry: digits\n")
        assert re.search(r"… \d+ more row\(s\) not shown here", text)
        assert "✂️ Cut to stay within 512 KiB (GitHub's limits)" in text
        assert "Write it whole with --markdown, --junit or --html." in text
        assert text.count("<details>") == text.count("</details>")

    def test_a_long_id_list_shows_its_first_ids_and_counts_the_rest(self) -> None:
        """A flip list names 500 ids in the summary and says how many more there are."""
        text = step_summary(mixed_report(), "digits", flips=many_flips()[:1])
        assert "`example-0000499` and 99500 more" in text
        assert "`example-0000500`" not in text

    def test_a_nearly_full_step_summary_still_gets_the_verdict(self) -> None:
        """Even a budget of 2 KiB keeps the heading and headline, and says it was cut."""
        text = step_summary(huge_report(), "digits", limit=2048)
        assert _size(text) <= 2048
        assert text.startswith("## ❌ FAIL · evalsentry: digits\n\n**2026-W41: FAIL m@v2")
        assert "✂️ Cut to stay within 2 KiB (GitHub's limits)" in text
        assert text.count("<details>") == text.count("</details>")


class TestComment:
    def test_the_marker_is_the_first_line_and_the_same_on_every_push(self) -> None:
        """Two pushes, two verdicts: one marker, so a workflow replaces the one comment."""
        first = pr_comment(mixed_report(), "digits", MARKER, run_url="https://gh/run/1")
        passed = GateReport("2026-W41", [comparison(Verdict.PASS)])
        second = pr_comment(passed, "digits", MARKER, run_url="https://gh/run/2")
        assert first.splitlines()[0] == second.splitlines()[0] == MARKER
        assert first.splitlines()[1].startswith("## ⛔ ERROR")
        assert second.splitlines()[1].startswith("## ✅ PASS")
        assert second.rstrip().endswith(
            "evalsentry updates this comment on each push · [this run](https://gh/run/2)</sub>"
        )

    def test_a_huge_report_fits_a_github_comment(self) -> None:
        """The comment stays under GitHub's 65,536 characters, ids cut to 50 a list."""
        text = pr_comment(huge_report(), "digits", MARKER, flips=many_flips())
        assert len(text) <= _size(text) <= COMMENT_LIMIT < 65_536
        assert text.startswith(MARKER + "\n## ❌ FAIL")
        assert "The job summary holds more." in text
        assert text.rstrip().endswith("evalsentry updates this comment on each push</sub>")

    @pytest.mark.parametrize(
        ("command", "model", "evalsets", "marker"),
        [
            ("evaluate", "digits", [], "<!-- evalsentry:digits -->"),
            ("evaluate", "digits", ["b", "a"], "<!-- evalsentry:digits:a,b -->"),
            ("gate", None, [], "<!-- evalsentry-gate -->"),
            ("gate", "digits", ["toy"], "<!-- evalsentry-gate:digits/toy -->"),
        ],
    )
    def test_markers_name_what_the_comment_is_about(
        self, command: str, model: str | None, evalsets: list[str], marker: str
    ) -> None:
        """The marker names the command's model line and chosen evalsets, in a stable order."""
        assert comment_marker(command, model, evalsets) == marker

    def test_an_error_is_a_verdict_too(self) -> None:
        """A command that could not gate says so in Markdown and as one error annotation."""
        markdown, annotation = error_report("model 'digts' unknown\nDid you mean", "digts")
        assert markdown.startswith("## ⛔ ERROR · evalsentry: digts\n\n**Not evaluated: model")
        assert "nothing passed" in markdown
        assert annotation == (
            "::error title=evalsentry ERROR%3A digts::model 'digts' unknown%0ADid you mean"
        )

    def test_the_run_link_comes_from_the_ci_systems_variables(self) -> None:
        """The run's page is built from GitHub's variables, else GitLab's job URL; else None."""
        environ = {
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "acme/models",
            "GITHUB_RUN_ID": "42",
        }
        assert run_url(environ) == "https://github.com/acme/models/actions/runs/42"
        gitlab = {"CI_JOB_URL": "https://gitlab.example/a/b/-/jobs/9"}
        assert run_url(gitlab) == "https://gitlab.example/a/b/-/jobs/9"
        assert run_url({}) is None


class TestMarkdownText:
    def test_text_renders_as_written_and_cannot_open_a_comment(self) -> None:
        """A reason holding `<!--`, `|`, `#12` or a newline stays literal text on one line."""
        text = md_text("bad <!-- x | #12 *y*\nnext")
        assert text == "bad \\<!-- x \\| \\#12 \\*y\\* next"
        assert re.search(r"(?<!\\)<", text) is None  # every `<` escaped: no tag, no comment

    def test_a_value_mentions_nobody(self) -> None:
        """``@team`` in a value gets a zero-width space (no notification); ``model@v2`` and an
        address stay as they are."""
        assert md_text("ping @team and @org/people") == "ping @\u200bteam and @\u200borg/people"
        assert md_text("digits@v2 a@b.c") == "digits@v2 a@b.c"
        assert md_text("`@octocat") == "\\`@\u200boctocat"  # an escaped backtick is no code span

    def test_code_spans_hold_any_backticks(self) -> None:
        """An id with backticks is fenced by a longer run of them."""
        assert md_code("plain") == "`plain`"
        assert md_code("a`b") == "``a`b``"
        assert md_code("`x") == "`` `x ``"

    def test_fit_cuts_the_overflowing_block_and_leaves_out_the_rest(self) -> None:
        """The block that overflows keeps its head and the rows that fit; later ones go."""
        blocks = [
            Block(("# head",)),
            Block(("| a |", "|---|"), tuple(f"| {i} |" for i in range(1000)), ("",)),
            Block(("never shown",)),
        ]
        text = fit(blocks, 1024, whole="See the file.")
        assert _size(text) <= 1024
        assert text.startswith("# head\n\n| a |\n|---|\n| 0 |\n")
        assert re.search(r"\n\n… \d+ more row\(s\) not shown here\n", text)
        assert "never shown" not in text and "1 more section(s) left out. See the file." in text
