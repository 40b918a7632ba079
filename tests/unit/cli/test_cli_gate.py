"""gate, evaluate, history and baseline through the CLI: exit codes and CI outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import xmlschema

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.history.store import History
from tests.conftest import make_read_only
from tests.models import TRUSTED_YAML
from tests.synthetic import accuracy_mask, record_week
from tests.unit.evalsets.test_evalsets import edit
from tests.unit.reports.test_report import JUNIT_XSD, assert_counts_match_elements

N = 1000


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose config points at its own store."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n" + TRUSTED_YAML)
    return tmp_path


def evaluate_candidate(checkpoint: str, project: Path) -> int:
    """``evalsentry evaluate`` of ``checkpoint`` as a toy-model candidate; the exit code."""
    return main(
        [
            "evaluate",
            "--checkpoint",
            checkpoint,
            "--model",
            "toy-model",
            "--config",
            config(project),
        ]
    )


def config(project: Path) -> str:
    """The --config argument for the project."""
    return str(project / "evalsentry.yaml")


def drop_weeks(project: Path) -> None:
    """Week 40 baseline, week 41 the same, week 42 a 5% relative drop."""
    history = History(str(project / "store"))
    before = accuracy_mask(N, 0.9)
    after = before.copy()
    after[np.flatnonzero(before)[:45]] = False
    record_week(history, "2026-W40", before)
    record_week(history, "2026-W41", before)
    record_week(history, "2026-W42", after, checkpoint="d" * 64, version=2)


def record_production(project: Path, checkpoint: Path, version: int, week: str) -> None:
    """Evaluate ``checkpoint`` on the project's toy evalset as toy-model@v<version> in ``week``."""
    settings = load_config(project / "evalsentry.yaml")
    outcome = evaluate_checkpoint(
        Target("toy-model", str(checkpoint), version, "production"),
        load_evalset(project / "evalsets" / "toy"),
        config=settings,
        run_id=f"r{version}",
        week=week,
    )
    record(History(settings.store_url), [outcome])


class TestGateCommand:
    def test_regression_exits_1_with_junit_and_markdown(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A regression exits 1, names the evidence, and writes JUnit and Markdown files."""
        drop_weeks(project)
        junit, markdown = project / "gate.xml", project / "gate.md"
        code = main(
            [
                "gate",
                "--config",
                config(project),
                "--junit",
                str(junit),
                "--markdown",
                str(markdown),
            ]
        )
        assert code == 1
        err = capsys.readouterr().err
        assert "m@v2 on toy: accuracy vs previous-week" in err and "flips -45/+0" in err
        suite = ET.fromstring(junit.read_text())
        assert suite.get("failures") == str(len(suite.findall(".//failure"))) != "0"
        names = [
            case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
        ]
        assert "accuracy vs previous-week (2026-W42)" in names
        text = markdown.read_text()
        assert text.startswith("## evalsentry gate: 2026-W42") and "❌ FAIL" in text

    def test_a_line_that_stopped_running_is_missing_until_archived(
        self, project: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """m2 ran last week and not this week: `gate` (with and without --week) exits 2 naming
        it MISSING; once the team archives every version of m2, the week passes."""
        mask = accuracy_mask(N, 0.9)
        history = History(str(project / "store"))
        for week in ("2026-W40", "2026-W41"):
            record_week(history, week, mask)
            record_week(history, week, mask, model="m2")
        record_week(history, "2026-W42", mask)
        argv = ["register", str(tiny_checkpoint), "--model", "m2", "--new-model"]
        assert main([*argv, "--stage", "production", "--config", config(project)]) == 0
        capsys.readouterr()
        for week in ([], ["--week", "2026-W42"]):
            assert main(["gate", *week, "--config", config(project)]) == 2
            err = capsys.readouterr().err
            assert err.startswith("error: 2026-W42: ERROR m2@v1 (MISSING: no result in 2026-W42")
            assert "m2@v1 on toy" in err and "(last: 2026-W41 on toy)" in err
        assert main(["registry", "archive", "m2", "1", "--config", config(project)]) == 0
        assert main(["gate", "--config", config(project)]) == 0

    def test_an_evalset_s_own_tolerance_applies_to_it_alone(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The 4.5-point drop on toy FAILs at the default 1 point; with toy's own accuracy (6
        points) and nll (50%) tolerances it does not, and the comparison states 0.06 allowed;
        the same entries for another evalset change nothing on toy."""
        drop_weeks(project)
        assert main(["gate", "--config", config(project)]) == 1
        settings = project / "evalsentry.yaml"
        text = settings.read_text()
        own = "{accuracy: {max_drop: 0.06}, nll: {max_drop: 50%}}"
        settings.write_text(text + f"gate:\n  evalsets:\n    toy: {own}\n")
        capsys.readouterr()
        assert main(["gate", "--config", config(project)]) == 0
        out = capsys.readouterr().out
        assert re.search(
            r"accuracy +previous-week \(2026-W41\) +0\.9000 +0\.8550 +-0\.0450 +-0\.0600", out
        )
        settings.write_text(text + f"gate:\n  evalsets:\n    other: {own}\n")
        assert main(["gate", "--config", config(project)]) == 1

    def test_ci_files_go_into_folders_created_for_them(self, project: Path) -> None:
        """Missing output folders are created; the files are whole, schema-valid and readable."""
        drop_weeks(project)
        junit, markdown = project / "reports" / "ci" / "gate.xml", project / "out" / "summary.md"
        argv = ["gate", "--config", config(project), "--junit", str(junit)]
        assert main([*argv, "--markdown", str(markdown)]) == 1
        text = junit.read_text()
        xmlschema.XMLSchema(JUNIT_XSD).validate(text)
        root = ET.fromstring(text)
        assert_counts_match_elements(root)
        assert root.get("failures") == "4" and root.findall(".//skipped")
        assert markdown.read_text().startswith("## evalsentry gate: 2026-W42")
        umask = os.umask(0)
        os.umask(umask)
        for path in (junit, markdown):
            assert path.stat().st_mode & 0o777 == 0o666 & ~umask
            assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left

    @pytest.mark.parametrize(
        ("option", "where"),
        [
            ("--markdown", "blocker/summary.md"),
            ("--junit", "blocker/ci/gate.xml"),
            ("--junit", "reports"),
            ("--junit", "read-only/gate.xml"),
        ],
    )
    def test_unwritable_output_is_one_line_and_exit_2(
        self, project: Path, capsys: pytest.CaptureFixture[str], option: str, where: str
    ) -> None:
        """An output path that cannot be written gives one line naming it and exit 2, not 1."""
        drop_weeks(project)  # a regression (exit 1) is outranked by the unusable path
        (project / "blocker").write_text("a file, not a folder")
        (project / "reports").mkdir()
        undo = make_read_only(project / "read-only")
        try:
            self._refused(project, capsys, option, where)
        finally:
            undo()

    def _refused(
        self, project: Path, capsys: pytest.CaptureFixture[str], option: str, where: str
    ) -> None:
        before = sorted(p.name for p in project.rglob("*"))
        assert main(["gate", "--config", config(project), option, str(project / where)]) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"error: {option} {project / where}: cannot write it (")
        assert "give a file path in a folder you can write to" in err
        assert out == ""  # nothing printed as if the gate had run through
        assert sorted(p.name for p in project.rglob("*")) == before  # no half-written file

    def test_summary_marks_report_only_slice_rows(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Report-only slice rows are marked in summary.md and the CLI table; FAIL rows match the headline."""
        drop_weeks(project)
        markdown = project / "summary.md"
        argv = ["gate", "--config", config(project), "--markdown", str(markdown), "--slices"]
        assert main(argv) == 1
        text = markdown.read_text()
        verdicts = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ")]
        assert "4 regression(s)" in text and verdicts.count("| ❌ FAIL") == 4
        assert verdicts.count("| ❌ FAIL (report only)") == 8
        assert "The 8 row(s) marked report only do not gate." in text
        table = capsys.readouterr().out
        assert table.count("❌ FAIL (report only)") == 8 and "accuracy [half=even]" in table

    def test_inconclusive_exits_0_or_1_with_strict_and_shows_in_ci_files(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """72 rows cannot show a drop within 1 point: INCONCLUSIVE, exit 0; --strict exits 1.

        JUnit marks it skipped (a failure when strict); Markdown marks it and says what it means.
        """
        history = History(str(project / "store"))
        record_week(history, "2026-W40", accuracy_mask(72, 0.9))
        record_week(history, "2026-W41", accuracy_mask(72, 0.9))
        junit, markdown = project / "gate.xml", project / "gate.md"
        argv = ["gate", "--config", config(project), "--junit", str(junit)]
        assert main([*argv, "--markdown", str(markdown)]) == 0
        out = capsys.readouterr().out
        assert "INCONCLUSIVE m@v1 on toy: accuracy vs previous-week" in out
        assert "this evalset detects drops of about" in out
        root = ET.fromstring(junit.read_text())
        assert_counts_match_elements(root)
        skipped = [s.get("message") for s in root.iter("skipped")]
        assert any(m.startswith("inconclusive: INCONCLUSIVE m@v1") for m in skipped)
        assert root.get("failures") == "0"
        text = markdown.read_text()
        assert "❔ INCONCLUSIVE" in text and "does not fail it (only --strict)" in text
        assert main([*argv, "--strict"]) == 1
        assert "error: 2026-W41: INCONCLUSIVE m@v1 accuracy" in capsys.readouterr().err
        strict = ET.fromstring(junit.read_text())
        assert [f.get("type") for f in strict.iter("failure")] == ["inconclusive"]
        xmlschema.XMLSchema(JUNIT_XSD).validate(junit.read_text())

    def test_previous_week_passes_with_exit_0(self, project: Path) -> None:
        """The same predictions the week after pass."""
        drop_weeks(project)
        assert main(["gate", "--config", config(project), "--week", "2026-W41"]) == 0

    def test_not_comparable_exits_2(self, project: Path) -> None:
        """A changed evalset hash fails closed with exit 2."""
        history = History(str(project / "store"))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        record_week(history, "2026-W41", accuracy_mask(N, 0.9), evalset_sha="f" * 64)
        assert main(["gate", "--config", config(project)]) == 2

    def test_empty_history_and_bad_week_exit_2(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No history yet, or a malformed week, is unusable input."""
        assert main(["gate", "--config", config(project)]) == 2
        assert "holds no weekly evaluation yet" in capsys.readouterr().err
        assert main(["gate", "--config", config(project), "--week", "2026-49"]) == 2

    @pytest.mark.parametrize(
        ("command", "code"),
        [
            (["gate"], 1),  # the FAIL of 2026-W42
            (["gate", "--week", "2026-W41"], 0),
            (["gate", "--week", "2026-W39"], 2),  # nothing recorded that week
            (["history"], 0),  # a command of the Typer application
        ],
    )
    def test_a_reader_that_leaves_early_changes_no_exit_code(
        self, project: Path, command: list[str], code: int
    ) -> None:
        """`evalsentry gate | head -1`: the closed pipe drops the output, never the verdict's code."""
        drop_weeks(project)
        program = [sys.executable, "-m", "evalsentry.cli", *command, "--config", config(project)]
        with subprocess.Popen(program, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as run:
            assert run.stdout is not None and run.stderr is not None
            run.stdout.close()  # before the command has printed anything
            err = run.stderr.read().decode()
        assert run.returncode == code, err
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert err == "" if code == 0 else err.startswith("error: "), err

    def test_the_typer_app_lists_and_forwards_the_gate(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`evalsentry --help` lists the gate; the app's own `gate` runs the same command."""
        from typer.testing import CliRunner

        from evalsentry.cli import app

        assert main(["--help"]) == 0
        assert "Gate a week's results against the previous week" in capsys.readouterr().out
        drop_weeks(project)
        forwarded = CliRunner().invoke(app, ["gate", "--config", config(project), "--slices"])
        assert forwarded.exit_code == 1
        assert forwarded.stdout.count("❌ FAIL (report only)") == 8

    def test_the_program_flushes_its_output_and_exits_with_the_verdict(self, project: Path) -> None:
        """`python -m evalsentry.cli gate` (the program, which skips interpreter teardown) still
        prints everything into a pipe and exits 1 on a regression, 0 on the week before."""
        drop_weeks(project)
        program = [sys.executable, "-m", "evalsentry.cli", "gate", "--config", config(project)]
        buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        failed = subprocess.run(program, capture_output=True, text=True, check=False, env=buffered)
        assert failed.returncode == 1
        assert failed.stdout.startswith("evalsentry gate 2026-W42: FAIL\n")
        assert failed.stdout.count("❌ FAIL") == 4
        assert failed.stderr.startswith("error: 2026-W42: FAIL")
        passed = subprocess.run(
            [*program, "--week", "2026-W41"], capture_output=True, text=True, env=buffered
        )
        assert passed.returncode == 0 and passed.stderr == ""
        assert passed.stdout.rstrip().endswith("2026-W41: PASS, 0 warning(s)")


class TestHistoryAndBaseline:
    def test_history_formats(self, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """History prints a row per week and metric as a table, CSV or JSON."""
        drop_weeks(project)
        assert (
            main(
                ["history", "--config", config(project), "--metric", "accuracy", "--format", "json"]
            )
            == 0
        )
        rows = json.loads(capsys.readouterr().out)
        assert [r["week"] for r in rows] == ["2026-W40", "2026-W41", "2026-W42"]
        assert rows[-1]["value"] == pytest.approx(0.855)
        assert (
            main(["history", "--config", config(project), "--weeks", "1", "--format", "csv"]) == 0
        )
        assert capsys.readouterr().out.count("2026-W42") == 2  # accuracy and nll
        assert main(["history", "--config", config(project), "--format", "xml"]) == 2

    def test_baseline_set_and_show(self, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The baseline defaults to the first week and can be pinned to another."""
        drop_weeks(project)
        assert main(["baseline", "show", "--model", "m", "--config", config(project)]) == 0
        assert "2026-W40 (first recorded week)" in capsys.readouterr().out
        assert (
            main(
                [
                    "baseline",
                    "set",
                    "--model",
                    "m",
                    "--week",
                    "2026-W41",
                    "--config",
                    config(project),
                ]
            )
            == 0
        )
        assert main(["baseline", "show", "--model", "m", "--config", config(project)]) == 0
        assert "2026-W41 (pinned)" in capsys.readouterr().out
        assert (
            main(
                [
                    "baseline",
                    "set",
                    "--model",
                    "m",
                    "--week",
                    "2026-W30",
                    "--config",
                    config(project),
                ]
            )
            == 2
        )


class TestEvaluateCommand:
    @pytest.fixture
    def with_production(
        self, tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
    ) -> Path:
        """A project whose history holds one production result of the good toy checkpoint."""
        (tmp_path / "evalsentry.yaml").write_text(
            "store: store\nevalsets: evalsets\n" + TRUSTED_YAML
        )
        record_production(tmp_path, toy_checkpoints["good"], 1, "2026-W40")
        return tmp_path

    def test_degraded_candidate_exits_1_and_is_recorded_as_candidate(
        self,
        with_production: Path,
        toy_checkpoints: dict[str, Path],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A worse candidate fails against production and never becomes a production result."""
        code = evaluate_candidate(str(toy_checkpoints["degraded"]), with_production)
        assert code == 1
        # Model or data? The same training data, another config (a bias on class 0's logit).
        said = capsys.readouterr()
        diagnosis = next(
            line.strip() for line in (said.out + said.err).splitlines() if "diagnosis:" in line
        )
        assert diagnosis.startswith(
            "diagnosis: no data cause found. Checked, nothing found: the toy-model candidate "
            "on toy: the training data is the same; the toy-model candidate on toy: 0 of "
        )
        # The production checkpoint alone witnesses the labels: the candidate does not.
        assert "newly wrong examples are label-error suspects. Where: " in diagnosis
        assert diagnosis.endswith("flips concentrate in classes 1, 2. Also changed: config.")
        frame = History(str(with_production / "store")).evaluations()
        candidate = frame[frame["kind"] == "candidate"]
        assert len(candidate) == 1 and candidate["stage"].item() == "candidate"
        assert (frame[frame["kind"] == "scheduled"]["stage"] == "production").all()

    def test_ci_decisions_are_history_and_one_query_finds_them(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """`evaluate` records its verdicts: what CI said about a file is one query by its sha."""
        import duckdb

        from evalsentry.storage import sha256_file

        assert evaluate_candidate(str(toy_checkpoints["degraded"]), with_production) == 1
        sha = sha256_file(toy_checkpoints["degraded"])[0]
        said = duckdb.sql(
            "select verdict, reference, metric from read_parquet("
            f"'{with_production}/store/comparisons/*.parquet', union_by_name = true) "
            f"where kind = 'candidate' and checkpoint_sha256 like '{sha[:12]}%'"
        ).fetchall()
        assert ("FAIL", "production", "accuracy") in said
        assert {verdict for verdict, _, _ in said} <= {"FAIL", "PASS", "WARN", "INCONCLUSIVE"}

    def test_a_candidate_that_cannot_run_is_an_error_verdict_in_the_history(
        self, with_production: Path, tmp_path: Path
    ) -> None:
        """A file that is no checkpoint: exit 2, and its ERROR is recorded with its file's hash."""
        broken = tmp_path / "broken.pt"
        broken.write_bytes(b"not a checkpoint")
        assert evaluate_candidate(str(broken), with_production) == 2
        from evalsentry.storage import sha256_file

        stored = History(str(with_production / "store")).comparisons()
        assert stored[["kind", "verdict"]].values.tolist() == [["candidate", "ERROR"]]
        assert stored["checkpoint_sha256"].item() == sha256_file(broken)[0]
        assert stored["reason"].item().startswith("evaluation failed: ")

    def test_history_shows_versions_as_registered_and_none_for_a_file(
        self,
        with_production: Path,
        toy_checkpoints: dict[str, Path],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """The history table prints version 1, and `-` for a candidate file (not 1.0, nan)."""
        evaluate_candidate(str(toy_checkpoints["degraded"]), with_production)
        capsys.readouterr()
        assert main(["history", "--config", config(with_production), "--metric", "accuracy"]) == 0
        rows = [re.split(r" {2,}", line) for line in capsys.readouterr().out.splitlines()[3:]]
        assert sorted((row[1], row[3]) for row in rows) == [("candidate", "-"), ("scheduled", "1")]

    def test_the_ci_path_loads_neither_typer_nor_torch(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """`evalsentry evaluate` parses without Typer and leaves torch to the evaluation's process."""
        code = (
            "import sys; from evalsentry.cli import main;"
            f"rc = main(['evaluate', '--checkpoint', {str(toy_checkpoints['good'])!r},"
            f" '--model', 'toy-model', '--config', {config(with_production)!r}]);"
            "print(rc, sorted(m for m in ('typer', 'rich', 'torch') if m in sys.modules))"
        )
        # The trusted tests.models comes from PYTHONPATH: the working folder is never searched.
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        assert result.stdout.strip().splitlines()[-1] == "0 []"

    def test_equal_candidate_exits_0(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """The production checkpoint itself, as a candidate, passes."""
        code = evaluate_candidate(str(toy_checkpoints["good"]), with_production)
        assert code == 0

    def test_strict_candidate_exits_1_when_the_evalset_cannot_tell(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """300 rows cannot show the same model within half a point: exit 0, or 1 with --strict."""
        settings = with_production / "evalsentry.yaml"
        settings.write_text(
            settings.read_text() + "gate:\n  metrics:\n    accuracy: {max_drop: 0.005}\n"
        )
        assert evaluate_candidate(str(toy_checkpoints["good"]), with_production) == 0
        argv = ["evaluate", "--checkpoint", str(toy_checkpoints["good"]), "--model", "toy-model"]
        assert main([*argv, "--config", config(with_production), "--strict"]) == 1

    def test_an_unknown_model_exits_2_unless_it_is_declared_new(
        self,
        with_production: Path,
        toy_checkpoints: dict[str, Path],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """`--model toy-modle`: one line with a did-you-mean, nothing recorded; --new-model runs."""
        argv = ["evaluate", "--checkpoint", str(toy_checkpoints["good"]), "--model", "toy-modle"]
        argv += ["--config", config(with_production)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "model 'toy-modle' is neither registered nor in the history. Did you mean" in err
        assert "--new-model" in err
        assert History(str(with_production / "store")).evaluations(kind="candidate").empty
        assert main([*argv, "--new-model"]) == 0
        assert "no production result to compare with" in capsys.readouterr().out

    def test_a_candidate_as_bad_as_a_degraded_production_exits_1(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """Production degraded after its baseline week: the same checkpoint fails as a candidate."""
        record_production(with_production, toy_checkpoints["degraded"], 2, "2026-W41")
        assert evaluate_candidate(str(toy_checkpoints["degraded"]), with_production) == 1

    def test_broken_candidate_exits_2(self, with_production: Path, tmp_path: Path) -> None:
        """A candidate file that is not a checkpoint is unusable input."""
        junk = tmp_path / "junk.pt"
        junk.write_bytes(b"junk")
        assert evaluate_candidate(str(junk), with_production) == 2

    def test_a_manifest_narrowed_after_the_run_does_not_narrow_the_gate(
        self, with_production: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """``metrics:`` cut to top5 (always 1 on 3 classes) after a regression: still FAIL, exit 1.

        The edited manifest no longer matches its frozen pins, so the gate judges every metric
        the run recorded instead of trusting the edit.
        """
        record_production(with_production, toy_checkpoints["degraded"], 2, "2026-W41")
        edit(toy_evalset, metrics=["top5_accuracy"])
        assert main(["gate", "--week", "2026-W41", "--config", config(with_production)]) == 1


class TestCostAndReportCommands:
    def test_cost_by_week_and_model(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`cost` prints a row per group and a total; an unknown grouping is refused."""
        history = History(str(project / "store"))
        for week in ("2026-W40", "2026-W41"):
            record_week(
                history,
                week,
                accuracy_mask(N, 0.9),
                wall_s=1800.0,
                cost=1.5,
                energy_kwh=0.1,
                co2_kg=0.04,
                currency="USD",
            )
        assert main(["cost", "--config", config(project), "--by", "week"]) == 0
        out = capsys.readouterr().out
        assert "2026-W40" in out and "total" in out and "3.00 USD" in out
        assert main(["cost", "--config", config(project), "--by", "colour"]) == 2

    def test_report_writes_html_under_the_store(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`report` writes the week's self-contained HTML under the store by default."""
        drop_weeks(project)
        assert main(["report", "--config", config(project)]) == 0
        page = project / "store" / "reports" / "weekly-eval-2026-W42.html"
        assert page.is_file() and "<svg" in page.read_text()
        assert str(page) in capsys.readouterr().out
