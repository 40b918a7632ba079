"""Several tasks of one lm-eval run, and a task group, imported and gated (real lm-eval runs)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from evalsentry.cli import main
from tests.unit.harnesses.test_import import history, import_lm, run

GROUP, TASKS = "evalsentry_math", ("evalsentry_arith", "evalsentry_arith_words")


def group_run(logs: Path, version: str) -> str:
    return str(logs / "lm" / f"group-{version}")


def reported(folder: str, task: str) -> float:
    results = json.loads(next(Path(folder).rglob("results_*.json")).read_text())
    return float(results["results"][task]["acc,none"])


def test_a_group_is_one_evalset_gated_with_its_subtasks_as_slices(
    harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The group's 80 documents as one evalset, its score lm-eval's own group score; the
    degraded version FAILs, and --slices shows each subtask in the family."""
    for version, week in (("good", "2026-W40"), ("worse", "2026-W41")):
        folder = group_run(harness_logs, version)
        code, out, err = import_lm(capsys, project, folder, week, "--task", GROUP)
        assert code == 0, err
        assert f"on lm-eval.{GROUP} in {week}: 80 examples, score:acc " in out
        assert f"score:acc {reported(folder, GROUP):.4f}" in out
    code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--slices", "--config", str(project))
    assert code == 1 and "FAIL" in out and f"lm-eval.{GROUP}" in out
    assert all(f"score:acc [task={task}]" in out for task in TASKS)
    metrics = history(project).metrics(history(project).evaluations()["evaluation_id"])
    assert {f"task={task}" for task in TASKS} <= set(metrics["slice"])
    page = project.parent / "report.html"
    code, _, err = run(capsys, "report", "--week", "2026-W41", "--out", str(page), "--config", str(project))  # fmt: skip
    assert code == 0, err
    assert re.search(r"<td>evalsentry_arith(_words)? doc \d+</td><td>What is ", page.read_text())


def test_several_tasks_are_one_evalset_each(
    harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--task twice: each task its own evalset of 40, all recorded or none."""
    args = [arg for task in TASKS for arg in ("--task", task)]
    for version, week in (("good", "2026-W40"), ("worse", "2026-W41")):
        code, out, err = import_lm(capsys, project, group_run(harness_logs, version), week, *args)
        assert code == 0, err
        assert all(f"on lm-eval.{task} in {week}: 40 examples" in out for task in TASKS)
    code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
    assert code == 1 and all(f"lm-eval.{task}" in out for task in TASKS)
    code, _, err = import_lm(capsys, project, group_run(harness_logs, "good"), "2026-W42", *args, "--evalset", "x")  # fmt: skip
    assert code == 2 and "--evalset names one evalset" in err
    assert len(history(project).evaluations()) == 4


def test_a_group_lm_eval_scores_otherwise_is_refused(
    harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group score that is not the mean over its documents (lm-eval's weight_by_size: false
    averages the subtasks): refused naming both numbers and the fix; nothing recorded."""
    folder = tmp_path / "run"
    shutil.copytree(group_run(harness_logs, "worse"), folder)
    results_path = next(folder.rglob("results_*.json"))
    results = json.loads(results_path.read_text())
    results["results"][GROUP]["acc,none"] = 0.6
    results_path.write_text(json.dumps(results))
    code, _, err = import_lm(capsys, project, str(folder), "2026-W40", "--task", GROUP)
    assert code == 2 and err.count("\n") == 1
    assert f"results.{GROUP}.acc: lm-eval reports 0.6000, the mean over the group's" in err
    assert "import its subtasks one by one" in err
    assert history(project).evaluations().empty


def test_the_pickup_follows_several_tasks_of_a_line(
    harness_logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """imports.<line>.task as a list: each task of the new run imported, then gated."""
    config = tmp_path / "evalsentry.yaml"
    tasks = ", ".join(TASKS)
    config.write_text(
        f"store: store\nimports:\n  sums: {{harness: lm-eval, results: runs, task: [{tasks}]}}\n"
    )
    shutil.copytree(group_run(harness_logs, "good"), tmp_path / "runs" / "good")
    assert main(["import", "pickup", "--week", "2026-W40", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert all(f"imported sums@v1 on lm-eval.{task}: 40 examples" in out for task in TASKS)
    assert main(["import", "pickup", "--week", "2026-W40", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert all(f"(lm-eval.{task}): already in the history" in out for task in TASKS)


def test_a_group_lm_eval_reports_no_score_for_is_gated_on_its_documents_and_said(
    harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group lm-eval gives no score (no aggregate_metric_list): the documents' mean, said."""
    folder = tmp_path / "run"
    shutil.copytree(group_run(harness_logs, "worse"), folder)
    results_path = next(folder.rglob("results_*.json"))
    results = json.loads(results_path.read_text())
    del results["results"][GROUP]["acc,none"]
    results_path.write_text(json.dumps(results))
    code, out, err = import_lm(capsys, project, str(folder), "2026-W40", "--task", GROUP)
    assert code == 0, err
    assert "80 examples, score:acc 0.5625" in out
    assert (
        f"note: lm-eval reports no acc for the group {GROUP}: the mean over its documents is gated"
        in out
    )
