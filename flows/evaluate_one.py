"""One checkpoint on one evalset for a week, as a child flow run.

`weekly_eval(fan_out=True)` starts one per (checkpoint, evalset) on the `gpu` work pool, so N
workers on N hosts share the week.
"""

from __future__ import annotations

from prefect import flow, runtime
from prefect.client.schemas.objects import State
from prefect.states import Completed

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.evaluation.pipeline import Outcome, Target
from evalsentry.flows.runs import short_id, tag_run
from evalsentry.gate.verdicts import brief_reason
from evalsentry.names import WEEKLY_RUN, WEEKLY_STAGES
from evalsentry.tasks.evalsets import check_evalset, load_evalset
from evalsentry.tasks.evaluate import evaluate_checkpoint, on_device
from evalsentry.tasks.history import write_history


def _run_name() -> str:
    """``evaluate-one-<model>-v<version>-<evalset>-<week>-<the parent run's id, short>``.

    The parent's flow run id, as its own name ends, tells apart the children of a re-run or a
    backfill of a week and leads from a child to its parent; a child started by hand (no
    parent) ends with its own id.
    """
    parameters = runtime.flow_run.parameters
    parent = runtime.flow_run.parent_flow_run_id
    return (
        f"evaluate-one-{parameters.get('model')}-v{parameters.get('version')}-"
        f"{parameters.get('evalset')}-{parameters.get('week')}-{short_id(parent)}"
    )


@flow(name="evaluate-one", flow_run_name=_run_name)
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
) -> State:
    """Evaluate one registered version on one evalset and append it to the history under ``run_id``.

    A checkpoint that fails is recorded as an error row (the parent's gate reports it).

    Args:
        model: The model line.
        version: Its registered version.
        evalset: The evalset to evaluate it on.
        week: The parent run's ISO week.
        run_id: The parent run's id: the row is recorded under it.
        device: auto (a GPU when there is one), cpu, cuda or cuda:N.
        config_path: The project's evalsentry.yaml, relative to the run's working directory.
        stages: What the parent run evaluates of each line (default: production, candidate).
        retire: The week's rows the parent's plan retires, when this child records them.
    """
    tag_run([f"week:{week}", f"model:{model}"])
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
    result = {
        "evaluation_id": outcome.evaluation["evaluation_id"],
        "status": outcome.evaluation["status"],
    }
    return Completed(message=recorded_line(outcome), data=result)


def recorded_line(outcome: Outcome) -> str:
    """What the child recorded, as its state message (an error row: its reason).

    ``2026-W40: digits@v3 on digits: ok, accuracy 0.9712; the parent run gates the week``.
    """
    row = outcome.evaluation
    head = f"{row['week']}: {row['model']}@v{row['version']} on {row['evalset']}"
    if row["status"] != "ok":
        return f"{head}: ERROR {brief_reason(str(row.get('error') or row['status']))}"
    shown = ", ".join(f"{m['metric']} {m['value']:.4f}" for m in outcome.metrics if not m["slice"])
    return f"{head}: ok, {shown or 'no metric'}; the parent run gates the week"
