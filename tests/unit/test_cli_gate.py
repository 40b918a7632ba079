"""gate, evaluate, history and baseline through the CLI: exit codes and CI outputs."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evalsets import load_evalset
from evalsentry.history import History
from evalsentry.pipeline import Target, evaluate_checkpoint, record
from tests.synthetic import accuracy_mask, record_week

N = 1000


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose config points at its own store."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n")
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

    def test_gate_imports_neither_torch_nor_gx_nor_prefect(self, project: Path) -> None:
        """The gate reads the history only; heavy frameworks stay unloaded."""
        drop_weeks(project)
        code = (
            "import sys; from evalsentry.cli import main;"
            f"rc = main(['gate', '--config', {config(project)!r}]);"
            "print(rc, sorted(m for m in ('torch', 'great_expectations', 'prefect') if m in sys.modules))"
        )
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parents[2],
        )
        assert result.stdout.strip().splitlines()[-1] == "1 []"


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
        (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n")
        settings = load_config(tmp_path / "evalsentry.yaml")
        outcome = evaluate_checkpoint(
            Target("toy-model", str(toy_checkpoints["good"]), 1, "production"),
            load_evalset(toy_evalset),
            config=settings,
            run_id="r1",
            week="2026-W40",
        )
        record(History(settings.store_url), [outcome])
        return tmp_path

    def test_degraded_candidate_exits_1_and_is_recorded_as_candidate(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """A worse candidate fails against production and never becomes a production result."""
        code = evaluate_candidate(str(toy_checkpoints["degraded"]), with_production)
        assert code == 1
        frame = History(str(with_production / "store")).evaluations()
        candidate = frame[frame["kind"] == "candidate"]
        assert len(candidate) == 1 and candidate["stage"].item() == "candidate"
        assert (frame[frame["kind"] == "scheduled"]["stage"] == "production").all()

    def test_equal_candidate_exits_0(
        self, with_production: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """The production checkpoint itself, as a candidate, passes."""
        code = evaluate_candidate(str(toy_checkpoints["good"]), with_production)
        assert code == 0

    def test_broken_candidate_exits_2(self, with_production: Path, tmp_path: Path) -> None:
        """A candidate file that is not a checkpoint is unusable input."""
        junk = tmp_path / "junk.pt"
        junk.write_bytes(b"junk")
        assert evaluate_candidate(str(junk), with_production) == 2


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
        assert "2026-W40" in out and "total" in out and "3 USD" in out
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
