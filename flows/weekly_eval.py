"""The weekly evaluation: verify data, evaluate every checkpoint, record, gate, report."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from prefect import flow, get_run_logger, runtime
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import Config, load_config
from evalsentry.cost.meter import CostMeter
from evalsentry.errors import (
    ConfigError,
    EvalsentryError,
    HistoryError,
    UsageError,
)
from evalsentry.evalsets.evalset import Evalset, list_evalsets
from evalsentry.evaluation import planning
from evalsentry.evaluation.isolation import prestart
from evalsentry.evaluation.pipeline import Outcome, Target, new_run_id, week_results
from evalsentry.evaluation.planning import WeekPlan, binding_text, not_evaluated, tolerance_warnings
from evalsentry.flows.dask_cluster import dask_runner
from evalsentry.flows.fan_out import fan_out
from evalsentry.flows.runs import (
    RUN_ID_CHARS,
    complete,
    fail,
    quiet_domain_errors,
    short_id,
    tag_run,
)
from evalsentry.flows.week_alert import alert_failed_week, hold_alert
from evalsentry.gate.drift import DriftResult
from evalsentry.gate.verdicts import Comparison
from evalsentry.gate.week import GateReport, Verdict
from evalsentry.history.store import History
from evalsentry.names import WEEKLY_RUN, WEEKLY_STAGES
from evalsentry.reports.report import run_scope
from evalsentry.tasks import events
from evalsentry.tasks.drift import check_drift
from evalsentry.tasks.evalsets import check_evalset, check_split_leaks, load_evalset
from evalsentry.tasks.evaluate import evaluate_checkpoint, on_device, time_against_previous_week
from evalsentry.tasks.gate import gate_week
from evalsentry.tasks.history import write_comparisons, write_drift, write_history
from evalsentry.tasks.registry import plan_week
from evalsentry.tasks.report import publish_report
from evalsentry.weeks import check_begun, check_week, iso_week, now_utc, week_start, weeks_in_order


def resolve_week(week: str | None) -> str:
    """An explicit week (a backfill; never one not yet begun), else the scheduled start's week."""
    if week:
        return check_begun(week)
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
    stages: tuple[str, ...] = WEEKLY_STAGES  # what it evaluates of each model line


def _bindings(settings: Config, evaluations: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Each model line of the week and the evalsets it is evaluated on, in words."""
    available = list_evalsets(settings.evalsets_dir)
    return {
        model: binding_text(model, settings, available)
        for model in sorted({str(e["model"]) for e in evaluations})
    }


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


def _validate_all(
    names: Sequence[str], evalsets_dir: str, week: str
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Verify and validate each evalset once; an invalid one is logged, with an event.

    Returns:
        Each evalset's validation result, and for each invalid one why.
    """
    validations: dict[str, dict[str, Any]] = {}
    invalid: dict[str, str] = {}
    for name in names:
        try:
            validations[name] = check_evalset(name, evalsets_dir)
        except EvalsentryError as exc:
            get_run_logger().error("evalset %s is invalid: %s", name, exc)
            validations[name] = {"success": False, "error": str(exc)}
            invalid[name] = str(exc)
            events.evalset_invalid(name, str(exc), week)
    return validations, invalid


def _evaluate_and_record(
    jobs: Sequence[Job],
    run: RunContext,
    runner: RunnerChoice,
    not_evaluated: Sequence[Outcome],
    retire: Sequence[str],
) -> list[Outcome]:
    """Run the jobs where asked (threads, Dask, or child flow runs); record them in the history.

    ``not_evaluated`` (the pairs that could not run: an unbound line, an invalid evalset, a line
    no run of the week covered) are recorded with them, one commit for the run, which also
    lists the rows it ``retire``s. Fanned out, each child records its own result, and the
    retired rows go with the parent's ERROR rows, or else with the first child's.
    """
    if runner.fan_out:  # the child runs append their own results
        outcomes = fan_out(jobs, run, [] if not_evaluated else retire) if jobs else []
    elif runner.task_runner == "dask":  # each worker measures its own energy
        with dask_runner(runner.dask_address) as dask:
            outcomes = _evaluate_jobs(jobs, run, None, dask)
    elif runner.task_runner == "thread":
        meter = CostMeter()
        try:
            outcomes = _evaluate_jobs(jobs, run, meter)
        finally:
            meter.close()
    else:
        raise UsageError(f"task_runner {runner.task_runner!r}: use thread or dask")
    unrecorded = list(not_evaluated) if runner.fan_out else [*outcomes, *not_evaluated]
    if unrecorded:
        write_history(run.settings.store_url, unrecorded, run.stages, retire)
    return outcomes


@dataclass(frozen=True)
class RunnerChoice:
    """Where the evaluations run: the flow's threads, Dask, or child flow runs."""

    task_runner: str = "thread"
    dask_address: str | None = None
    fan_out: bool = False

    @property
    def times_here(self) -> bool:
        """Paired timing needs the device the evaluations ran on: this process's (threads)."""
        return self.task_runner == "thread" and not self.fan_out


def _label(week: str | None) -> str:
    """The week a run's messages lead with: the resolved week, or what was given."""
    try:
        return resolve_week(week)
    except EvalsentryError:
        return str(week)


@flow(
    name="weekly-eval",
    flow_run_name=_run_name,
    log_prints=True,
    on_failure=[alert_failed_week],
)
def weekly_eval(
    week: str | None = None,
    models: list[str] | None = None,
    evalsets: list[str] | None = None,
    stages: Sequence[str] = WEEKLY_STAGES,
    device: str = "auto",
    config_path: str = "evalsentry.yaml",
    task_runner: Literal["thread", "dask"] = "thread",
    dask_address: str | None = None,
    fan_out: bool = False,
) -> State:
    """Evaluate the registered checkpoints on the frozen evalsets and gate the week.

    Ends Failed, naming each regression or error, when the gate finds any; Completed otherwise,
    its state message the week's verdict (an INCONCLUSIVE comparison or drift is logged as a
    warning, and fails the run only with ``gate.strict`` or ``drift.fail_run`` in the config).
    Every Failed run sends one ``evalsentry.week.failed`` event (:func:`alert_failed_week`).
    ``task_runner="dask"`` runs the evaluations on the Dask scheduler at ``dask_address`` (or a
    local cluster of two worker processes). ``fan_out=True`` starts one ``evaluate-one`` child
    flow run per (checkpoint, evalset) on the ``gpu`` work pool, so the workers polling it share
    the week; this run waits for them, then gates and reports.

    Args:
        week: ISO week to record, e.g. 2026-W49 (a backfill); empty: the week of the run's
            scheduled start. A week that has not begun is refused.
        models: Only these model lines (a partial run); empty: every registered line.
        evalsets: Only these evalsets; empty: each line's bound evalsets.
        stages: Registry stages to evaluate: production, candidate.
        device: auto (a GPU when there is one), cpu, cuda or cuda:N.
        config_path: The project's evalsentry.yaml, relative to the run's working directory.
        task_runner: Where the evaluations run: thread (this process) or dask.
        dask_address: The Dask scheduler for task_runner dask; empty: a local cluster.
        fan_out: One evaluate-one child flow run per checkpoint and evalset, on the gpu pool.
    """
    quiet_domain_errors()
    try:
        return _week(
            week, models, evalsets, stages, device, config_path, task_runner, dask_address, fan_out
        )
    except EvalsentryError as exc:  # unusable input: its reason, in one line, no traceback
        return fail(f"{_label(week)}: ERROR {exc}", [])
    except Exception as exc:  # noqa: BLE001 - a bug, or a failure nobody worded: its traceback is logged
        get_run_logger().exception("the weekly run stopped on an unexpected error")
        return fail(
            f"{_label(week)}: ERROR the run stopped: {type(exc).__name__}: {exc}",
            ["the traceback is in the run's log"],
        )


def _week(
    week: str | None,
    models: list[str] | None,
    evalsets: list[str] | None,
    stages: Sequence[str],
    device: str,
    config_path: str,
    task_runner: str,
    dask_address: str | None,
    fan_out: bool,
) -> State:
    """The weekly run's body: plan, evaluate and record, gate the week, publish, end."""
    week = resolve_week(week)
    settings = load_config(config_path)
    try:
        History(settings.store_url).check_writable()  # in seconds, not after the inference
    except HistoryError as exc:
        return fail(f"{week}: ERROR the store is unusable", [str(exc)])
    run = RunContext(settings, config_path, new_run_id(), week, device, tuple(stages))
    tag_run([f"week:{week}"])
    try:
        plan = plan_week(settings, week, run.run_id, models, evalsets, stages)
    except ConfigError as exc:
        return fail(f"{week}: ERROR the config does not fit the evalsets", [str(exc)])
    except UsageError as exc:  # nothing to evaluate is never a pass
        if models is None and evalsets is None and _imports_only(settings):
            return complete(f"{week}: {NOTHING_CONFIGURED}", logging.INFO, [], {"week": week})
        return fail(f"{week}: ERROR nothing to evaluate", [str(exc)])
    lines = {t.model for t, _ in plan.pairs} | {str(e.evaluation["model"]) for e in plan.errors}
    tag_run([f"week:{week}", *(f"model:{line}" for line in sorted(lines))])
    ran = _run_plan(run, plan, RunnerChoice(task_runner, dask_address, fan_out))
    # The verdict of the week, whatever runs recorded it: the same gate as `evalsentry gate`,
    # the week's recorded drift included.
    report = gate_week(settings.store_url, week, settings)
    return _publish(run, report, ran, plan.partial)


#: A harness-only project's weekly-eval run: Completed, no alert (import-results gates it).
NOTHING_CONFIGURED = (
    "nothing configured: no checkpoint is registered or bound, and the results are imported "
    "(imports:); import-results gates them"
)


def _imports_only(settings: Config) -> bool:
    return planning.imports_only(
        settings, Registry(settings.registry_url), History(settings.store_url)
    )


@dataclass(frozen=True)
class Ran:
    """What one weekly run did: its evaluations, the evalsets' validations, live drift."""

    outcomes: list[Outcome]
    validations: dict[str, dict[str, Any]]
    drifts: list[DriftResult]
    timed: list[Comparison]  # paired timing's and split leaks' verdicts, recorded as measured


def _run_plan(run: RunContext, plan: WeekPlan, runner: RunnerChoice) -> Ran:
    """Validate, evaluate, record the plan's pairs (and ERROR rows); drift, split leaks, timing."""
    logger = get_run_logger()
    settings, week = run.settings, run.week
    names = sorted({name for _, name in plan.pairs})
    logger.info(
        "%s: %d evaluation(s) on %d evalset(s)%s, history run id %s",
        week,
        len(plan.pairs),
        len(names),
        f" (a partial run: {plan.partial})" if plan.partial else "",
        run.run_id,
    )
    for outcome in plan.errors:
        logger.error(outcome.evaluation["error"])
    _warn(tolerance_warnings(settings, names))  # the run goes on
    if plan.pairs and runner.times_here:
        prestart()  # the evaluation process imports torch while the evalsets are validated
    validations, invalid = _validate_all(names, settings.evalsets_dir, week)
    errors = plan.errors + [
        not_evaluated(
            target,
            name,
            f"the evalset is invalid: {invalid[name]}",
            run_id=run.run_id,
            week=week,
        )
        for target, name in plan.pairs
        if name in invalid
    ]
    loaded = {
        name: load_evalset(name, settings.evalsets_dir) for name in names if name not in invalid
    }
    jobs = [(t, loaded[name], validations[name]) for t, name in plan.pairs if name in loaded]
    outcomes = _evaluate_and_record(jobs, run, runner, errors, plan.retired)
    for outcome in outcomes:
        if not outcome.ok:
            events.checkpoint_failed(outcome.evaluation)
    drifts = [
        d
        for evalset in loaded.values()
        if evalset.spec.name in settings.drift.live
        for d in on_device(check_drift, run.device)(evalset, outcomes, settings, run.device)
    ]
    write_drift(settings.store_url, [d.row(run.run_id, week) for d in drifts])
    # Recorded before the gate of the week, which reads them: split leaks, paired timing.
    measured: list[Comparison] = []
    if any(b.train_data for b in settings.models.values()):
        measured += check_split_leaks([o.evaluation for o in outcomes if o.ok], loaded, settings)
    if runner.times_here:
        measured += time_against_previous_week(outcomes, loaded, settings, week, run.device)
    if measured:
        write_comparisons(settings.store_url, [c.row(run.run_id, now_utc()) for c in measured])
    return Ran(outcomes, validations, drifts, measured)


def _unrecorded(report: GateReport, ran: Ran) -> list[Comparison]:
    """The report's verdicts this run has yet to record.

    All but the paired timing and split leaks it recorded as measured (the gate read them back).
    """
    timed = {(c.evaluation_id, c.metric, c.reference) for c in ran.timed}
    return [
        c
        for c in report.comparisons
        if c.recorded and (c.evaluation_id, c.metric, c.reference) not in timed
    ]


def _regate_next_week(run: RunContext) -> None:
    """A later week already gated is gated again: its previous week is now this one.

    Recording an earlier week after a later one (a backfill) changes what "previous week"
    meant for the next later week with results. Its verdicts are recorded again, so the
    history, ``evalsentry gate`` and a raw query tell its new story; its own run's state and
    alert stay as they were, and this run's log says what changed.
    """
    history = History(run.settings.store_url)
    weeks = weeks_in_order(history.evaluations(kind=WEEKLY_RUN)["week"])
    later = [w for w in weeks if week_start(w) > week_start(run.week)]
    if not later:
        return
    again = gate_week(run.settings.store_url, later[0], run.settings)
    write_comparisons(
        run.settings.store_url,
        [c.row(run.run_id, now_utc()) for c in again.comparisons if c.recorded],
    )
    get_run_logger().warning(
        "%s was gated before %s was recorded; gated again against it: %s",
        later[0],
        run.week,
        again.headline(),
    )


def _failure_details(report: GateReport) -> list[tuple[int, str]]:
    """A failed week's lines: what failed it at ERROR; drift and notes beside it, lower."""
    notes = [c for c in report.inconclusive if c not in report.problems]
    return [
        *((logging.ERROR, c.describe()) for c in report.problems),
        *((logging.INFO, change) for change in report.changes),
        *(
            (logging.ERROR if d in report.drift_failures else logging.WARNING, d.describe())
            for d in report.drifted
        ),
        *((logging.INFO if c.unresolved else logging.WARNING, c.describe()) for c in notes),
    ]


def _publish(run: RunContext, report: GateReport, ran: Ran, partial: str | None) -> State:
    """Record the week's verdicts, publish its report and artifacts; the run's end, its verdict.

    The report covers every current result of the week (whichever run recorded it), and a
    partial run's says what the run itself evaluated. The end state's message is the week's
    headline, and the run's log opens on it and its details.
    """
    settings, week = run.settings, run.week
    write_comparisons(
        settings.store_url, [c.row(run.run_id, now_utc()) for c in _unrecorded(report, ran)]
    )
    _regate_next_week(run)
    for drifted in ran.drifts:
        if drifted.verdict != Verdict.PASS:
            events.drift(drifted, week)
    evaluations, metrics = week_results(History(settings.store_url), week)
    location = publish_report(
        settings.store_url,
        report,
        evaluations,
        metrics,
        ran.validations,
        run_name=runtime.flow_run.name or f"weekly-eval-{week}-{run.run_id[:RUN_ID_CHARS]}",
        drifts=list(report.drift),
        config=settings,
        bindings=_bindings(settings, evaluations),
        scope=run_scope(ran.outcomes, partial),
    )
    for comparison in report.problems:
        events.regression(comparison, week)
    if report.failed:
        hold_alert(week, report)
        return fail(
            report.headline(), [*_failure_details(report), (logging.INFO, f"report: {location}")]
        )
    # INCONCLUSIVE is reported like a WARN (the run completes) unless gate.strict is set,
    # which makes it a problem of the week like a FAIL; drift is a WARN unless drift.fail_run.
    details = [(logging.WARNING, d.describe()) for d in report.drifted]
    details += [
        (logging.WARNING, c.describe())
        for c in report.warnings + (report.inconclusive if not report.strict else [])
    ]
    result = {
        "week": week,
        "verdict": str(report.verdict),
        "warnings": [c.describe() for c in report.warnings],
        "inconclusive": [c.describe() for c in report.possible_regressions],
        "unresolved": [c.describe() for c in report.unresolved],
        "evaluations": len(evaluations),
        "evaluated_by_this_run": len(ran.outcomes),
        "partial": partial,
        "drift": {d.label: str(d.verdict) for d in report.drift},
        "report": location,
    }
    if any(d.verdict == Verdict.FAIL for d in report.drifted):  # not the model: the data moved
        events.week_drifted(report)
    level = logging.INFO if report.verdict == Verdict.PASS else logging.WARNING
    return complete(
        report.headline(), level, [*details, (logging.INFO, f"report: {location}")], result
    )
