"""`make server` on any port: the UI calls the API on that port; the server's telemetry is off."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.integration.prefect_server import ROOT, free_port, stop, wait_healthy

pytestmark = pytest.mark.integration


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - the test's own loopback server
        return json.loads(reply.read())


def test_make_server_on_another_port_points_its_ui_at_that_port(tmp_path: Path) -> None:
    """`make server PREFECT_PORT=N` serves a UI whose API URL is port N, with analytics off."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DO_NOT_TRACK"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    log = tmp_path / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "server", f"PREFECT_PORT={port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_healthy(port, process, log)
            ui = _get(f"http://127.0.0.1:{port}/ui-settings")
            settings = _get(f"http://127.0.0.1:{port}/api/admin/settings")
        finally:
            stop(process)
    assert isinstance(ui, dict) and ui["api_url"] == f"http://127.0.0.1:{port}/api", ui
    assert isinstance(settings, dict) and settings["server"]["analytics_enabled"] is False
    assert "Traceback" not in log.read_text()
