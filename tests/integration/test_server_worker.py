"""A real Prefect server and process worker: deploy prefect.yaml, run weekly-eval, read it back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalsentry.checkpoints.registry import Registry
from tests.integration.prefect_server import (
    WORKER_LOG,
    client_script,
    read_logs,
    read_run,
    read_week,
    run_week,
    trigger,
)
from tests.models import TRUST, TRUSTED_YAML

pytestmark = pytest.mark.integration


def test_deployed_weekly_eval_runs_on_a_process_worker(
    server: dict[str, str], tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """A deployed weekly-eval run by a real worker completes, then fails on a promoted regression.

    The Failed week reads as a verdict: a one-line state message led by the headline, each
    problem its own log line, and no traceback in the run's log or the worker's output. A run
    triggered for a past week is named as a backfill; one the deployment's schedule made, as
    scheduled.
    """
    config = tmp_path / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
    )
    registry = Registry(str(tmp_path / "registry"))
    registry.register(toy_checkpoints["good"], "toy-model", stage="production", trust=TRUST)

    first = run_week(server, "2026-W40", config)
    assert re.fullmatch(r"weekly-eval-2026-W40-backfill-[0-9a-f]{6}", str(first["name"])), first
    assert first["state"] == "COMPLETED", first
    assert {"weekly-eval-report", "weekly-eval-metrics", "weekly-eval-report-file"} <= set(
        first["artifacts"]
    )

    entry = registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)
    registry.promote("toy-model", entry.version, "production")
    worker_log = Path(server[WORKER_LOG])
    seen = worker_log.stat().st_size
    flow_run_id = trigger(server, "2026-W41", config)
    read_week(server, flow_run_id)
    second = read_run(server, flow_run_id)
    with worker_log.open(errors="replace") as log:
        log.seek(seen)
        worker_output = log.read()  # what the worker wrote while it ran this week
    assert second["state"] == "FAILED", second
    message = str(second["message"])
    assert message.startswith("2026-W41: FAIL toy-model@v2 accuracy -") and "\n" not in message
    assert "toy-model@v2 on toy: accuracy vs previous-week" in message
    lines = [str(log["message"]) for log in read_logs(server, flow_run_id)]
    assert message.partition(" | ")[0] in lines  # the headline, as a log line of its own
    assert any(line.startswith("FAIL toy-model@v2 on toy: accuracy vs previous") for line in lines)
    for text in (*lines, worker_output):
        assert "Traceback" not in text and "exited with unexpected exception" not in text, text

    scheduled = _a_scheduled_run_moved_to_now(server, config)
    read_week(server, scheduled)  # the worker picks it up: it is due
    run = read_run(server, scheduled)
    assert re.fullmatch(r"weekly-eval-\d{4}-W\d{2}-scheduled-[0-9a-f]{6}", str(run["name"])), run


SCHEDULER_WAIT_S = 90
MOVE_SCHEDULED_RUN = """
import sys, time
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter, DeploymentFilterName, FlowRunFilter, FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.states import Scheduled
with get_client(sync_client=True) as client:
    deadline = time.monotonic() + float(sys.argv[2])
    while not (runs := [r for r in client.read_flow_runs(
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["weekly-eval"])),
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
        ),
        sort=FlowRunSort.EXPECTED_START_TIME_DESC,
    ) if r.auto_scheduled]):
        assert time.monotonic() < deadline, "the server's scheduler made no weekly-eval run"
        time.sleep(1)
    client.update_flow_run(runs[0].id, parameters={**runs[0].parameters, "config_path": sys.argv[1]})
    client.set_flow_run_state(runs[0].id, Scheduled(), force=True)
    print(runs[0].id)
"""


def _a_scheduled_run_moved_to_now(env: dict[str, str], config: Path) -> str:
    """The last run the server's scheduler made (for a coming Monday), due now, reading ``config``.

    The last, not the next: the next Monday's run stays for test_schedule.py to find.
    """
    return client_script(
        MOVE_SCHEDULED_RUN, env, str(config), str(SCHEDULER_WAIT_S), timeout=SCHEDULER_WAIT_S + 60
    )
