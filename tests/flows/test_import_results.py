"""The import-results flow under a real Prefect API, on real lm-eval and Inspect logs."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client

from evalsentry.flows.import_results import import_results
from evalsentry.history.store import History
from tests.flows.api import alerts_of, run_tags
from tests.unit.harnesses.conftest import harness_logs  # noqa: F401 - fixture: real harness logs

IMPORTS = """\
store: store
evalsets: evalsets
imports:
  sums-lm: {harness: lm-eval, results: results/lm}
  sums-inspect: {harness: inspect, results: "results/inspect/*"}
"""


def _markdown(flow_run_id: object) -> str:
    """The import-results artifact of the run."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
                )
            )

    (artifact,) = [a for a in asyncio.run(read()) if a.key == "import-results"]
    return str(artifact.data)


@pytest.fixture
def project(tmp_path: Path, harness_logs: Path) -> Path:  # noqa: F811 - the imported fixture
    """A project importing two lines, with each line's good run in its results folder."""
    (tmp_path / "evalsentry.yaml").write_text(IMPORTS)
    shutil.copytree(harness_logs / "lm" / "good", tmp_path / "results" / "lm" / "good")
    shutil.copytree(harness_logs / "inspect" / "good", tmp_path / "results" / "inspect" / "good")
    return tmp_path / "evalsentry.yaml"


def test_new_runs_are_imported_once_and_a_degraded_one_fails_the_week(
    project: Path,
    harness_logs: Path,  # noqa: F811 - the imported fixture
) -> None:
    """Week 1 imports the good runs; week 2 imports the new two and fails on the worse one;
    running week 2 again imports nothing and ends the same way."""
    first = import_results(week="2026-W40", config_path=str(project), return_state=True)
    assert first.is_completed(), first.message
    assert run_tags(first.state_details.flow_run_id) == {
        "week:2026-W40",
        "model:sums-inspect",
        "model:sums-lm",
    }
    results = project.parent / "results"
    shutil.copytree(harness_logs / "lm" / "same", results / "lm" / "same")
    shutil.copytree(harness_logs / "inspect" / "worse", results / "inspect" / "worse")

    second = import_results(week="2026-W41", config_path=str(project), return_state=True)
    assert second.is_failed()
    assert second.message.startswith(
        "2026-W41: FAIL sums-inspect@v2 on inspect.arith score:match -0.5"
    )
    assert "sums-lm" not in second.message.split(" | ")[0]
    # Its one alert says what the headline says: the gate's FAIL, its line, its worst row.
    (alert,) = alerts_of(second, "2026-W41")
    assert alert.payload["gate"] == "FAIL" and alert.payload["models"] == ["sums-inspect"]
    assert alert.payload["counts"]["FAIL"] >= 1 and alert.payload["counts"].get("ERROR", 0) == 0
    assert alert.payload["worst"][0]["model"] == "sums-inspect"
    store = History(str(project.parent / "store"))
    week = store.evaluations(weeks=["2026-W41"])
    assert sorted(week["model"]) == ["sums-inspect", "sums-lm"]
    markdown = _markdown(second.state_details.flow_run_id)
    assert "2 imported, 2 skipped, 0 refused" in markdown
    assert "skipped: already in the history" in markdown and "/same/" in markdown

    again = import_results(week="2026-W41", config_path=str(project), return_state=True)
    assert again.is_failed() and again.message == second.message
    assert len(store.evaluations(include_superseded=True)) == 4
    assert "0 imported, 4 skipped, 0 refused" in _markdown(again.state_details.flow_run_id)


def test_a_line_whose_folder_holds_no_run_fails_the_run_naming_it(tmp_path: Path) -> None:
    """Nothing found where a line's results should be is an ERROR naming the line and field."""
    (tmp_path / "evalsentry.yaml").write_text(
        "store: store\nimports:\n  sums-lm: {harness: lm-eval, results: nowhere}\n"
    )
    state = import_results(
        week="2026-W41", config_path=str(tmp_path / "evalsentry.yaml"), return_state=True
    )
    assert state.is_failed()
    assert "sums-lm" in state.message and "imports.sums-lm.results" in state.message


def test_a_project_without_imports_completes_and_sends_nothing(tmp_path: Path) -> None:
    """The deployed import-results of a project that imports nothing: Completed, saying so, no
    alert every Monday; asking it for a line by name is still an ERROR."""
    config = tmp_path / "evalsentry.yaml"
    config.write_text("store: store\n")
    state = import_results(week="2026-W40", config_path=str(config), return_state=True)
    assert state.is_completed(), state.message
    assert state.message == (
        "2026-W40: nothing configured: evalsentry.yaml lists no imports:; weekly-eval "
        "evaluates this project's checkpoints"
    )
    assert alerts_of(state, "2026-W40", expect=False) == []
    asked = import_results(
        week="2026-W40", models=["chat"], config_path=str(config), return_state=True
    )
    assert asked.is_failed() and asked.message.startswith("2026-W40: ERROR nothing to import")


def test_a_flow_imported_from_python_gets_the_command_lines_settings() -> None:
    """Importing a flow in a bare Python process (no PREFECT_API_URL) turns Prefect's telemetry
    off and gives its temporary server time to start, as `evalsentry run` does, as Prefect
    itself reads its settings (without the flows: True, 20)."""
    import os
    import subprocess
    import sys

    bare = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    bare.pop("DO_NOT_TRACK", None)
    code = (
        "import evalsentry.flows.import_results\n"
        "from prefect.settings import get_current_settings\n"
        "s = get_current_settings()\n"
        "print(s.server.analytics_enabled, s.server.ephemeral.startup_timeout_seconds)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=bare, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "120"]
