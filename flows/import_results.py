"""The weekly import: record each configured line's new harness run, gate the week, report."""

from __future__ import annotations

import logging

from prefect import flow, get_run_logger, runtime
from prefect.client.schemas.objects import State

from evalsentry.config import load_config
from evalsentry.errors import EvalsentryError
from evalsentry.flows.runs import complete, fail, quiet_domain_errors, short_id, tag_run
from evalsentry.flows.week_alert import alert_failed_week, hold_alert
from evalsentry.flows.weekly_eval import resolve_week
from evalsentry.gate.week import Verdict
from evalsentry.harnesses.pickup import IMPORT, REFUSED
from evalsentry.tasks.gate import gate_week
from evalsentry.tasks.imports import find_new_runs, import_run, publish_imports


def _label(week: str | None) -> str:
    """The week a run's messages lead with: the resolved week, or what was given."""
    try:
        return resolve_week(week)
    except EvalsentryError:
        return str(week)


def _run_name() -> str:
    """``import-results-<week>-<id>``."""
    return f"import-results-{_label(runtime.flow_run.parameters.get('week'))}-{short_id()}"


@flow(
    name="import-results",
    flow_run_name=_run_name,
    log_prints=True,
    on_failure=[alert_failed_week],
)
def import_results(
    week: str | None = None,
    models: list[str] | None = None,
    config_path: str = "evalsentry.yaml",
) -> State:
    """Import each ``imports:`` line's new harness run as the week's result and gate the week.

    A run already in the history is skipped, so a re-run imports nothing twice and tells the
    same story. Ends Failed, naming model and metric, when the gate finds a regression (as
    ``evalsentry gate``), or when a run found could not be imported; Completed otherwise.

    Args:
        week: ISO week to record under (default: the scheduled start's week).
        models: Only these lines of ``imports:`` (default: all).
        config_path: The project's evalsentry.yaml, relative to the run's working directory.
    """
    quiet_domain_errors()
    try:
        return _imports(resolve_week(week), models, config_path)
    except EvalsentryError as exc:  # unusable input: its reason, in one line
        return fail(f"{_label(week)}: ERROR {exc}", [])


#: The import-results run of a project without ``imports:``: Completed, no alert.
NOTHING_CONFIGURED = (
    "nothing configured: evalsentry.yaml lists no imports:; weekly-eval evaluates this "
    "project's checkpoints"
)


def _imports(week: str, models: list[str] | None, config_path: str) -> State:
    """Find, import, gate the imported lines' week, publish; the run's end, its verdict."""
    settings = load_config(config_path)
    if not settings.imports and not models:  # a project that imports nothing: not an alarm
        return complete(f"{week}: {NOTHING_CONFIGURED}", logging.INFO, [], {"week": week})
    if not settings.imports:
        return fail(f"{week}: ERROR nothing to import", [f"{config_path}: imports: lists no line"])
    tag_run([f"week:{week}", *(f"model:{line}" for line in sorted(models or settings.imports))])
    found = find_new_runs(settings, models)
    imported = [import_run(f, settings, week) for f in found if f.action == IMPORT]
    report = gate_week(settings.store_url, week, settings, models or sorted(settings.imports))
    publish_imports(week, found, imported, report.headline())
    done = [f"imported {i.describe()}" for i in imported]
    for line in done:  # in the log and the artifact; the state message is the week's verdict
        get_run_logger().info(line)
    refused = [f.describe() for f in found if f.action == REFUSED]
    if report.failed:
        hold_alert(week, report)
        return fail(report.headline(), [*report.details(), *refused])
    if refused:
        return fail(f"{week}: ERROR {len(refused)} run(s) found but not imported", refused)
    level = logging.INFO if report.verdict in (Verdict.PASS, Verdict.BASELINE) else logging.WARNING
    result = {"week": week, "verdict": str(report.verdict), "imported": done}
    return complete(report.headline(), level, [], result)
