"""The weekly evaluation: verify data, evaluate every checkpoint, record, gate, report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from prefect import flow, get_run_logger, runtime
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext

from evalsentry.config import Config, load_config
from evalsentry.cost import CostMeter
from evalsentry.drift import DriftResult
from evalsentry.errors import (
    ConfigError,
    EvalsentryError,
    HistoryError,
    RegistryError,
    UsageError,
)
from evalsentry.evalsets import Evalset, list_evalsets
from evalsentry.flows.dask_cluster import dask_runner
from evalsentry.flows.runs import RUN_ID_CHARS, fail, short_id
from evalsentry.gate import Comparison, GateReport, Verdict
from evalsentry.history import History
from evalsentry.isolation import prestart
from evalsentry.names import WEEKLY_RUN
from evalsentry.pipeline import (
    WEEKLY_STAGES,
    Outcome,
    Target,
    binding_text,
    check_bindings,
    new_run_id,
    pair_targets,
    tolerance_warnings,
)
from evalsentry.tasks import events
from evalsentry.tasks.drift import check_drift
from evalsentry.tasks.evalsets import check_evalset, load_evalset
from evalsentry.tasks.evaluate import evaluate_checkpoint, on_device, time_against_previous_week
from evalsentry.tasks.gate import gate_week
from evalsentry.tasks.history import write_comparisons, write_drift, write_history
from evalsentry.tasks.registry import resolve_targets
from evalsentry.tasks.report import publish_report
from evalsentry.weeks import check_week, iso_week, now_utc


def resolve_week(week: str | None) -> str:
    """An explicit week (a backfill), else the ISO week of the run's scheduled start."""
    if week:
        return check_week(week)
    scheduled = runtime.flow_run.scheduled_start_time
    return iso_week(scheduled if scheduled is not None else now_utc())


def run_trigger(week: str | None) -> str:
    """``scheduled`` (made by a deployment schedule), ``backfill`` (an earlier week), or ``manual``.

    For the run name only: every weekly run records its rows as ``kind`` ``WEEKLY_RUN``.
    """
    context = FlowRunContext.get()
    if context is not None and context.flow_run is not None and context.flow_run.auto_scheduled:
        return "scheduled"
    if week and check_week(week) < resolve_week(None):
        return "backfill"
    return "manual"


def _run_name() -> str:
    """``weekly-eval-<week>-<scheduled|manual|backfill>-<id>``; a report file is named the same."""
    week = runtime.flow_run.parameters.get("week")
    try:
        return f"weekly-eval-{resolve_week(week)}-{run_trigger(week)}-{short_id()}"
    except EvalsentryError:  # the flow itself fails on the bad week, with the message
        return f"weekly-eval-invalid-week-{short_id()}"


def _verdict(report: GateReport, drifted: Sequence[DriftResult]) -> State:
    """The Failed end of a week: headline first, one line per FAIL, ERROR and failed drift."""
    drift = [
        " ".join(filter(None, ["DRIFT", d.evalset, d.model, f"{d.feature}:"]))
        + f" PSI {d.psi:.3f}, p={d.p_adjusted:.2g}"
        for d in drifted
    ]
    if report.problems:
        headline = report.headline() + (f", drift in {len(drift)} feature(s)" if drift else "")
    else:
        headline = f"{report.week}: {drift[0]}" + (
            f" and {len(drift) - 1} more" if len(drift) > 1 else ""
        )
    failed: State = fail(headline, [c.describe() for c in report.problems] + drift)
    return failed


def _warn(lines: Sequence[str]) -> None:
    """Log each line as a warning of the flow run (one line each, nothing fails)."""
    logger = get_run_logger()
    for line in lines:
        logger.warning(line)


Job = tuple[Target, Evalset, dict[str, Any]]


@dataclass(frozen=True)
class RunContext:
    """What every evaluation of one weekly run shares."""

    settings: Config  # the loaded project config
    config_path: str  # the file it came from: the flow's ``config_path`` parameter
    run_id: str
    week: str
    device: str


def _evaluate_jobs(
    jobs: Sequence[Job], run: RunContext, meter: CostMeter | None, runner: Any = None
) -> list[Outcome]:
    """Submit one evaluate task per (checkpoint, evalset), to ``runner`` or the flow's own."""
    inference = on_device(evaluate_checkpoint, run.device)
    futures = []
    for target, evalset, validation in jobs:
        parameters: dict[str, Any] = {  # the Dask runner takes them as a mapping
            "target": target,
            "evalset": evalset,
            "config": run.settings,
            "run_id": run.run_id,
            "week": run.week,
            "kind": WEEKLY_RUN,
            "device": run.device,
            "meter": meter,
            "validation": validation,
        }
        futures.append(
            runner.submit(inference, parameters) if runner else inference.submit(**parameters)
        )
    return [f.result() for f in futures]


FAN_OUT_DEPLOYMENT = "evaluate-one/evaluate-one"
FAN_OUT_POLL_S = 2.0


def _fan_out(jobs: Sequence[Job], run: RunContext) -> list[Outcome]:
    """Run each job as a child flow run of the `evaluate-one` deployment; gather from the history.

    Fails first when no worker polls the deployment's work queue: the children would wait forever.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import FlowRun, WorkQueueStatus
    from prefect.deployments import run_deployment

    from evalsentry.history import History
    from evalsentry.pipeline import outcomes_of_run

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
                },
                timeout=0,
            ),
        )
        for target, evalset, _ in jobs
    ]
    with get_client(sync_client=True) as client:
        for child in children:
            while not (state := client.read_flow_run(child.id).state) or not state.is_final():
                time.sleep(FAN_OUT_POLL_S)
            if not state.is_completed():
                raise UsageError(f"child flow run {child.name} ended {state.name}: {state.message}")
    return outcomes_of_run(History(run.settings.store_url), run.run_id)


def _validate_all(
    names: Sequence[str], evalsets_dir: str, week: str
) -> tuple[dict[str, dict[str, Any]], list[Comparison]]:
    """Verify and validate each evalset once; an invalid one becomes an ERROR and an event."""
    validations: dict[str, dict[str, Any]] = {}
    invalid: list[Comparison] = []
    for name in names:
        try:
            validations[name] = check_evalset(name, evalsets_dir)
        except EvalsentryError as exc:
            get_run_logger().error("evalset %s is invalid: %s", name, exc)
            validations[name] = {"success": False, "error": str(exc)}
            invalid.append(
                Comparison.not_evaluated(
                    week, f"evalset invalid, nothing evaluated: {exc}", evalset=name
                )
            )
            events.evalset_invalid(name, str(exc), week)
    return validations, invalid


def _evaluate_and_record(
    jobs: Sequence[Job],
    run: RunContext,
    task_runner: str,
    dask_address: str | None,
    fan_out: bool,
) -> list[Outcome]:
    """Run the jobs where asked (threads, Dask, or child flow runs) and append them to the history."""
    if fan_out:  # the child runs append their own results
        return _fan_out(jobs, run)
    if task_runner == "dask":  # each worker measures its own energy
        with dask_runner(dask_address) as runner:
            outcomes = _evaluate_jobs(jobs, run, None, runner)
    elif task_runner == "thread":
        meter = CostMeter()
        try:
            outcomes = _evaluate_jobs(jobs, run, meter)
        finally:
            meter.close()
    else:
        raise UsageError(f"task_runner {task_runner!r}: use thread or dask")
    if outcomes:
        write_history(run.settings.store_url, outcomes)
    return outcomes


@flow(name="weekly-eval", flow_run_name=_run_name, log_prints=True)
def weekly_eval(
    week: str | None = None,
    models: list[str] | None = None,
    evalsets: list[str] | None = None,
    stages: Sequence[str] = WEEKLY_STAGES,
    device: str = "auto",
    config_path: str = "evalsentry.yaml",
    task_runner: str = "thread",
    dask_address: str | None = None,
    fan_out: bool = False,
) -> Any:
    """Evaluate the registered checkpoints on the frozen evalsets and gate the week.

    Ends Failed, naming each regression or error, when the gate finds any; Completed otherwise
    (an INCONCLUSIVE comparison is logged as a warning, and fails the run only with
    ``gate.strict: true`` in the config).
    ``task_runner="dask"`` runs the evaluations on the Dask scheduler at ``dask_address`` (or a
    local cluster of two worker processes). ``fan_out=True`` starts one ``evaluate-one`` child
    flow run per (checkpoint, evalset) on the ``gpu`` work pool, so the workers polling it share
    the week; this run waits for them, then gates and reports.

    Args:
        config_path: The project's evalsentry.yaml, relative to the run's working directory.
    """
    logger = get_run_logger()
    settings = load_config(config_path)
    week = resolve_week(week)
    run_id = new_run_id()
    try:
        History(settings.store_url).check_root()  # in seconds, not after the week's inference
    except HistoryError as exc:
        return fail(f"{week}: ERROR the store is unusable", [str(exc)])
    try:
        targets = resolve_targets(settings.registry_url, models, list(stages))
    except RegistryError as exc:  # nothing to evaluate is never a pass
        return fail(f"{week}: ERROR nothing to evaluate", [str(exc)])
    available = list_evalsets(settings.evalsets_dir)
    try:
        check_bindings(settings, available)
    except ConfigError as exc:
        return fail(f"{week}: ERROR the config does not fit the evalsets", [str(exc)])
    pairs, unbound = pair_targets(targets, settings, available, evalsets)
    _warn(tolerance_warnings(settings, sorted({name for _, name in pairs})))  # the run goes on
    # A named evalset that does not exist is validated anyway: its ERROR says so.
    names = sorted({name for _, name in pairs} | set(evalsets or ()) - set(available))
    logger.info(
        "%s: %d evaluation(s) of %d checkpoint(s) on %d evalset(s), history run id %s",
        week,
        len(pairs),
        len(targets),
        len(names),
        run_id,
    )
    for reason in unbound.values():
        logger.error(reason)

    if pairs and task_runner == "thread" and not fan_out:
        prestart()  # the evaluation process imports torch while the evalsets are validated
    validations, not_evaluated = _validate_all(names, settings.evalsets_dir, week)
    not_evaluated += [
        Comparison.not_evaluated(week, reason, model=model) for model, reason in unbound.items()
    ]
    loaded = {
        name: load_evalset(name, settings.evalsets_dir)
        for name in names
        if validations[name].get("success")
    }
    jobs = [(target, loaded[name], validations[name]) for target, name in pairs if name in loaded]
    run = RunContext(settings, config_path, run_id, week, device)
    outcomes = _evaluate_and_record(jobs, run, task_runner, dask_address, fan_out)
    drifts = [
        d
        for evalset in loaded.values()
        if evalset.spec.name in settings.drift.live
        for d in on_device(check_drift, device)(evalset, outcomes, settings, device)
    ]
    for outcome in outcomes:
        if not outcome.ok:
            events.checkpoint_failed(outcome.evaluation)
    # Timing needs the device the evaluations ran on: this process's, on the thread runner.
    slowdowns = (
        time_against_previous_week(outcomes, loaded, settings, week, device)
        if task_runner == "thread" and not fan_out
        else []
    )

    report = gate_week(settings.store_url, week, settings.gate, settings.evalsets_dir, models)
    # When nothing ran because of invalid evalsets or unbound models, their ERROR rows say
    # why; the gate's "nothing evaluated" would only repeat it.
    report = GateReport(
        week,
        not_evaluated + (report.comparisons if outcomes or not not_evaluated else []) + slowdowns,
        report.strict,
    )
    created = now_utc()
    write_comparisons(
        settings.store_url, [c.row(run_id, created) for c in report.comparisons if c.recorded]
    )
    write_drift(settings.store_url, [d.row(run_id, week) for d in drifts])
    for result in drifts:
        if result.verdict != Verdict.PASS:
            events.drift(result, week)
    location = publish_report(
        settings.store_url,
        report,
        outcomes,
        validations,
        run_name=runtime.flow_run.name or f"weekly-eval-{week}-{run_id[:RUN_ID_CHARS]}",
        drifts=drifts,
        config=settings,
        bindings={t.model: binding_text(t.model, settings, available) for t in targets},
    )
    logger.info("report: %s", location)
    # INCONCLUSIVE is reported like a WARN (the run completes) unless gate.strict is set,
    # which makes it a problem of the week like a FAIL.
    for comparison in report.warnings + (report.inconclusive if not report.strict else []):
        logger.warning(comparison.describe())

    bad = report.problems
    for comparison in bad:
        events.regression(comparison, week)
    drifted = [d for d in drifts if d.verdict == Verdict.FAIL] if settings.drift.fail_run else []
    if bad or drifted:
        events.week_failed(report, drifted)  # the one alert of a failed week
        return _verdict(report, drifted)
    return {
        "week": week,
        "verdict": str(report.verdict),
        "warnings": [c.describe() for c in report.warnings],
        "inconclusive": [c.describe() for c in report.possible_regressions],
        "unresolved": [c.describe() for c in report.unresolved],
        "evaluations": len(outcomes),
        "drift": {d.feature + (f"@{d.model}" if d.model else ""): str(d.verdict) for d in drifts},
        "report": location,
    }
