"""The inference tasks: evaluating a checkpoint, and timing it against last week's.

On CUDA evaluation is tagged ``gpu`` so a tag concurrency limit can serialise it.
"""

from __future__ import annotations

import atexit
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast
from uuid import UUID

from prefect import Task, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.cost.meter import CostMeter
from evalsentry.evalsets.evalset import Evalset
from evalsentry.evaluation import pipeline
from evalsentry.evaluation.pipeline import Outcome, Target
from evalsentry.evaluation.timing import check_slowdowns, slowdown_pairs
from evalsentry.gate.verdicts import Comparison
from evalsentry.history.store import History
from evalsentry.names import RunKind

#: Fewest seconds between two updates of an inference's progress artifact: each is an API call,
#: and a call per batch cost a worker ~0.5 s per 20k-image evaluation on a busy server.
PROGRESS_INTERVAL_S = 1.0

T = TypeVar("T", bound=Task[Any, Any])


@functools.cache
def process_meter() -> CostMeter:
    """One energy tracker per process, stopped when the process exits (codecarbon takes ~1.5 s to start)."""
    meter = CostMeter()
    atexit.register(meter.close)
    return meter


def on_device(task_: T, device: str) -> T:
    """``task_`` tagged ``gpu`` when ``device`` is CUDA (``auto``: when this process has one).

    A ``gpu`` tag concurrency limit (``prefect concurrency-limit create gpu 1``) then serialises
    GPU work. CPU runs go untagged: each tagged task run takes and frees a slot lease, database
    writes on the API server that cost 0.6 s a task on this 2-core machine under load, and up to
    2 s on Prefect's temporary SQLite server (``python -m bench.bench_scale``).
    """
    from evalsentry.evaluation.inference import resolve_device

    if device == "auto":
        device = resolve_device(device)
    return cast("T", task_.with_options(tags={"gpu"})) if device.startswith("cuda") else task_


@task(
    name="evaluate-checkpoint",
    cache_policy=NO_CACHE,
    task_run_name="evaluate-{target.slug}-on-{evalset.spec.name}",
)
def evaluate_checkpoint(
    target: Target,
    evalset: Evalset,
    *,
    config: Config,
    run_id: str,
    week: str,
    kind: RunKind,
    device: str,
    meter: CostMeter | None = None,
    validation: dict[str, object] | None = None,
) -> Outcome:
    """Evaluate one checkpoint on one evalset; a broken checkpoint or model returns an error outcome.

    ``evalsentry.evaluation.pipeline.evaluate_checkpoint`` with a progress artifact. The model runs in a child process that ``config.inference_timeout_s`` kills (no Prefect
    ``timeout_seconds``: on a task in a thread it only marks the run TimedOut, the thread runs on).

    ``meter`` is the run's energy tracker when tasks share a process (threads); without one (a
    Dask worker, a child flow run) the task uses its process's own tracker, started once.
    """
    artifact_id: UUID | None = cast(  # sync_compatible: a UUID when called from sync code
        "UUID | None",
        create_progress_artifact(
            0.0,
            description=f"Inference of {target.label} on {evalset.spec.name}",
        ),
    )

    last = time.monotonic()

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if artifact_id is not None and (done == total or now - last >= PROGRESS_INTERVAL_S):
            last = now
            update_progress_artifact(artifact_id, 100.0 * done / total)

    return pipeline.evaluate_checkpoint(
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


@task(name="time-against-previous-week", cache_policy=NO_CACHE)
def time_against_previous_week(
    outcomes: Sequence[Outcome],
    evalsets: Mapping[str, Evalset],
    config: Config,
    week: str,
    device: str,
) -> list[Comparison]:
    """Paired timing of each line's new production checkpoint against its previous week's."""
    pairs = slowdown_pairs(outcomes, History(config.store_url), week)
    return check_slowdowns(pairs, evalsets, config, device=device)
