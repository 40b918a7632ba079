"""The weekly evaluation: verify data, evaluate every checkpoint, record, gate, report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import flow, get_run_logger, runtime
from prefect.states import Failed

from evalsentry.config import Config, load_config
from evalsentry.cost import CostMeter
from evalsentry.errors import EvalsentryError, UsageError
from evalsentry.evalsets import Evalset, list_evalsets
from evalsentry.gate import Comparison, GateReport, Verdict
from evalsentry.history import iso_week, now_utc
from evalsentry.names import check_week
from evalsentry.pipeline import Outcome, Target, new_run_id
from tasks import events
from tasks.drift import check_drift
from tasks.evalsets import load_evalset, validate_evalset
from tasks.evaluate import evaluate
from tasks.gate import gate_week
from tasks.history import write_comparisons, write_drift, write_history
from tasks.registry import resolve_targets
from tasks.report import publish_report


def resolve_week(week: str | None) -> str:
    """An explicit week (a backfill), else the ISO week of the run's scheduled start."""
    if week:
        return check_week(week)
    scheduled = runtime.flow_run.scheduled_start_time
    return iso_week(scheduled if scheduled is not None else now_utc())


def _run_name() -> str:
    try:
        return f"weekly-eval-{resolve_week(runtime.flow_run.parameters.get('week'))}"
    except EvalsentryError:  # the flow itself fails on the bad week, with the message
        return "weekly-eval-invalid-week"


def _invalid(evalset: str, week: str, error: str) -> Comparison:
    return Comparison(
        evaluation_id="",
        week=week,
        model="*",
        version=None,
        evalset=evalset,
        reference="none",
        metric="*",
        verdict=Verdict.ERROR,
        reason=f"evalset invalid, nothing evaluated: {error}",
    )


Job = tuple[Target, Evalset, dict[str, Any]]


def _evaluate_jobs(
    jobs: Sequence[Job],
    settings: Config,
    run_id: str,
    week: str,
    device: str,
    meter: CostMeter | None,
) -> list[Outcome]:
    """Submit one evaluate task per (checkpoint, evalset) to the current task runner."""
    try:
        futures = [
            evaluate.submit(
                target,
                evalset,
                config=settings,
                run_id=run_id,
                week=week,
                kind="scheduled",
                device=device,
                meter=meter,
                validation=validation,
            )
            for target, evalset, validation in jobs
        ]
        return [f.result() for f in futures]
    finally:
        if meter is not None:
            meter.close()


@flow(name="evaluate-on-dask", flow_run_name="evaluate-on-dask-{week}", validate_parameters=False)
def evaluate_on_dask(
    jobs: list[Job], settings: Config, run_id: str, week: str, device: str
) -> list[Outcome]:
    """The evaluations of a week on a Dask cluster; each worker measures its own energy."""
    return _evaluate_jobs(jobs, settings, run_id, week, device, meter=None)


def _dask_runner(address: str | None) -> Any:
    """A Dask task runner on ``address``, or on a local cluster of two worker processes."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise UsageError(
            "task_runner='dask' needs prefect-dask: pip install 'evalsentry[dask]'"
        ) from None
    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(
        cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "processes": True}
    )


@flow(name="weekly-eval", flow_run_name=_run_name, log_prints=True)
def weekly_eval(
    week: str | None = None,
    models: list[str] | None = None,
    evalsets: list[str] | None = None,
    stages: Sequence[str] = ("production", "candidate"),
    device: str = "auto",
    config: str = "evalsentry.yaml",
    task_runner: str = "thread",
    dask_address: str | None = None,
) -> Any:
    """Evaluate the registered checkpoints on the frozen evalsets and gate the week.

    Ends Failed, naming each regression or error, when the gate finds any; Completed otherwise.
    ``task_runner="dask"`` runs the evaluations on the Dask scheduler at ``dask_address`` (or a
    local cluster of two worker processes).
    """
    logger = get_run_logger()
    settings = load_config(config)
    week = resolve_week(week)
    run_id = new_run_id()
    targets = resolve_targets(settings.registry_url, models, list(stages))
    names = evalsets or list_evalsets(settings.evalsets_dir)
    logger.info("%s: %d checkpoint(s) x %d evalset(s)", week, len(targets), len(names))

    validations: dict[str, dict[str, Any]] = {}
    invalid: list[Comparison] = []
    for name in names:
        try:
            validations[name] = validate_evalset(name, settings.evalsets_dir)
        except EvalsentryError as exc:
            logger.error("evalset %s is invalid: %s", name, exc)
            validations[name] = {"success": False, "error": str(exc)}
            invalid.append(_invalid(name, week, str(exc)))
            events.evalset_invalid(name, str(exc), week)

    loaded = {
        name: load_evalset(name, settings.evalsets_dir)
        for name in names
        if validations[name].get("success")
    }
    jobs = [
        (target, evalset, validations[name])
        for name, evalset in loaded.items()
        for target in targets
    ]
    if task_runner == "dask":
        outcomes = evaluate_on_dask.with_options(task_runner=_dask_runner(dask_address))(
            jobs, settings, run_id, week, device
        )
    elif task_runner == "thread":
        outcomes = _evaluate_jobs(jobs, settings, run_id, week, device, CostMeter())
    else:
        raise UsageError(f"task_runner {task_runner!r}: use thread or dask")
    drifts = [
        d for evalset in loaded.values() for d in check_drift(evalset, outcomes, settings, device)
    ]
    for outcome in outcomes:
        if not outcome.ok:
            events.checkpoint_failed(outcome.evaluation)

    if outcomes:
        write_history(settings.store_url, outcomes)
    report = gate_week(settings.store_url, week, settings.gate, settings.evalsets_dir)
    report = GateReport(week, invalid + report.comparisons)
    created = now_utc()
    write_comparisons(
        settings.store_url, [c.row(run_id, created) for c in report.comparisons if c.evaluation_id]
    )
    write_drift(settings.store_url, [d.row(run_id, week) for d in drifts])
    for result in drifts:
        if result.verdict != "PASS":
            events.drift(result, week)
    location = publish_report(
        settings.store_url, report, outcomes, validations, drifts=drifts, config=settings
    )
    logger.info("report: %s", location)

    bad = report.errors + report.failures
    for comparison in bad:
        events.regression(comparison, week)
    drifted = [d for d in drifts if d.verdict == "FAIL"] if settings.drift.fail_run else []
    if bad or drifted:
        lines = [report.message()] if bad else []
        lines += [
            f"DRIFT {d.evalset} {d.model or ''} {d.feature}: PSI {d.psi:.3f}, p={d.p_adjusted:.2g}"
            for d in drifted
        ]
        return Failed(message="\n".join(lines))
    return {
        "week": week,
        "verdict": str(report.verdict),
        "warnings": [c.describe() for c in report.warnings],
        "evaluations": len(outcomes),
        "drift": {d.feature + (f"@{d.model}" if d.model else ""): d.verdict for d in drifts},
        "report": location,
    }
