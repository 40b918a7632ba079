"""Events other systems can alert on: a failed week, invalid evalsets, failed checkpoints.

Alert on ``evalsentry.week.failed``: one event per failed weekly run, whatever stopped it, its
payload the rounded summary of ``evalsentry.reports.alerts.summary`` (or, for a run that failed before
its gate, ``evalsentry.reports.alerts.failure_summary``). ``evalsentry.regression.detected`` (one per FAIL or ERROR
comparison) is detail for the event feed of each model; an alert on it sends one message per
metric x slice x reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from prefect import runtime
from prefect.events import emit_event

from evalsentry.gate.drift import DriftResult
from evalsentry.gate.week import Comparison, GateReport
from evalsentry.reports.alerts import ALERT_DRIFT, comparison_row, summary

WEEK_FAILED = "evalsentry.week.failed"
#: A week that completed with FAIL-level live-data drift: its own alert, routable apart.
WEEK_DRIFTED = "evalsentry.week.drifted"
CANDIDATE_FAILED = "evalsentry.candidate.failed"
REGRESSION = "evalsentry.regression.detected"
EVALSET_INVALID = "evalsentry.evalset.invalid"
CHECKPOINT_FAILED = "evalsentry.checkpoint.failed"
DRIFT = "evalsentry.drift.detected"


def _model(name: str) -> dict[str, str]:
    return {"prefect.resource.id": f"evalsentry.model.{name}", "prefect.resource.name": name}


def _run() -> tuple[str | None, str | None]:
    """The current flow run's name and UI link (None outside a run or without a UI URL)."""
    url = runtime.flow_run.ui_url
    return runtime.flow_run.name, url if url and url.startswith("http") else None


def run_url(flow_run_id: object) -> str | None:
    """A flow run's link in the Prefect UI (None without a UI URL)."""
    from prefect.settings import PREFECT_UI_URL

    base = PREFECT_UI_URL.value()
    return f"{base}/flow-runs/flow-run/{flow_run_id}" if base and base.startswith("http") else None


def _models(report: GateReport) -> list[str]:
    """The models named in the report's FAIL and ERROR rows."""
    return sorted({c.model for c in report.problems if c.model != "*"})


def week_summary(report: GateReport) -> dict[str, Any]:
    """The alert payload of a failed week: its summary, with this run's name and link."""
    name, url = _run()
    return summary(report, run_name=name, run_url=url)


def week_failed(
    week: str,
    payload: dict[str, Any],
    *,
    flow_run_id: object,
    flow_run_name: str | None,
    models: Sequence[str] = (),
) -> None:
    """The week's one alert, about the week, naming the run and the models.

    ``payload`` is :func:`evalsentry.reports.alerts.summary` or :func:`~evalsentry.reports.alerts.failure_summary`.
    """
    week_event(WEEK_FAILED, week, payload, flow_run_id, flow_run_name, models)


def week_drifted(report: GateReport) -> None:
    """The drift alert of a week that completed with FAIL-level drift: one per run.

    Its payload is the gate's summary with ``alert: drift``; a Failed run's own alert carries
    its drift instead.
    """
    name, url = _run()
    payload = {**summary(report, run_name=name, run_url=url), "alert": ALERT_DRIFT}
    week_event(WEEK_DRIFTED, report.week, payload, runtime.flow_run.id, name, ())


def week_event(
    event: str,
    week: str,
    payload: dict[str, Any],
    flow_run_id: object,
    flow_run_name: str | None,
    models: Sequence[str],
) -> None:
    """An alert event about ``week``, related to its flow run and models."""
    emit_event(
        event,
        resource={"prefect.resource.id": f"evalsentry.week.{week}", "prefect.resource.name": week},
        related=[
            {
                "prefect.resource.id": f"prefect.flow-run.{flow_run_id}",
                "prefect.resource.role": "flow-run",
                "prefect.resource.name": flow_run_name or "",
            },
            *({**_model(name), "prefect.resource.role": "model"} for name in models),
        ],
        payload=payload,
    )


def candidate_failed(report: GateReport, model: str) -> None:
    """A candidate of ``model`` failed its gate against production: the same summary, once."""
    name, url = _run()
    emit_event(
        CANDIDATE_FAILED,
        resource=_model(model),
        payload=summary(report, title=f"candidate of {model} failed", run_name=name, run_url=url),
    )


def regression(comparison: Comparison, week: str) -> None:
    """One FAIL or ERROR verdict with its rounded numbers: detail for the model's event feed."""
    payload: dict[str, Any] = {"week": week, **comparison_row(comparison)}
    emit_event(REGRESSION, resource=_model(comparison.model), payload=payload)


def evalset_invalid(evalset: str, error: str, week: str) -> None:
    """An evalset failed verification or validation; nothing ran on it."""
    emit_event(
        EVALSET_INVALID,
        resource={
            "prefect.resource.id": f"evalsentry.evalset.{evalset}",
            "prefect.resource.name": evalset,
        },
        payload={"evalset": evalset, "error": error, "week": week},
    )


def checkpoint_failed(evaluation: dict[str, Any]) -> None:
    """A checkpoint could not be evaluated."""
    emit_event(
        CHECKPOINT_FAILED,
        resource=_model(str(evaluation["model"])),
        payload={
            k: evaluation.get(k)
            for k in ("model", "version", "stage", "checkpoint_uri", "evalset", "week", "error")
        },
    )


def drift(result: DriftResult, week: str) -> None:
    """Live data (or a model's predictions on it) moved away from the frozen evalset."""
    resource = (
        _model(result.model)
        if result.model
        else {
            "prefect.resource.id": f"evalsentry.evalset.{result.evalset}",
            "prefect.resource.name": result.evalset,
        }
    )
    payload = {**asdict(result), "verdict": str(result.verdict), "week": week}
    emit_event(DRIFT, resource=resource, payload=payload)
