"""The weekly flow under a real Prefect API: states, messages, artifacts, failure isolation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from prefect.client.orchestration import get_client

from evalsentry.config import load_config
from evalsentry.history import History
from evalsentry.registry import Registry
from flows.evaluate_candidate import evaluate_candidate
from flows.weekly_eval import weekly_eval
from tasks.evaluate import evaluate, on_device
from tests.flows.api import task_runs


def history(config: Path) -> History:
    """The history the project writes to."""
    return History(load_config(config).store_url)


async def _artifacts(flow_run_id: object) -> dict[str, list[Any]]:
    """The run's artifacts by key (by type for unkeyed ones, like progress)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    found: dict[str, list[Any]] = {}
    for artifact in artifacts:
        found.setdefault(artifact.key or str(artifact.type), []).append(artifact)
    return found


def test_inference_is_tagged_gpu_only_on_cuda() -> None:
    """A CUDA device gets the ``gpu`` tag (for a tag concurrency limit); the CPU gets none."""
    assert on_device(evaluate, "cuda:1").tags == {"gpu"}
    assert on_device(evaluate, "cpu").tags == set()
    assert on_device(evaluate, "auto").tags == ({"gpu"} if torch.cuda.is_available() else set())


class TestWeeklyEval:
    def test_weeks_pass_then_a_promoted_regression_fails_the_run(
        self, toy_project: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """Baseline, same model (Completed), then a degraded promotion: Failed, naming the drop."""
        first = weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        second = weekly_eval(week="2026-W41", config=str(toy_project), return_state=True)
        registry = Registry(load_config(toy_project).registry_url)
        entry = registry.register(toy_checkpoints["degraded"], "toy-model")
        registry.promote("toy-model", entry.version, "production")
        third = weekly_eval(week="2026-W42", config=str(toy_project), return_state=True)
        assert (first.is_completed(), second.is_completed(), third.is_failed()) == (
            True,
            True,
            True,
        )
        assert first.name == "Completed" and "regression" in third.message
        assert "toy-model@v2 on toy: accuracy vs previous-week" in third.message
        assert "flips -" in third.message and "p=" in third.message
        frame = history(toy_project).evaluations()
        assert frame["week"].tolist() == ["2026-W40", "2026-W41", "2026-W42"]

    def test_run_is_named_after_the_week_and_publishes_artifacts(self, toy_project: Path) -> None:
        """The run name carries the week; report, table, link and progress artifacts exist.

        Progress is throttled to one update a second, but every inference's ends at 100%. The
        inference task takes a ``gpu`` slot only on CUDA.
        """
        state = weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        flow_run_id = state.state_details.flow_run_id

        async def name() -> str:
            async with get_client() as client:
                return (await client.read_flow_run(flow_run_id)).name

        assert asyncio.run(name()) == "weekly-eval-2026-W40"
        artifacts = asyncio.run(_artifacts(flow_run_id))
        assert {
            "weekly-eval-report",
            "weekly-eval-metrics",
            "weekly-eval-report-file",
            "progress",
        } <= set(artifacts)
        assert {a.data for a in artifacts["progress"]} == {100.0}
        inference = [r for r in task_runs(flow_run_id) if r.name.startswith("evaluate-")]
        assert len(inference) == 1
        assert set(inference[0].tags) == ({"gpu"} if torch.cuda.is_available() else set())
        report = Path(load_config(toy_project).store_url) / "reports" / "weekly-eval-2026-W40.md"
        assert "### Lineage and cost" in report.read_text()

    def test_invalid_evalset_fails_before_any_inference(
        self, toy_project: Path, toy_evalset: Path
    ) -> None:
        """A tampered evalset ends the run Failed, names the file, and writes no evaluation."""
        data = toy_evalset / "data" / "part-000.parquet"
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
        state = weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        assert state.is_failed()
        assert "evalset invalid" in state.message and "part-000.parquet" in state.message
        assert "ERROR every checkpoint on toy" in state.message
        assert history(toy_project).evaluations().empty

    def test_corrupt_checkpoint_is_an_error_row_and_the_others_complete(
        self, toy_project: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """One broken checkpoint fails itself: an ERROR naming it, the other model still evaluated."""
        broken = tmp_path / "broken.pt"
        broken.write_bytes(toy_checkpoints["good"].read_bytes())
        Registry(load_config(toy_project).registry_url).register(
            broken, "other-model", stage="production"
        )
        broken.write_bytes(broken.read_bytes()[:200])
        state = weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        assert state.is_failed()
        assert "other-model" in state.message and "evaluation failed" in state.message
        frame = history(toy_project).evaluations().set_index("model")
        assert frame.loc["toy-model", "status"] == "ok"
        assert frame.loc["other-model", "status"] == "error"
        assert "changed since registration" in frame.loc["other-model", "error"]


class TestEvaluateCandidate:
    def test_candidate_flow_gates_against_production(
        self, toy_project: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """The flow twin of `evalsentry evaluate`: a worse candidate fails, a good one passes."""
        weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        bad = evaluate_candidate(
            checkpoint=str(toy_checkpoints["degraded"]),
            model="toy-model",
            config=str(toy_project),
            return_state=True,
        )
        good = evaluate_candidate(
            checkpoint=str(toy_checkpoints["good"]),
            model="toy-model",
            config=str(toy_project),
            return_state=True,
        )
        assert bad.is_failed() and "vs production" in bad.message
        assert good.is_completed()
        kinds = history(toy_project).evaluations()["kind"].value_counts().to_dict()
        assert kinds == {"scheduled": 1, "candidate": 2}


@pytest.mark.parametrize("week", ["2026-49", "W49"])
def test_malformed_week_is_refused(toy_project: Path, week: str) -> None:
    """A backfill week that is not an ISO week is refused before anything runs."""
    state = weekly_eval(week=week, config=str(toy_project), return_state=True)
    assert state.is_failed() and "ISO week" in state.message


class TestDrift:
    @staticmethod
    def shifted_live_sample(toy_evalset: Path, tmp_path: Path) -> Path:
        """The toy inputs moved by +1.5 on every feature: drift that cannot be missed."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from evalsentry.evalsets import load_evalset

        values = load_evalset(toy_evalset).inputs.numpy().reshape(-1) + 1.5
        path = tmp_path / "live.parquet"
        pq.write_table(
            pa.table(
                {"x": pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.float32)), 4)}
            ),
            path,
        )
        return path

    def test_drift_is_recorded_reported_and_does_not_fail_by_default(
        self, toy_project: Path, toy_evalset: Path, tmp_path: Path
    ) -> None:
        """A shifted live sample yields drift rows and an HTML report; the run still completes."""
        live = self.shifted_live_sample(toy_evalset, tmp_path)
        toy_project.write_text(toy_project.read_text() + f"drift:\n  live:\n    toy: {live}\n")
        state = weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        assert state.is_completed()
        drift = history(toy_project).drift()
        assert set(drift["kind"]) == {"input", "prediction"}
        assert (drift["verdict"] == "FAIL").any()
        reports = Path(load_config(toy_project).store_url) / "reports"
        assert "Live-data drift" in (reports / "weekly-eval-2026-W40.html").read_text()
        assert (reports / "weekly-eval-2026-W40.md").read_text().count("### Live-data drift") == 1

    def test_drift_can_fail_the_run(
        self, toy_project: Path, toy_evalset: Path, tmp_path: Path
    ) -> None:
        """With drift.fail_run, FAIL-level drift ends the run Failed, naming the feature."""
        live = self.shifted_live_sample(toy_evalset, tmp_path)
        toy_project.write_text(
            toy_project.read_text() + f"drift:\n  fail_run: true\n  live:\n    toy: {live}\n"
        )
        state = weekly_eval(week="2026-W40", config=str(toy_project), return_state=True)
        assert state.is_failed() and "DRIFT toy" in state.message
