"""Killing a run leaves nothing behind: Prefect's temporary server dies with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.integration.prefect_server import ROOT, api, wait_healthy
from tests.prefect_database import seed

pytestmark = pytest.mark.integration

EVALSENTRY = str(Path(sys.executable).parent / "evalsentry")
#: How long the server may outlive a killed run (the kernel kills it at once; allow for load).
GONE_WITHIN_S = 5.0
SERVER_STARTS_WITHIN_S = 120.0


def _server_child(parent: psutil.Process, deadline: float) -> psutil.Process:
    """The uvicorn child that Prefect starts as its temporary server, once it exists."""
    while time.monotonic() < deadline and parent.is_running():
        for child in parent.children():
            try:
                if "uvicorn" in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
    pytest.fail("no temporary Prefect server was started")


def _wait_for_a_running_flow(port: int, deadline: float) -> None:
    """Wait until the server has a flow run in state RUNNING: the run is mid-flow."""
    env = {"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    query = {"flow_runs": {"state": {"type": {"any_": ["RUNNING"]}}}, "limit": 1}
    while not api(env, "POST", "/flow_runs/filter", query):
        assert time.monotonic() < deadline, "no flow run started"
        time.sleep(0.2)


def _alive(process: psutil.Process) -> bool:
    """Running, not just a zombie waiting for a reaper (a container's PID 1 may never reap)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("how", "exits_within_s"),
    [
        pytest.param(lambda run: os.kill(run.pid, signal.SIGKILL), 10, id="SIGKILL"),
        pytest.param(lambda run: os.killpg(run.pid, signal.SIGINT), 20, id="Ctrl-C"),
    ],
)
def test_a_killed_run_takes_its_temporary_server_with_it(
    tmp_path: Path,
    how: Callable[[subprocess.Popen[bytes]], None],
    exits_within_s: float,
    prefect_database: Path,
) -> None:
    """`evalsentry demo` killed mid-flow by SIGKILL, or by Ctrl-C, ends in seconds and leaves no server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DO_NOT_TRACK"))}
    env["PREFECT_HOME"] = str(seed(tmp_path / "prefect-home", prefect_database).parent)
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            [EVALSENTRY, "demo", "--dir", str(tmp_path / "demo")],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, as a terminal gives a command
        )
    server = None
    try:
        server = _server_child(psutil.Process(run.pid), time.monotonic() + SERVER_STARTS_WITHIN_S)
        port = int(server.cmdline()[server.cmdline().index("--port") + 1])
        wait_healthy(port, run, log)
        _wait_for_a_running_flow(port, time.monotonic() + SERVER_STARTS_WITHIN_S)

        how(run)
        try:
            run.wait(timeout=exits_within_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run still runs {exits_within_s} s later: {log.read_text()[-1500:]}")
        deadline = time.monotonic() + GONE_WITHIN_S
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), f"server pid {server.pid} outlived its run"
    finally:
        for process in (psutil.Process(run.pid) if run.poll() is None else None, server):
            if process is not None and _alive(process):
                process.kill()
        run.wait(timeout=10)
