"""A real `prefect server` for integration tests, and the CLI calls the tests make against it."""

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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
STARTUP_TIMEOUT_S = 120
#: The server's log file, in the env a test gets, for failure messages.
SERVER_LOG = "EVALSENTRY_TEST_SERVER_LOG"
#: The shared server's worker (tests/integration/conftest.py), and its log file in the env.
SHARED_WORKER = "shared"
WORKER_LOG = "EVALSENTRY_TEST_WORKER_LOG"

READ_RUN = """
import json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
with get_client(sync_client=True) as client:
    run = client.read_flow_run(sys.argv[1])
    artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
    print(json.dumps({"id": str(run.id), "name": run.name, "state": run.state.type.value, "message": run.state.message,
                      "artifacts": sorted(a.key or a.type for a in artifacts)}))
"""


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_errors(env: Mapping[str, str], last: int = 3) -> str:
    """The last ERROR lines of the server's log, to explain a failed expectation."""
    lines = Path(env[SERVER_LOG]).read_text(errors="replace").splitlines()
    errors = [line for line in lines if "ERROR" in line or "Error:" in line]
    return "\n".join(errors[-last:]) or "no ERROR in the server log"


def wait_healthy(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the server on ``port`` answers /api/health; fail with its log if it dies."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prefect server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process started in its own session, and everything it started."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextmanager
def prefect_server(
    folder: Path, extra_env: Mapping[str, str] | None = None, *, deploy: bool = True
) -> Iterator[dict[str, str]]:
    """`prefect server start` on a free loopback port (and prefect.yaml deployed); yields its env."""
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(folder / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # The UI too (test_ui.py looks at it): it adds about a second to the start here, and the
        # UI calls this server's API (PREFECT_API_URL).
        "PREFECT_UI_ENABLED": "true",
        "EVALSENTRY_PROJECT_DIR": str(ROOT),
        SERVER_LOG: str(folder / "server.log"),
        **(extra_env or {}),
    }
    log_path = Path(env[SERVER_LOG])
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_healthy(port, process, log_path)
            if deploy:
                prefect(env, "work-pool", "create", "gpu", "--type", "process")
                prefect(env, "--no-prompt", "deploy", "--all")
            yield env
        finally:
            stop(process)


def prefect(env: Mapping[str, str], *args: str, timeout: int = 180) -> str:
    """Run the `prefect` CLI in the project root; assert it succeeded; return its stdout."""
    result = subprocess.run(
        [PREFECT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"prefect {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def trigger(env: Mapping[str, str], week: str, config: Path, *extra: str) -> str:
    """`prefect deployment run weekly-eval/weekly-eval` for ``week``; the new flow run's id."""
    out = prefect(
        env,
        "deployment",
        "run",
        "weekly-eval/weekly-eval",
        "--param",
        f"week={week}",
        "--param",
        f"config_path={config}",
        *extra,
    )
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    assert match, out
    return match.group(1)


def read_run(env: Mapping[str, str], flow_run_id: str) -> dict[str, object]:
    """A flow run's id, name, state type, state message and artifact keys, read from the API."""
    return json.loads(client_script(READ_RUN, env, flow_run_id))  # type: ignore[no-any-return]


def client_script(script: str, env: Mapping[str, str], *args: str, timeout: float = 120) -> str:
    """Run a Prefect client ``script`` in its own process; the last line it printed."""
    read = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return read.stdout.strip().splitlines()[-1]


READ_WEEK = """
import json, sys, time
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

def row(run):
    return {"name": run.name, "state": run.state.type.value, "message": run.state.message,
            "worker": run.labels.get("prefect.worker.name"), "queue": run.work_queue_name,
            "created": run.created.timestamp(),
            "start": run.start_time and run.start_time.timestamp(),
            "end": run.end_time and run.end_time.timestamp()}

deadline = time.monotonic() + float(sys.argv[2])
with get_client(sync_client=True) as client:
    while not (run := client.read_flow_run(sys.argv[1])).state.is_final():
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])))
    print(json.dumps({**row(run), "children": sorted((row(c) for c in children), key=str)}))
"""

WORKER = (PREFECT, "worker", "start", "--pool", "gpu", "--type", "process")

QUEUE_STATUS = """
import sys
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as client:
    print(client.read_work_queue_by_name(sys.argv[2], work_pool_name=sys.argv[1]).status.value)
"""


@contextmanager
def workers(
    env: Mapping[str, str], folder: Path, queues: Mapping[str, Sequence[str]]
) -> Iterator[None]:
    """A process worker on the gpu pool per name in ``queues``, with its extra CLI arguments."""
    started = []
    try:
        for name, args in queues.items():
            with (folder / f"worker-{name}.log").open("w") as log:
                started.append(
                    subprocess.Popen(
                        [*WORKER, "--name", name, *args],
                        env=dict(env),
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield
    finally:
        for process in started:
            stop(process)


def wait_queue_ready(env: Mapping[str, str], pool: str, queue: str, timeout_s: float = 120) -> None:
    """Wait until a worker has polled ``queue`` of ``pool`` (the API marks the queue READY)."""
    deadline = time.monotonic() + timeout_s
    while (
        status := subprocess.run(
            [sys.executable, "-c", QUEUE_STATUS, pool, queue],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
    ) != "READY":
        assert time.monotonic() < deadline, f"queue {queue!r} still {status}"
        time.sleep(1)


def read_week(env: Mapping[str, str], flow_run_id: str, timeout_s: float = 300) -> dict[str, Any]:
    """Wait (up to ``timeout_s``) for a flow run to end; it and its child flow runs, from the API.

    Each has its name, state type and message, the name of the worker that ran it, its work
    queue, and when it was created, started running and ended, as Unix times.
    """
    line = client_script(READ_WEEK, env, flow_run_id, str(timeout_s), timeout=timeout_s + 120)
    return json.loads(line)  # type: ignore[no-any-return]


def run_week(env: Mapping[str, str], week: str, config: Path) -> dict[str, object]:
    """Run weekly-eval for ``week`` on the shared server's worker; the run, read back once ended."""
    flow_run_id = trigger(env, week, config)
    read_week(env, flow_run_id)
    return read_run(env, flow_run_id)


def api(env: Mapping[str, str], method: str, path: str, body: object = None) -> object:
    """One JSON request to the server's REST API (``path`` after /api); the decoded reply."""
    request = urllib.request.Request(  # noqa: S310 - the test's own loopback server
        env["PREFECT_API_URL"] + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 - as above
        text = reply.read()
    return json.loads(text) if text else None


READ_LOGS = """
import json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.client.schemas.sorting import LogSort
with get_client(sync_client=True) as client:
    logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[sys.argv[1]])),
                            limit=200, sort=LogSort.TIMESTAMP_ASC)
    print(json.dumps([{"level": log.level, "name": log.name, "message": log.message} for log in logs]))
"""


def read_logs(env: Mapping[str, str], flow_run_id: str) -> list[dict[str, object]]:
    """A flow run's log records as the UI shows them (level, logger, message), oldest first."""
    return json.loads(client_script(READ_LOGS, env, flow_run_id))  # type: ignore[no-any-return]
