"""One checkpoint on one evalset for a week, as a child flow run.

`weekly_eval(fan_out=True)` starts one per (checkpoint, evalset) on the `gpu` work pool, so N
workers on N hosts share the week.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from evalsentry.config import load_config
from evalsentry.names import WEEKLY_RUN, WEEKLY_STAGES
from evalsentry.pipeline import Target
from evalsentry.registry import Registry
from evalsentry.tasks.evalsets import check_evalset, load_evalset
from evalsentry.tasks.evaluate import evaluate_checkpoint, on_device
from evalsentry.tasks.history import write_history


# The parent's run id, shortened, tells apart the children of a re-run or a backfill of a week.
@flow(
    name="evaluate-one",
    flow_run_name="evaluate-one-{model}-v{version}-{evalset}-{week}-{run_id:.6}",
)
def evaluate_one(
    model: str,
    version: int,
    evalset: str,
    week: str,
    run_id: str,
    device: str = "auto",
    config_path: str = "evalsentry.yaml",
    stages: list[str] | None = None,
    retire: list[str] | None = None,
) -> dict[str, Any]:
    """Evaluate one registered version on one evalset and append it to the history under ``run_id``.

    A checkpoint that fails is recorded as an error row (the parent's gate reports it).

    Args:
        config_path: The project's evalsentry.yaml, relative to the run's working directory.
        stages: What the parent run evaluates of each line (default: production, candidate).
        retire: The week's rows the parent's plan retires, when this child records them.
    """
    settings = load_config(config_path)
    target = Target.from_entry(Registry(settings.registry_url).show(model, version))
    validation = check_evalset(evalset, settings.evalsets_dir)
    loaded = load_evalset(evalset, settings.evalsets_dir)
    outcome = on_device(evaluate_checkpoint, device)(
        target,
        loaded,
        config=settings,
        run_id=run_id,
        week=week,
        kind=WEEKLY_RUN,
        device=device,
        validation=validation,
    )
    write_history(settings.store_url, [outcome], stages or WEEKLY_STAGES, retire or [])
    return {
        "evaluation_id": outcome.evaluation["evaluation_id"],
        "status": outcome.evaluation["status"],
    }
