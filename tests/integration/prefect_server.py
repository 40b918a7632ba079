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
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.prefect_database import seed

ROOT = Path(__file__).parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
STARTUP_TIMEOUT_S = 120
#: The server's log file, in the env a test gets, for failure messages.
SERVER_LOG = "EVALSENTRY_TEST_SERVER_LOG"
#: The shared server's worker (tests/integration/conftest.py), and its log file in the env.
SHARED_WORKER = "shared"
WORKER_LOG = "EVALSENTRY_TEST_WORKER_LOG"


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
    folder: Path,
    extra_env: Mapping[str, str] | None = None,
    *,
    deploy: bool = True,
    database: Path | None = None,
) -> Iterator[dict[str, str]]:
    """`prefect server start` on a free loopback port (and prefect.yaml deployed); yields its env.

    ``database``: a migrated database to start from (the ``prefect_database`` fixture's), copied.
    """
    if database is not None:
        seed(folder / "prefect-home", database)
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
    run = _flow_run(env, flow_run_id)
    query = {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
    artifacts = api(env, "POST", "/artifacts/filter", query)
    assert isinstance(artifacts, list), artifacts
    return {
        "id": run["id"],
        "name": run["name"],
        "state": run["state"]["type"],
        "message": run["state"]["message"],
        "artifacts": sorted(a["key"] or a["type"] for a in artifacts),
    }


def _flow_run(env: Mapping[str, str], flow_run_id: str) -> dict[str, Any]:
    run = api(env, "GET", f"/flow_runs/{flow_run_id}")
    assert isinstance(run, dict), run
    return run


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


WORKER = (PREFECT, "worker", "start", "--pool", "gpu", "--type", "process")


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
    while (status := _status(env, pool, queue)) != "READY":
        assert time.monotonic() < deadline, f"queue {queue!r} still {status}"
        time.sleep(1)


def _status(env: Mapping[str, str], pool: str, queue: str) -> object:
    found = api(env, "GET", f"/work_pools/{pool}/queues/{queue}")
    assert isinstance(found, dict), found
    return found["status"]


#: The state types a flow run ends in.
FINAL = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})


def _unix(timestamp: str | None) -> float | None:
    return None if timestamp is None else datetime.fromisoformat(timestamp).timestamp()


def _row(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": run["name"],
        "state": run["state"]["type"],
        "message": run["state"]["message"],
        "worker": (run.get("labels") or {}).get("prefect.worker.name"),
        "queue": run["work_queue_name"],
        "created": _unix(run["created"]),
        "start": _unix(run["start_time"]),
        "end": _unix(run["end_time"]),
    }


def read_week(env: Mapping[str, str], flow_run_id: str, timeout_s: float = 300) -> dict[str, Any]:
    """Wait (up to ``timeout_s``) for a flow run to end; it and its child flow runs, from the API.

    Each has its name, state type and message, the name of the worker that ran it, its work
    queue, and when it was created, started running and ended, as Unix times.
    """
    deadline = time.monotonic() + timeout_s
    while (run := _flow_run(env, flow_run_id))["state"]["type"] not in FINAL:
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    query = {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}}
    children = api(env, "POST", "/flow_runs/filter", query)
    assert isinstance(children, list), children
    return {**_row(run), "children": sorted((_row(c) for c in children), key=str)}


def run_week(env: Mapping[str, str], week: str, config: Path) -> dict[str, object]:
    """Run weekly-eval for ``week`` on the shared server's worker; the run, read back once ended."""
    flow_run_id = trigger(env, week, config)
    read_week(env, flow_run_id)
    return read_run(env, flow_run_id)


#: Replies Prefect's own client retries (its SQLite answers 503 while another write holds it).
_RETRIED = frozenset({429, 502, 503})


def api(env: Mapping[str, str], method: str, path: str, body: object = None) -> object:
    """One JSON request to the server's REST API (``path`` after /api); the decoded reply.

    A busy server's 429, 502 or 503 is retried with backoff, as Prefect's client does (five
    retries): the REST calls stand in for the client's.
    """
    request = urllib.request.Request(  # noqa: S310 - the test's own loopback server
        env["PREFECT_API_URL"] + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    for attempt in range(6):
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 - as above
                text = reply.read()
            return json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            if error.code not in _RETRIED or attempt == 5:
                raise
            wait = error.headers.get("Retry-After", "")
            time.sleep(float(wait) if wait.isdigit() else 0.5 * 2**attempt)
    raise AssertionError("unreachable")


def read_logs(env: Mapping[str, str], flow_run_id: str) -> list[dict[str, object]]:
    """A flow run's log records as the UI shows them (level, logger, message), oldest first."""
    query = {
        "logs": {"flow_run_id": {"any_": [flow_run_id]}},
        "limit": 200,
        "sort": "TIMESTAMP_ASC",
    }
    # A run's records reach the API in batches, after it ended too: read until they stop coming.
    deadline, logs = time.monotonic() + 30, None
    while True:
        time.sleep(1)
        found = api(env, "POST", "/logs/filter", query)
        assert isinstance(found, list), found
        if found == logs or time.monotonic() > deadline:
            break
        logs = found
    return [{"level": x["level"], "name": x["name"], "message": x["message"]} for x in found]
