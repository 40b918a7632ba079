"""harnesses.pickup on real harness logs: new runs found, known ones skipped, bad config refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.harnesses.pickup import IMPORT, REFUSED, SKIPPED, import_found, plan_imports
from evalsentry.history.store import History

IMPORTS = "store: store\nimports:\n  sums: {harness: lm-eval, results: 'results/*'}\n"


@pytest.fixture
def lm_project(tmp_path: Path, harness_logs: Path) -> Path:
    """A project importing the line ``sums`` from ``results/*``, holding the good lm-eval run."""
    (tmp_path / "evalsentry.yaml").write_text(IMPORTS)
    shutil.copytree(harness_logs / "lm" / "good", tmp_path / "results" / "good")
    return tmp_path / "evalsentry.yaml"


class TestPickupCommand:
    def test_the_command_picks_up_as_the_flow_does(
        self, lm_project: Path, harness_logs: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`evalsentry import pickup`: the good run, then the worse one a week later (FAIL,
        exit 1), then nothing new (the known runs skipped; the week gated again, the same)."""
        config = ["--config", str(lm_project)]
        assert main(["import", "pickup", "--week", "2026-W40", *config]) == 0
        out = capsys.readouterr().out
        assert "imported sums@v1 on lm-eval.evalsentry_arith: 40 examples" in out
        assert out.splitlines()[-1].startswith("2026-W40: BASELINE")
        shutil.copytree(harness_logs / "lm" / "worse", lm_project.parent / "results" / "worse")
        assert main(["import", "pickup", "--week", "2026-W41", *config]) == 1
        out = capsys.readouterr().out
        assert "imported sums@v2" in out and "skipped sums:" in out
        assert out.splitlines()[-1].startswith("2026-W41: FAIL sums@v2")
        assert main(["import", "pickup", "--week", "2026-W41", *config]) == 1
        out = capsys.readouterr().out
        assert "imported" not in out and out.count("skipped sums:") == 2

    def test_a_project_without_imports_is_told_what_to_add(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No imports: one line, exit 2, nothing recorded."""
        (tmp_path / "evalsentry.yaml").write_text("store: store\n")
        assert main(["import", "pickup", "--config", str(tmp_path / "evalsentry.yaml")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "imports: lists no line" in err


class TestPlanImports:
    def test_a_run_imported_by_hand_is_not_imported_again(
        self, lm_project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A run `evalsentry import` recorded is skipped: it is known by content, not path."""
        config = load_config(lm_project)
        (found,) = plan_imports(History(config.store_url), config)
        assert found.action == IMPORT
        folder = str(lm_project.parent / "results" / "good")
        args = ["import", "lm-eval", folder, "--model", "sums", "--week", "2026-W40"]
        assert main([*args, "--config", str(lm_project)]) == 0
        capsys.readouterr()
        (again,) = plan_imports(History(config.store_url), config)
        assert again.action == SKIPPED and "already in the history" in again.reason

    def test_of_two_new_runs_the_newest_is_the_weeks(
        self, lm_project: Path, harness_logs: Path
    ) -> None:
        """Two new runs of a line: the later one is imported, the other skipped with the fix."""
        shutil.copytree(harness_logs / "lm" / "worse", lm_project.parent / "results" / "worse")
        config = load_config(lm_project)
        history = History(config.store_url)
        found = {Path(f.source).parts[-3]: f for f in plan_imports(history, config)}
        assert found["worse"].action == IMPORT
        assert found["good"].action == SKIPPED and "--week" in found["good"].reason
        imported = import_found(history, found["worse"], config, "2026-W41")
        assert (imported.line, imported.version, imported.n_examples) == ("sums", 1, 40)
        assert {f.action for f in plan_imports(history, config)} == {SKIPPED}

    def test_a_pattern_matching_nothing_is_refused_naming_the_field(self, tmp_path: Path) -> None:
        """No run where a line's results should be is refused, naming imports.<line>.results."""
        (tmp_path / "evalsentry.yaml").write_text(IMPORTS)
        config = load_config(tmp_path / "evalsentry.yaml")
        (found,) = plan_imports(History(config.store_url), config)
        assert found.action == REFUSED and "imports.sums.results" in found.reason


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ("{harness: lm-evl, results: r}", "imports.sums.harness"),
        ("{harness: inspect, results: r, filter: x}", "imports.sums.filter"),
        ("{harness: inspect}", "imports.sums.results"),
        ("{harness: inspect, results: r, evalset: ../x}", "imports.sums.evalset"),
        ("{harness: lm-eval, results: r, task: [a, b], evalset: x}", "imports.sums.evalset"),
    ],
)
def test_a_bad_imports_entry_exits_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, field: str
) -> None:
    """A malformed imports: entry is one line naming the file and the field; exit 2."""
    config = tmp_path / "evalsentry.yaml"
    config.write_text(f"store: store\nimports:\n  sums: {entry}\n")
    assert main(["gate", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{config}: {field}:" in err and len(err.splitlines()) == 1


def test_an_errored_run_fails_its_week_and_no_later_one(
    tmp_path: Path, harness_logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Inspect log that ended in an error, left in the folder: the week that finds it with
    nothing newer is not imported (exit 2, naming it); once a newer run is imported it is
    skipped, naming it, and the week passes."""
    import os
    from datetime import UTC, datetime, timedelta

    from inspect_ai.log import read_eval_log, write_eval_log

    config = tmp_path / "evalsentry.yaml"
    config.write_text("store: store\nimports:\n  sums: {harness: inspect, results: logs}\n")
    logs = harness_logs / "inspect"
    shutil.copytree(logs / "good", tmp_path / "logs" / "good")
    assert main(["import", "pickup", "--week", "2026-W40", "--config", str(config)]) == 0
    good = read_eval_log(str(next((logs / "good").glob("*.eval"))), header_only=True).stats
    ended = datetime.fromisoformat(good.completed_at)
    errored = read_eval_log(str(next((logs / "same").glob("*.eval"))))
    errored.status = "error"
    # After the imported run, whatever the clock said when the logs were made (to the second).
    errored.stats.completed_at = (ended + timedelta(minutes=1)).isoformat()
    write_eval_log(errored, str(tmp_path / "logs" / "errored.eval"))
    capsys.readouterr()
    assert main(["import", "pickup", "--week", "2026-W41", "--config", str(config)]) == 2
    out = capsys.readouterr().out
    assert "not imported sums: " in out and "errored.eval: status: the run ended 'error'" in out
    assert out.count("errored.eval") == 1
    newer = read_eval_log(str(next((logs / "same").glob("*.eval"))))
    assert newer.stats is not None
    newer.stats.completed_at = (ended + timedelta(minutes=2)).isoformat()
    write_eval_log(newer, str(tmp_path / "logs" / "newer.eval"))
    # Copied again meanwhile (a sync, a download): the file is new, the run it logs is not.
    later = (datetime.now(UTC) + timedelta(days=1)).timestamp()
    os.utime(tmp_path / "logs" / "errored.eval", (later, later))
    assert main(["import", "pickup", "--week", "2026-W42", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "imported sums@v1" in out and "not imported" not in out
    assert "(status: the run ended 'error', not 'success'; re-run the task with inspect_ai" in out
    assert "and older than the line's newest imported run" in out
    assert out.splitlines()[-1].startswith("2026-W42: PASS")
