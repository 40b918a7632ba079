"""A week fanned out: each evaluation a child run of the `evaluate-one` deployment.

The weekly flow hands its jobs here when its runner is ``fan-out`` (see README, Scaling out); the
children record into the same history under the week's run id, and the week gathers them there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from evalsentry.errors import UsageError

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun

    from evalsentry.evaluation.pipeline import Outcome
    from evalsentry.flows.weekly_eval import Job, RunContext

FAN_OUT_DEPLOYMENT = "evaluate-one/evaluate-one"
FAN_OUT_POLL_S = 2.0


def fan_out(jobs: Sequence[Job], run: RunContext, retire: Sequence[str]) -> list[Outcome]:
    """Run each job as a child flow run of the `evaluate-one` deployment; gather from the history.

    Fails first when no worker polls the deployment's work queue: the children would wait forever.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkQueueStatus
    from prefect.deployments import run_deployment

    from evalsentry.evaluation.pipeline import outcomes_of_run
    from evalsentry.history.store import History

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(FAN_OUT_DEPLOYMENT)
        pool, queue = deployment.work_pool_name, deployment.work_queue_name or "default"
        if client.read_work_queue_by_name(queue, pool).status != WorkQueueStatus.READY:
            raise UsageError(
                f"no worker has polled work queue {queue!r} of pool {pool!r} in the last minute: "
                f"start one per GPU host (prefect worker start --pool {pool} --work-queue {queue} "
                "--limit 1)"
            )
    children = [
        cast(
            "FlowRun",
            run_deployment(
                FAN_OUT_DEPLOYMENT,
                parameters={
                    "model": target.model,
                    "version": target.version,
                    "evalset": evalset.spec.name,
                    "week": run.week,
                    "run_id": run.run_id,
                    "device": run.device,
                    "config_path": run.config_path,
                    "stages": list(run.stages),
                    "retire": list(retire) if first else [],  # recorded once, by the first
                },
                timeout=0,
            ),
        )
        for first, (target, evalset, _) in zip(
            [True] + [False] * (len(jobs) - 1), jobs, strict=True
        )
    ]
    with get_client(sync_client=True) as client:
        for child in children:
            while not (state := client.read_flow_run(child.id).state) or not state.is_final():
                time.sleep(FAN_OUT_POLL_S)
            if not state.is_completed():
                raise UsageError(f"child flow run {child.name} ended {state.name}: {state.message}")
    return outcomes_of_run(History(run.settings.store_url), run.run_id)
