"""`gate --github` and `evaluate --github`: job summary, annotations and the PR comment file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.history.store import History
from tests.models import TRUSTED_YAML
from tests.unit.cli.test_cli_gate import config, drop_weeks, record_production

ROOT = Path(__file__).parents[3]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose config points at its own store."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n" + TRUSTED_YAML)
    return tmp_path


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GitHub Actions' variables, pointing at files of a runner folder; returns that folder.

    The step summary already holds an earlier command's text, as a step's file may.
    """
    folder = tmp_path / "runner"
    (folder / "temp").mkdir(parents=True)
    (folder / "summary.md").write_text("earlier step output\n")
    for name, value in {
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(folder / "summary.md"),
        "RUNNER_TEMP": str(folder / "temp"),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "acme/models",
        "GITHUB_RUN_ID": "4242",
    }.items():
        monkeypatch.setenv(name, value)
    return folder


def annotations(out: str) -> list[str]:
    """The workflow command lines of a command's output."""
    return [line for line in out.splitlines() if line.startswith("::")]


class TestGateOnGitHub:
    def test_a_regression_writes_summary_annotations_and_comment(
        self, project: Path, runner: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """GITHUB_ACTIONS=true: the verdict is appended to the summary, errors annotated, and
        the comment written to $RUNNER_TEMP with its marker; the exit code is the gate's."""
        drop_weeks(project)
        url = "https://github.com/acme/models/actions/runs/4242#artifacts"
        assert main(["gate", "--config", config(project), "--report-url", url]) == 1
        out = capsys.readouterr().out
        summary = (runner / "summary.md").read_text()
        assert summary.startswith("earlier step output\n## ❌ FAIL · evalsentry: 2026-W42 gate\n")
        assert f"[HTML report and JUnit]({url})" in summary
        assert "Flips: m@v2 on toy vs previous-week (v1, 2026-W41): 45 newly wrong" in summary
        assert "`ex-00000`" in summary
        errors = annotations(out)
        assert len(errors) == 4 and all(
            e.startswith("::error title=evalsentry FAIL") for e in errors
        )
        comment = (runner / "temp" / "pr-comment.md").read_text()
        assert comment.startswith("<!-- evalsentry-gate -->\n## ❌ FAIL")
        assert "[this run](https://github.com/acme/models/actions/runs/4242)" in comment
        assert f"job summary: appended to {runner / 'summary.md'}" in out
        assert f"comment: {runner / 'temp' / 'pr-comment.md'}" in out

    def test_no_github_turns_it_off_and_outside_actions_it_is_off(
        self, project: Path, runner: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--no-github writes no summary, annotation or comment; neither does a plain run."""
        drop_weeks(project)
        assert main(["gate", "--config", config(project), "--no-github"]) == 1
        assert (runner / "summary.md").read_text() == "earlier step output\n"
        assert not (runner / "temp" / "pr-comment.md").exists()
        assert annotations(capsys.readouterr().out) == []
        os.environ.pop("GITHUB_ACTIONS")
        assert main(["gate", "--config", config(project)]) == 1
        assert not (runner / "temp" / "pr-comment.md").exists()

    def test_github_by_hand_writes_the_comment_where_asked_or_here(
        self,
        project: Path,
        chdir_tmp: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--github without a runner: no summary (said so), the comment in the working folder;
        --comment names another file; a PASS is annotated with nothing."""
        drop_weeks(project)
        assert main(["gate", "--config", config(project), "--github", "--model", "m"]) == 1
        out = capsys.readouterr().out
        assert "job summary: not written (GITHUB_STEP_SUMMARY is not set)" in out
        assert (chdir_tmp / "pr-comment.md").read_text().startswith("<!-- evalsentry-gate:m -->")
        mine = project / "out" / "note.md"
        argv = ["gate", "--config", config(project), "--week", "2026-W41", "--comment", str(mine)]
        assert main(argv) == 0
        assert mine.read_text().startswith("<!-- evalsentry-gate -->\n## ✅ PASS")
        assert annotations(capsys.readouterr().out) == []

    def test_a_gate_that_cannot_run_says_so_in_summary_annotation_and_comment(
        self, project: Path, runner: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No history yet: exit 2 with its one line, and the PR sees an ERROR, not silence."""
        assert main(["gate", "--config", config(project)]) == 2
        out, err = capsys.readouterr()
        assert err.startswith("error: ") and err.count("\n") == 1
        (annotation,) = annotations(out)
        assert annotation.startswith("::error title=evalsentry ERROR%3A gate::")
        assert "holds no weekly evaluation yet" in annotation
        summary = (runner / "summary.md").read_text()
        assert "## ⛔ ERROR · evalsentry: gate\n\n**Not evaluated: " in summary
        comment = (runner / "temp" / "pr-comment.md").read_text()
        assert comment.startswith("<!-- evalsentry-gate -->\n## ⛔ ERROR")

    def test_an_unwritable_step_summary_is_one_line_and_exit_2(
        self, project: Path, runner: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """GITHUB_STEP_SUMMARY naming a folder: one line naming it, exit 2, not the gate's 1."""
        drop_weeks(project)
        os.environ["GITHUB_STEP_SUMMARY"] = str(runner)
        assert main(["gate", "--config", config(project)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: GITHUB_STEP_SUMMARY {runner}: cannot append")
        assert err.count("\n") == 1 and "--no-github" in err

    def test_the_gate_on_github_loads_no_heavy_module(self, project: Path, runner: Path) -> None:
        """`gate --github` stays on the lean path: no torch, GX, Prefect, scipy, Typer or Rich."""
        drop_weeks(project)
        code = (
            "import sys; from evalsentry.cli import main;"
            f"rc = main(['gate', '--config', {config(project)!r}]);"
            "heavy = ('torch', 'great_expectations', 'prefect', 'scipy', 'typer', 'rich');"
            "print('LOADED', sorted(m for m in heavy if m in sys.modules), 'EXIT', rc)"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert result.stdout.splitlines()[-1] == "LOADED [] EXIT 1"
        assert "evalsentry-gate" in (runner / "temp" / "pr-comment.md").read_text()


class TestEvaluateOnGitHub:
    @pytest.fixture
    def with_production(
        self, project: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
    ) -> Path:
        """A project whose history holds one production result of the good toy checkpoint."""
        record_production(project, toy_checkpoints["good"], 1, "2026-W40")
        return project

    def test_a_worse_candidate_fails_with_html_flips_and_its_models_comment(
        self,
        with_production: Path,
        toy_checkpoints: dict[str, Path],
        runner: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A degraded candidate: exit 1; the HTML report, summary and comment name the flipped
        examples against production; the comment's marker is the model line's."""
        html = runner / "out" / "report.html"
        argv = ["evaluate", "--checkpoint", str(toy_checkpoints["degraded"]), "--model"]
        argv += ["toy-model", "--config", config(with_production), "--html", str(html)]
        assert main(argv) == 1
        out = capsys.readouterr().out
        page = html.read_text()
        assert "<h1>evalsentry candidate toy-model: " in page and ">FAIL</span>" in page
        assert "Flipped examples" in page and "vs production (v1, 2026-W40)" in page
        history = History(str(with_production / "store"))
        candidate = history.evaluations(kind="candidate")["checkpoint_sha256"].item()
        assert candidate in page
        summary = (runner / "summary.md").read_text()
        assert "## ❌ FAIL · evalsentry: toy-model candidate degraded.pt" in summary
        assert (
            f"toy-model (candidate {candidate[:8]}) on toy vs production (v1, 2026-W40)" in summary
        )
        comment = (runner / "temp" / "pr-comment.md").read_text()
        assert comment.startswith("<!-- evalsentry:toy-model -->\n## ❌ FAIL")
        assert any(a.startswith("::error title=evalsentry FAIL") for a in annotations(out))

    def test_a_candidate_that_cannot_run_replaces_the_comment_with_an_error(
        self, with_production: Path, tmp_path: Path, runner: Path
    ) -> None:
        """A file that is no checkpoint: exit 2, and the model's comment says ERROR, so an
        earlier push's PASS is not left standing."""
        comment = runner / "temp" / "pr-comment.md"
        comment.write_text("<!-- evalsentry:toy-model -->\n## ✅ PASS from the last push\n")
        broken = tmp_path / "broken.pt"
        broken.write_bytes(b"not a checkpoint")
        argv = ["evaluate", "--checkpoint", str(broken), "--model", "toy-model"]
        assert main([*argv, "--config", config(with_production)]) == 2
        text = comment.read_text()
        assert text.startswith("<!-- evalsentry:toy-model -->\n## ⛔ ERROR")
        assert "broken.pt on toy" in text and "PASS" not in text
