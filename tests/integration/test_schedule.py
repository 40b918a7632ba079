"""The weekly schedule fires: the real server creates the Monday 06:00 UTC runs of weekly-eval."""

from __future__ import annotations

import itertools
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.prefect_server import api, server_errors

pytestmark = pytest.mark.integration

SCHEDULER_WAIT_S = 90


def _next_monday_0600(after: datetime) -> datetime:
    monday = (after + timedelta(days=(7 - after.weekday()) % 7)).replace(
        hour=6, minute=0, second=0, microsecond=0
    )
    return monday if monday > after else monday + timedelta(days=7)


def test_server_creates_the_monday_runs_of_the_deployed_schedule(server: dict[str, str]) -> None:
    """After `prefect deploy`, the server's scheduler itself creates Scheduled weekly-eval runs at Monday 06:00 UTC.

    With SQLAlchemy 2.1 the scheduler fails on every loop and this list stays empty. Until
    they start, the runs carry the scheduler's random two-word names (the README says so): a
    schedule has no name template in Prefect 3.9, and the flow's own name applies at the start.
    (A worker executing a triggered run to its final state: test_server_worker.py.)
    """
    deployment = api(server, "GET", "/deployments/name/weekly-eval/weekly-eval")
    assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["0 6 * * 1"]
    query = {
        "deployments": {"id": {"any_": [deployment["id"]]}},
        "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
        "sort": "EXPECTED_START_TIME_ASC",
    }
    deadline = time.monotonic() + SCHEDULER_WAIT_S
    while not (runs := api(server, "POST", "/flow_runs/filter", query)):
        assert time.monotonic() < deadline, (
            f"no scheduled weekly-eval run after {SCHEDULER_WAIT_S} s: the server's scheduler "
            f"created none; the server's log says:\n{server_errors(server)}"
        )
        time.sleep(1)
    starts = [datetime.fromisoformat(r["expected_start_time"]) for r in runs]
    assert all(r["auto_scheduled"] for r in runs), runs
    assert all(re.fullmatch(r"[a-z]+-[a-z]+", r["name"]) for r in runs), [r["name"] for r in runs]
    assert all(
        (s.astimezone(UTC).weekday(), s.astimezone(UTC).time().isoformat()) == (0, "06:00:00")
        for s in starts
    ), starts
    assert starts[0] == _next_monday_0600(datetime.now(UTC))
    assert all(b - a == timedelta(days=7) for a, b in itertools.pairwise(starts))
