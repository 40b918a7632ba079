"""Events other systems can alert on: regressions, invalid evalsets, failed checkpoints."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect.events import emit_event

from evalsentry.drift import DriftResult
from evalsentry.gate import Comparison

REGRESSION = "evalsentry.regression.detected"
EVALSET_INVALID = "evalsentry.evalset.invalid"
CHECKPOINT_FAILED = "evalsentry.checkpoint.failed"
DRIFT = "evalsentry.drift.detected"


def _model(name: str) -> dict[str, str]:
    return {"prefect.resource.id": f"evalsentry.model.{name}", "prefect.resource.name": name}


def regression(comparison: Comparison, week: str) -> None:
    """One FAIL or ERROR verdict, with the numbers."""
    payload: dict[str, Any] = {
        "week": week,
        "verdict": str(comparison.verdict),
        "model": comparison.model,
        "version": comparison.version,
        "evalset": comparison.evalset,
        "metric": comparison.metric,
        "slice": comparison.slice,
        "reference": comparison.reference,
        "reference_value": comparison.reference_value,
        "value": comparison.value,
        "drop": comparison.drop,
        "p_value": comparison.p_adjusted,
        "newly_wrong": comparison.newly_wrong,
        "newly_right": comparison.newly_right,
        "reason": comparison.reason,
    }
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
    emit_event(DRIFT, resource=resource, payload={**asdict(result), "week": week})
