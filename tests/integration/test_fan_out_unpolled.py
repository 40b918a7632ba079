"""A fanned-out week with no worker on the `fan-out` queue: on a server of its own, whose
`fan-out` queue no test has polled (the shared server's has been)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.prefect_server import prefect_server, read_week, trigger, workers
from tests.integration.test_fan_out import fan_out_project

pytestmark = pytest.mark.integration

PARENT = {"parent": ["--work-queue", "default"]}


def test_fan_out_fails_at_once_when_no_worker_polls_the_fan_out_queue(
    tmp_path: Path,
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
    prefect_database: Path,
) -> None:
    """A fanned-out week with no worker on `fan-out` ends Failed, naming the queue, starting no
    child, instead of waiting for ever (a server of its own: the shared one's queue was polled)."""
    config = fan_out_project(tmp_path, toy_evalset, toy_checkpoints)
    with (
        prefect_server(tmp_path, database=prefect_database) as env,
        workers({**env, "PREFECT_WORKER_QUERY_SECONDS": "2"}, tmp_path, PARENT),
    ):
        week = read_week(env, trigger(env, "2026-W40", config, "--param", "fan_out=true"))
    assert week["state"] == "FAILED", week
    assert "no worker has polled work queue 'fan-out' of pool 'gpu'" in str(week["message"])
    assert week["children"] == []
