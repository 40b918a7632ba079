"""One failed week, one POST: `python -m evalsentry.flows.alerts` on a real server, worker and HTTP listener."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evalsentry.flows.alerts import BLOCK_NAME, URL_VARIABLE
from evalsentry.registry import Registry
from tests.integration.prefect_server import ROOT, api, free_port, run_week
from tests.models import TRUST, TRUSTED_YAML

pytestmark = pytest.mark.integration

ARRIVAL_TIMEOUT_S = 60  # the automation fires within a second here; the worker is slower
QUIET_S = 8  # after the first POST (or a passing week), how long no other may arrive
AUTOMATION = "evalsentry-regression-alert"


class Listener:
    """A loopback HTTP server that records every POST it receives (path, headers, body)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, dict(self.headers), body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alert"

    def wait_for(self, count: int, timeout_s: float) -> None:
        """Return once ``count`` POSTs have arrived, or when ``timeout_s`` has passed."""
        deadline = time.monotonic() + timeout_s
        while len(self.posts) < count and time.monotonic() < deadline:
            time.sleep(0.25)


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A local webhook endpoint counting POSTs, served from a thread for the test's duration."""
    listening = Listener()
    thread = threading.Thread(target=listening.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield listening
    finally:
        listening.server.shutdown()
        listening.server.server_close()


def _alerts_command(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m evalsentry.flows.alerts` (what `make alerts` runs) with ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "evalsentry.flows.alerts"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _set_up_alerts(env: dict[str, str]) -> str:
    result = _alerts_command(env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _automations(env: dict[str, str]) -> list[dict[str, object]]:
    found = api(env, "POST", "/automations/filter", {})
    assert isinstance(found, list)
    return [a for a in found if a["name"] == AUTOMATION]


def test_a_failed_week_posts_one_rounded_summary_and_a_passing_week_none(
    server: dict[str, str],
    tmp_path: Path,
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
    listener: Listener,
) -> None:
    """Set up twice (one block, one automation); a passing week posts nothing, a failed week once."""
    env = {**server, URL_VARIABLE: listener.url}
    first = _set_up_alerts(env)
    assert _set_up_alerts(env) == first  # the same block and automation, updated in place
    (automation,) = _automations(env)
    blocks = api(
        env,
        "POST",
        "/block_documents/filter",
        {"block_documents": {"name": {"any_": [BLOCK_NAME]}}},
    )
    assert isinstance(blocks, list) and len(blocks) == 1
    try:
        config = tmp_path / "evalsentry.yaml"
        config.write_text(
            f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
        )
        registry = Registry(str(tmp_path / "registry"))
        registry.register(toy_checkpoints["good"], "toy-model", stage="production", trust=TRUST)
        for week in ("2026-W40", "2026-W41"):  # the baseline, then a week that passes against it
            assert run_week(server, week, config)["state"] == "COMPLETED"
        listener.wait_for(1, QUIET_S)
        assert listener.posts == []

        entry = registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)
        registry.promote("toy-model", entry.version, "production")
        failed = run_week(server, "2026-W42", config)
        assert failed["state"] == "FAILED", failed
        listener.wait_for(1, ARRIVAL_TIMEOUT_S)
        listener.wait_for(2, QUIET_S)
        assert len(listener.posts) == 1, [body for _, _, body in listener.posts]

        path, headers, body = listener.posts[0]
        assert path == "/alert"
        assert headers["Content-Type"] == "application/json"
        summary = json.loads(body)
        assert summary["week"] == "2026-W42" and summary["gate"] == "FAIL"
        # One POST stands for several failed comparisons, against both references.
        assert summary["counts"]["FAIL"] >= 2 and summary["counts"]["ERROR"] == 0
        assert {r["reference"] for r in summary["worst"]} == {"previous-week", "baseline"}
        worst = summary["worst"][0]
        assert (worst["model"], worst["version"], worst["evalset"]) == ("toy-model", 2, "toy")
        for number in (worst["was"], worst["now"], worst["drop"]):
            assert number == round(number, 4)
        assert worst["p"] == float(f"{worst['p']:.2g}")
        assert summary["run"]["name"] == failed["name"]
        assert "/flow-runs/flow-run/" in summary["run"]["url"]
        assert summary["text"].endswith(f"run: {summary['run']['url']}")
        assert "FAIL toy-model@v2 on toy: " in summary["text"]
    finally:
        api(env, "DELETE", f"/automations/{automation['id']}")  # other tests' weeks stay silent


def test_setting_up_without_a_webhook_url_fails_naming_the_variable(tmp_path: Path) -> None:
    """Without EVALSENTRY_ALERT_WEBHOOK_URL the command exits 2, names the variable, saves nothing."""
    env = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    env["PREFECT_API_URL"] = "http://127.0.0.1:9/api"  # no server: it must fail before any call
    env["PREFECT_HOME"] = str(tmp_path)
    result = _alerts_command(env)
    assert result.returncode == 2
    assert f"{URL_VARIABLE} is not set" in result.stderr
