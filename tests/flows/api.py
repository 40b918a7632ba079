"""Reading back what a flow run recorded in the Prefect API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect.client.orchestration import get_client

from evalsentry.tasks.events import WEEK_FAILED


def task_runs(flow_run_id: object) -> list[Any]:
    """The flow run's task runs, as the API recorded them."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )

    return asyncio.run(read())


async def _events(name: str, resource: str) -> list[Any]:
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    async with get_client() as client:
        page = await client.read_events(
            filter=EventFilter(
                event=EventNameFilter(name=[name]), resource=EventResourceFilter(id=[resource])
            ),
            limit=50,  # the server caps pages at 50; the client default of 100 is refused
        )
    return list(page.events)


def wait_for_events(
    name: str, resource: str, timeout: float = 20.0, flow_run_id: object = None
) -> list[Any]:
    """The events ``name`` about ``resource`` (of one flow run, if given), waiting for the first."""
    deadline = time.monotonic() + timeout
    while True:
        found = asyncio.run(_events(name, resource))
        if flow_run_id is not None:
            run = f"prefect.flow-run.{flow_run_id}"
            found = [e for e in found if any(r.id == run for r in e.related)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


QUIET_S = 2.0  # after the first event of a run, how long no second one may arrive


def run_logs(flow_run_id: object) -> list[tuple[int, str]]:
    """The flow run's log lines (level, message), oldest first, as the UI's Logs tab lists them."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)  # the run's logs reach the API in batches

    async def read() -> list[tuple[int, str]]:
        async with get_client() as client:
            logs = await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
                sort=LogSort.TIMESTAMP_ASC,
            )
        return [(log.level, log.message) for log in logs]

    return asyncio.run(read())


def alerts_of(state: Any, week: str, *, expect: bool = True) -> list[Any]:
    """The `evalsentry.week.failed` events of the run that ended in ``state``, once settled."""
    run = state.state_details.flow_run_id
    found = wait_for_events(
        WEEK_FAILED, f"evalsentry.week.{week}", timeout=20 if expect else QUIET_S, flow_run_id=run
    )
    if found:
        time.sleep(QUIET_S)  # a second event would arrive by now
        found = wait_for_events(WEEK_FAILED, f"evalsentry.week.{week}", 0, flow_run_id=run)
    return found


def run_name(flow_run_id: object) -> str:
    """The flow run's name, as the API recorded it."""

    async def read() -> str:
        async with get_client() as client:
            return str((await client.read_flow_run(flow_run_id)).name)

    return asyncio.run(read())


def run_tags(flow_run_id: object) -> set[str]:
    """The flow run's tags, as the API holds them."""

    async def read() -> set[str]:
        async with get_client() as client:
            return set((await client.read_flow_run(flow_run_id)).tags)

    return asyncio.run(read())
