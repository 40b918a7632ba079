"""The inference task, tagged ``gpu`` so a tag concurrency limit can serialise it on a GPU host."""

from __future__ import annotations

import atexit
import functools

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.cost import CostMeter
from evalsentry.evalsets import Evalset
from evalsentry.pipeline import Outcome, Target, evaluate_checkpoint


@functools.cache
def process_meter() -> CostMeter:
    """One energy tracker per process, stopped when the process exits (codecarbon takes ~1.5 s to start)."""
    meter = CostMeter()
    atexit.register(meter.close)
    return meter


@task(
    name="evaluate-checkpoint",
    tags=["gpu"],
    cache_policy=NO_CACHE,
    task_run_name="evaluate-{target.model}-v{target.version}-on-{evalset.spec.name}",
)
def evaluate(
    target: Target,
    evalset: Evalset,
    *,
    config: Config,
    run_id: str,
    week: str,
    kind: str,
    device: str,
    meter: CostMeter | None = None,
    validation: dict[str, object] | None = None,
) -> Outcome:
    """Evaluate one checkpoint on one evalset; a broken checkpoint returns an error outcome.

    ``meter`` is the run's energy tracker when tasks share a process (threads); without one (a
    Dask worker, a child flow run) the task uses its process's own tracker, started once.
    """
    artifact_id = create_progress_artifact(
        0.0, description=f"Inference of {target.model}@v{target.version} on {evalset.spec.name}"
    )

    def progress(done: int, total: int) -> None:
        if artifact_id is not None:
            update_progress_artifact(artifact_id, 100.0 * done / total)

    return evaluate_checkpoint(
        target,
        evalset,
        config=config,
        run_id=run_id,
        week=week,
        kind=kind,
        device=device,
        meter=meter or process_meter(),
        validation=validation,
        progress=progress,
    )
