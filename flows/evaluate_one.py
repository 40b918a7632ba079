"""One checkpoint on one evalset for a week, as a child flow run.

`weekly_eval(fan_out=True)` starts one per (checkpoint, evalset) on the `gpu` work pool, so N
workers on N hosts share the week.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from evalsentry.config import load_config
from evalsentry.pipeline import Target
from evalsentry.registry import Registry
from evalsentry.tasks.evalsets import load_evalset, validate_evalset
from evalsentry.tasks.evaluate import evaluate, on_device
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
    config: str = "evalsentry.yaml",
) -> dict[str, Any]:
    """Evaluate one registered version on one evalset and append it to the history under ``run_id``.

    A checkpoint that fails is recorded as an error row (the parent's gate reports it).
    """
    settings = load_config(config)
    target = Target.from_entry(Registry(settings.registry_url).show(model, version))
    validation = validate_evalset(evalset, settings.evalsets_dir)
    loaded = load_evalset(evalset, settings.evalsets_dir)
    outcome = on_device(evaluate, device)(
        target,
        loaded,
        config=settings,
        run_id=run_id,
        week=week,
        kind="scheduled",
        device=device,
        validation=validation,
    )
    write_history(settings.store_url, [outcome])
    return {
        "evaluation_id": outcome.evaluation["evaluation_id"],
        "status": outcome.evaluation["status"],
    }
