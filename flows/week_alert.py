"""The alert of a failed week: held by the flow that gated it, sent by its on_failure hook.

weekly-eval and import-results send the same ``evalsentry.week.failed`` event, its payload the
gate's own summary where the flow held one, else a summary of the Failed state's message.
"""

from __future__ import annotations

from typing import Any

from prefect import runtime
from prefect.client.schemas.objects import FlowRun, State

from evalsentry.flows.runs import SEPARATOR
from evalsentry.gate.week import GateReport
from evalsentry.reports.alerts import failure_summary
from evalsentry.tasks import events
from evalsentry.weeks import iso_week, now_utc

#: The alert of each failed weekly run of this process, by flow run id: the flow holds it, the
#: run's on_failure hook sends it. A run that failed without one (before its gate, or on an
#: exception) gets the summary of its state message.
_HELD: dict[str, tuple[str, dict[str, Any], list[str]]] = {}


def hold_alert(week: str, report: GateReport) -> None:
    """The gate's own summary for this run's alert (sent by :func:`alert_failed_week`).

    Its headline, counts, models and worst rows are the report's, so the alert never
    contradicts the state message it leads with.
    """
    _HELD[str(runtime.flow_run.id)] = (
        week,
        events.week_summary(report),
        sorted({c.model for c in report.problems if c.model != "*"}),
    )


def _week_of(flow_run: FlowRun) -> str:
    """The week a run is about: its ``week`` parameter, else its scheduled start's ISO week."""
    week = flow_run.parameters.get("week")
    if week:
        return str(week)
    start = flow_run.expected_start_time or flow_run.created
    return iso_week(start) if start is not None else iso_week(now_utc())


def alert_failed_week(flow: Any, flow_run: FlowRun, state: State) -> None:
    """The on_failure hook of weekly-eval: each Failed run sends one ``evalsentry.week.failed``.

    Whatever failed it: the gate (its summary, held by the flow), an early stop (nothing to
    evaluate, an unusable store or config), an exception, or parameters Prefect refused. A
    Crashed run (a killed process: no hook runs) alerts through Prefect's own event instead
    (flows/week-alerts.yaml).
    """
    held = _HELD.pop(str(flow_run.id), None)
    if held is None:
        week = _week_of(flow_run)
        headline, *details = (state.message or "the run failed").split(SEPARATOR)
        if not headline.startswith(f"{week}: "):
            headline = f"{week}: ERROR {headline}"
        payload = failure_summary(
            week,
            headline,
            details,
            run_name=flow_run.name,
            run_url=events.run_url(flow_run.id),
        )
        held = (week, payload, [])
    week, payload, models = held
    if _said_before(flow_run, state):
        return
    events.week_failed(
        week, payload, flow_run_id=flow_run.id, flow_run_name=flow_run.name, models=models
    )


def _said_before(flow_run: FlowRun, state: State) -> bool:
    """Whether an earlier attempt of this run (before the UI's Retry) failed with this headline.

    A retried run that fails the same way has been alerted already; one that fails otherwise
    (another line, another cause) alerts again.
    """
    if (flow_run.run_count or 0) <= 1:
        return False
    from prefect.client.orchestration import get_client

    headline = (state.message or "").split(SEPARATOR)[0]
    with get_client(sync_client=True) as client:
        earlier = [s for s in client.read_flow_run_states(flow_run.id) if s.id != state.id]
    return any(s.is_failed() and (s.message or "").split(SEPARATOR)[0] == headline for s in earlier)
