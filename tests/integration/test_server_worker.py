"""A real Prefect server and process worker: deploy prefect.yaml, run weekly-eval, read it back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evalsentry.registry import Registry
from tests.integration.prefect_server import PREFECT, ROOT, prefect, read_run, trigger

pytestmark = pytest.mark.integration


def _run_week(env: dict[str, str], week: str, config: Path) -> dict[str, object]:
    flow_run_id = trigger(env, week, config)
    prefect(
        env, "worker", "start", "--pool", "gpu", "--run-once", "--type", "process", timeout=300
    )
    return read_run(env, flow_run_id)


def test_deployed_weekly_eval_runs_on_a_process_worker(
    server: dict[str, str], tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """A deployed weekly-eval run by a real worker completes, then fails on a promoted regression."""
    config = tmp_path / "evalsentry.yaml"
    config.write_text(f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n")
    registry = Registry(str(tmp_path / "registry"))
    registry.register(toy_checkpoints["good"], "toy-model", stage="production")

    first = _run_week(server, "2026-W40", config)
    assert first["name"] == "weekly-eval-2026-W40" and first["state"] == "COMPLETED", first
    assert {"weekly-eval-report", "weekly-eval-metrics", "weekly-eval-report-file"} <= set(
        first["artifacts"]
    )

    entry = registry.register(toy_checkpoints["degraded"], "toy-model")
    registry.promote("toy-model", entry.version, "production")
    second = _run_week(server, "2026-W41", config)
    assert second["state"] == "FAILED", second
    assert "toy-model@v2 on toy: accuracy vs previous-week" in str(second["message"])


def test_fan_out_runs_one_child_flow_per_checkpoint_on_the_workers(
    server: dict[str, str], tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """weekly-eval with fan_out: child evaluate-one runs on the pool's worker; the parent gathers and gates."""
    from evalsentry.history import History

    config = tmp_path / "evalsentry.yaml"
    config.write_text(f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n")
    registry = Registry(str(tmp_path / "registry"))
    registry.register(toy_checkpoints["good"], "good", stage="production")
    registry.register(toy_checkpoints["degraded"], "degraded", stage="production")
    flow_run_id = trigger(server, "2026-W40", config, "--param", "fan_out=true")
    worker = subprocess.Popen(
        [PREFECT, "worker", "start", "--pool", "gpu", "--type", "process"],
        env={**server, "PREFECT_WORKER_QUERY_SECONDS": "2"},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while (run := read_run(server, flow_run_id))["state"] not in (
            "COMPLETED",
            "FAILED",
            "CRASHED",
        ):
            assert time.monotonic() < deadline, run
            time.sleep(2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    assert run["state"] == "COMPLETED", run
    evaluations = History(str(tmp_path / "store")).evaluations()
    assert sorted(evaluations["model"]) == ["degraded", "good"]
    assert evaluations["run_id"].nunique() == 1  # the children recorded under the parent's run
