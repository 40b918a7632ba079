"""A real Prefect server and process worker: deploy prefect.yaml, run weekly-eval, read it back."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsentry.registry import Registry

ROOT = Path(__file__).parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
STARTUP_TIMEOUT_S = 120

pytestmark = pytest.mark.integration

READ_RUN = """
import json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
with get_client(sync_client=True) as client:
    run = client.read_flow_run(sys.argv[1])
    artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
    print(json.dumps({"name": run.name, "state": run.state.type.value, "message": run.state.message,
                      "artifacts": sorted(a.key or a.type for a in artifacts)}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`prefect server start` on a free loopback port, with prefect.yaml deployed; stopped by pid."""
    tmp_path = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "EVALSENTRY_PROJECT_DIR": str(ROOT),
    }
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/health", timeout=2
                ) as response:
                    if response.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"prefect server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}"
                    )
                time.sleep(0.5)
        _prefect(env, "work-pool", "create", "gpu", "--type", "process")
        _prefect(env, "--no-prompt", "deploy", "--all")
        yield env
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


def _prefect(env: dict[str, str], *args: str, timeout: int = 180) -> str:
    result = subprocess.run(
        [PREFECT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"prefect {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _trigger(env: dict[str, str], week: str, config: Path, *extra: str) -> str:
    out = _prefect(
        env,
        "deployment",
        "run",
        "weekly-eval/weekly-eval",
        "--param",
        f"week={week}",
        "--param",
        f"config={config}",
        *extra,
    )
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    assert match, out
    return match.group(1)


def _read_run(env: dict[str, str], flow_run_id: str) -> dict[str, object]:
    read = subprocess.run(
        [sys.executable, "-c", READ_RUN, flow_run_id],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(read.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _run_week(env: dict[str, str], week: str, config: Path) -> dict[str, object]:
    flow_run_id = _trigger(env, week, config)
    _prefect(
        env, "worker", "start", "--pool", "gpu", "--run-once", "--type", "process", timeout=300
    )
    return _read_run(env, flow_run_id)


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
    flow_run_id = _trigger(server, "2026-W40", config, "--param", "fan_out=true")
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
        while (run := _read_run(server, flow_run_id))["state"] not in (
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
