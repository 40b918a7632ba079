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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
STARTUP_TIMEOUT_S = 120

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


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        "PREFECT_UI_ENABLED": "false",
        "EVALSENTRY_PROJECT_DIR": str(ROOT),
        **(extra_env or {}),
    }
    log_path = folder / "server.log"
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
        f"config={config}",
        *extra,
    )
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    assert match, out
    return match.group(1)


def read_run(env: Mapping[str, str], flow_run_id: str) -> dict[str, object]:
    """A flow run's name, state type, state message and artifact keys, read from the API."""
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
