"""Reading back what a flow run recorded in the Prefect API."""

from __future__ import annotations

import asyncio
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
