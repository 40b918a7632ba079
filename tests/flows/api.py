"""Reading back what a flow run recorded in the Prefect API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect.client.orchestration import get_client


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
