"""One failed week, one POST: `python -m evalsentry.flows.alerts` on a real server, worker and HTTP
listener, whatever ended the week (a FAIL, an early stop, a crash, a run that never ran)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.flows.alerts import BLOCK_NAME, GRACE_VARIABLE, URL_VARIABLE
from tests.integration.prefect_server import ROOT, api, free_port, read_logs, run_week
from tests.models import TRUST, TRUSTED_YAML

pytestmark = pytest.mark.integration

ARRIVAL_TIMEOUT_S = 60  # the automation fires within a second here; the worker is slower
QUIET_S = 8  # after the last POST, how long no other may arrive
#: A work queue of the gpu pool that no worker polls: its runs are never picked up.
PAUSED = "paused"
AUTOMATIONS = {
    "evalsentry-regression-alert",
    "evalsentry-drift-alert",
    "evalsentry-week-crashed",
    "evalsentry-week-overdue",
}
OVERDUE_TIMEOUT_S = 60  # Late after <= 20 s (the server's late-runs service), 10 s grace, then
# the proactive trigger's next evaluation (every 5 s)


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
    return [a for a in found if a["name"] in AUTOMATIONS]


def _week_run(env: dict[str, str], week: str, config: Path, **fields: Any) -> str:
    """A flow run of the weekly-eval deployment for ``week`` (no worker started); its id."""
    deployment = api(env, "GET", "/deployments/name/weekly-eval/weekly-eval")
    assert isinstance(deployment, dict)
    run = api(
        env,
        "POST",
        f"/deployments/{deployment['id']}/create_flow_run",
        {"parameters": {"week": week, "config_path": str(config)}, **fields},
    )
    assert isinstance(run, dict)
    return str(run["id"])


def _posted(listener: Listener, index: int) -> dict[str, Any]:
    """The ``index``-th POST's JSON body, once it has arrived."""
    listener.wait_for(index + 1, ARRIVAL_TIMEOUT_S)
    assert len(listener.posts) > index, [body for _, _, body in listener.posts]
    path, headers, body = listener.posts[index]
    assert path == "/alert" and headers["Content-Type"] == "application/json"
    payload: dict[str, Any] = json.loads(body)
    assert payload["text"].splitlines()[0] == f"evalsentry: {payload['headline']}"
    return payload


def _assert_fail_summary(
    env: dict[str, str], summary: dict[str, Any], failed: dict[str, Any]
) -> None:
    """The FAIL week's POST: its headline (the run's, and its log's first line), rounded rows."""
    assert summary["alert"] == "failed"
    assert summary["week"] == "2026-W42" and summary["gate"] == "FAIL"
    headline = str(failed["message"]).split(" | ")[0]
    assert summary["headline"] == headline  # the alert's first row is the run's headline
    assert read_logs(env, str(failed["id"]))[0]["message"] == headline  # so is its log's
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


def _miss_a_week(env: dict[str, str], week: str, config: Path) -> str:
    """A run of ``week`` scheduled a minute ago in the queue no worker polls; its id."""
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    return _week_run(
        env,
        week,
        config,
        work_queue_name=PAUSED,
        state={"type": "SCHEDULED", "state_details": {"scheduled_time": past}},
    )


def test_each_failed_week_posts_once_and_a_passing_week_none(
    server: dict[str, str],
    tmp_path: Path,
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
    listener: Listener,
) -> None:
    """Set up twice (one block, three automations); a passing week posts nothing; a FAIL, a
    crashed run, a run stopped before its gate (on a worker, its config missing) and a run never
    picked up within the grace period each post once, their headline first.

    The crash is the state a worker reports for a killed run, set through the API: killing a
    process is Prefect's to detect, the alert on its state is ours. A run stopped before its
    gate sends the same event as the FAIL, from the same hook (tests/flows/test_week_verdict.py).
    """
    env = {**server, URL_VARIABLE: listener.url}
    first = _set_up_alerts(env)
    assert "grace period 6h" in first
    # The shared worker polls the default queue: runs that must not run wait in this one.
    api(env, "POST", "/work_pools/gpu/queues", {"name": PAUSED, "is_paused": True})
    unrun: list[str] = []
    try:
        config = tmp_path / "evalsentry.yaml"
        config.write_text(
            f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
        )
        registry = Registry(str(tmp_path / "registry"))
        registry.register(toy_checkpoints["good"], "toy-model", stage="production", trust=TRUST)
        for week in ("2026-W40", "2026-W41"):  # the baseline, then a week that passes against it
            assert run_week(server, week, config)["state"] == "COMPLETED"
        # Neither posts: the FAIL's POST below must be the first, and none names them (the end).

        entry = registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)
        registry.promote("toy-model", entry.version, "production")
        failed = run_week(server, "2026-W42", config)
        assert failed["state"] == "FAILED", failed
        _assert_fail_summary(env, _posted(listener, 0), failed)

        crashed_run = _week_run(env, "2026-W43", config, work_queue_name=PAUSED)
        unrun.append(crashed_run)
        api(
            env,
            "POST",
            f"/flow_runs/{crashed_run}/set_state",
            {"state": {"type": "CRASHED", "message": "exit code -9"}, "force": True},
        )
        crashed = _posted(listener, 1)
        assert crashed["alert"] == "crashed" and crashed["gate"] == "ERROR"
        assert crashed["headline"] == "2026-W43: ERROR the run crashed: exit code -9"

        # A week that stops before its gate (its config is missing): Failed early, one POST.
        early = run_week(server, "2026-W44", tmp_path / "missing.yaml")
        assert early["state"] == "FAILED", early
        stopped = _posted(listener, 2)
        assert stopped["alert"] == "failed" and stopped["gate"] == "ERROR"
        assert stopped["headline"] == str(early["message"]).split(" | ")[0]
        assert (
            stopped["headline"].startswith("2026-W44: ERROR")
            and "missing.yaml" in stopped["headline"]
        )

        # Set up again, with a grace period short enough to wait for: the same block and
        # automations, updated in place.
        again = _set_up_alerts({**env, GRACE_VARIABLE: "10s"})
        assert again == first.replace("grace period 6h", "grace period 10s")
        assert sorted(str(a["name"]) for a in _automations(env)) == sorted(AUTOMATIONS)
        blocks = api(
            env,
            "POST",
            "/block_documents/filter",
            {"block_documents": {"name": {"any_": [BLOCK_NAME]}}},
        )
        assert isinstance(blocks, list) and len(blocks) == 1
        # A missed week: scheduled a minute ago in a queue no worker polls (a paused one).
        unrun.append(_miss_a_week(env, "2026-W45", config))
        listener.wait_for(4, OVERDUE_TIMEOUT_S)
        overdue = _posted(listener, 3)
        assert overdue["alert"] == "overdue" and overdue["gate"] == "ERROR"
        assert overdue["headline"] == (
            "2026-W45: ERROR the run has not ended within 10s (it is Late)"
        )
        listener.wait_for(5, QUIET_S)
        assert len(listener.posts) == 4, [body for _, _, body in listener.posts]
        weeks = [json.loads(body)["week"] for _, _, body in listener.posts]
        assert weeks == ["2026-W42", "2026-W43", "2026-W44", "2026-W45"]  # no passing week's
    finally:
        for flow_run in unrun:  # no later worker of another test may pick them up
            api(env, "DELETE", f"/flow_runs/{flow_run}")
        api(env, "DELETE", f"/work_pools/gpu/queues/{PAUSED}")
        for automation in _automations(env):  # other tests' weeks stay silent
            api(env, "DELETE", f"/automations/{automation['id']}")


def test_setting_up_without_a_webhook_url_fails_naming_the_variable(tmp_path: Path) -> None:
    """Without EVALSENTRY_ALERT_WEBHOOK_URL the command exits 2, names the variable, saves nothing."""
    env = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    env["PREFECT_API_URL"] = "http://127.0.0.1:9/api"  # no server: it must fail before any call
    env["PREFECT_HOME"] = str(tmp_path)
    result = _alerts_command(env)
    assert result.returncode == 2
    assert f"{URL_VARIABLE} is not set" in result.stderr
