"""One evaluation end to end, as plain functions the CLI and the Prefect tasks share.

``evaluate_checkpoint`` never raises for a bad checkpoint: a checkpoint that cannot be loaded or
produces NaN becomes an ``error`` row with the reason, so it fails itself and not the others.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry import __version__
from evalsentry.config import Config
from evalsentry.cost import CostMeter, cost_fields
from evalsentry.errors import EvalsentryError
from evalsentry.history import History, now_utc

if TYPE_CHECKING:
    from evalsentry.evalsets import Evalset
    from evalsentry.inference import ProgressFn
    from evalsentry.registry import RegistryEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """A checkpoint to evaluate: from the registry, or a file given directly."""

    model: str
    uri: str
    version: int | None = None
    stage: str = "candidate"
    sha256: str | None = None
    lineage: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: RegistryEntry) -> Target:
        """The target a registry entry describes (its pinned sha256 is enforced)."""
        return cls(entry.model, entry.uri, entry.version, entry.stage, entry.sha256, entry.lineage)


@dataclass(frozen=True)
class Outcome:
    """One evaluation's rows, ready for the history."""

    evaluation: dict[str, Any]
    metrics: list[dict[str, Any]]
    predictions: dict[str, np.ndarray] | None

    @property
    def ok(self) -> bool:
        """Whether the evaluation produced results."""
        return bool(self.evaluation["status"] == "ok")


def new_run_id() -> str:
    """A fresh run id."""
    return uuid.uuid4().hex


def evaluate_checkpoint(
    target: Target,
    evalset: Evalset,
    *,
    config: Config,
    run_id: str,
    week: str,
    kind: str = "scheduled",
    device: str = "auto",
    meter: CostMeter | None = None,
    validation: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> Outcome:
    """Load, verify and run one checkpoint on one evalset; compute metrics per slice."""
    from evalsentry.checkpoint import load_checkpoint
    from evalsentry.gate import metric_names
    from evalsentry.inference import evaluate

    evaluation_id = uuid.uuid4().hex
    started, clock = now_utc(), time.perf_counter()
    row: dict[str, Any] = {
        "evaluation_id": evaluation_id,
        "run_id": run_id,
        "week": week,
        "kind": kind,
        "started_at": started,
        "model": target.model,
        "version": target.version,
        "stage": target.stage,
        "checkpoint_uri": target.uri,
        "checkpoint_sha256": target.sha256,
        "evalset": evalset.spec.name,
        "evalset_version": evalset.spec.version,
        "evalset_sha256": evalset.sha256,
        "n_examples": len(evalset),
        "evalsentry_version": __version__,
        "validation_json": json.dumps(validation) if validation is not None else None,
        **_lineage_fields(target.lineage),
    }
    meter = meter or CostMeter(use_codecarbon=False)
    try:
        with meter.measure(evaluation_id) as measurement:
            loaded = load_checkpoint(target.uri, expected_sha256=target.sha256)
            row.update(_lineage_fields(loaded.lineage))
            row["checkpoint_sha256"] = loaded.sha256
            result = evaluate(loaded.model, evalset, device=device, progress=progress)
        names = metric_names(evalset.spec.metrics, evalset.spec.task, evalset.spec.num_classes)
        metrics = _metric_rows(result.columns, names, evalset, row)
    except EvalsentryError as exc:
        log.warning(
            "%s v%s on %s failed, recorded as an error: %s",
            target.model,
            target.version,
            evalset.spec.name,
            exc,
        )
        row.update(
            status="error",
            error=str(exc),
            finished_at=now_utc(),
            wall_s=time.perf_counter() - clock,
        )
        return Outcome(row, [], None)
    env = result.environment
    row.update(
        status="ok",
        finished_at=now_utc(),
        device=env.device,
        device_name=env.device_name,
        torch_version=env.torch_version,
        python_version=env.python_version,
        cuda_version=env.cuda_version,
        driver_version=env.driver_version,
        precision=env.precision,
        batch_size=result.batch_size,
        **cost_fields(
            device=env.device,
            wall_s=time.perf_counter() - clock,
            inference_s=result.inference_seconds,
            n_examples=result.num_examples,
            measurement=measurement,
            rates=config.cost,
        ),
    )
    return Outcome(row, metrics, result.columns)


def _lineage_fields(lineage: Mapping[str, Any]) -> dict[str, Any]:
    if not lineage:
        return {}
    return {
        "git_sha": lineage.get("git_sha"),
        "git_dirty": lineage.get("git_dirty"),
        "data_sha": lineage.get("data_sha"),
        "config_json": json.dumps(lineage.get("config"), sort_keys=True),
        "seed": lineage.get("seed"),
        "trained_at": lineage.get("timestamp_utc"),
    }


def _metric_rows(
    columns: Mapping[str, np.ndarray],
    names: Sequence[str],
    evalset: Evalset,
    row: Mapping[str, Any],
) -> list[dict[str, Any]]:
    from evalsentry.gate import OVERALL
    from evalsentry.metrics import compute_metrics, get_metric

    units: list[tuple[str, np.ndarray | None]] = [(OVERALL, None)]
    for name, raw in evalset.slices.items():
        labels = np.asarray(raw).astype(str)
        units += [(f"{name}={v}", labels == v) for v in sorted(set(labels.tolist()))]
    rows = []
    for slice_name, mask in units:
        values = compute_metrics(
            dict(columns), names, num_classes=evalset.spec.num_classes, mask=mask
        )
        for metric, value in values.items():
            rows.append(
                {
                    "evaluation_id": row["evaluation_id"],
                    "week": row["week"],
                    "model": row["model"],
                    "evalset": row["evalset"],
                    "metric": metric,
                    "slice": slice_name,
                    "value": value.value,
                    "ci_low": value.ci_low,
                    "ci_high": value.ci_high,
                    "n": value.n,
                    "higher_is_better": get_metric(metric).higher_is_better,
                }
            )
    return rows


def record(history: History, outcomes: Sequence[Outcome]) -> None:
    """Append a run's outcomes to the history."""
    history.append(
        [o.evaluation for o in outcomes],
        [m for o in outcomes for m in o.metrics],
        {
            o.evaluation["evaluation_id"]: o.predictions
            for o in outcomes
            if o.predictions is not None
        },
    )


def live_drift(
    evalset: Evalset, outcomes: Sequence[Outcome], *, config: Config, device: str = "auto"
) -> list[Any]:
    """Drift of the evalset's live sample (if configured): inputs, and each production model's predictions."""
    import torch

    from evalsentry.checkpoint import load_checkpoint
    from evalsentry.drift import input_drift, prediction_drift, read_live
    from evalsentry.inference import predict_classes

    source = config.drift.live.get(evalset.spec.name)
    if source is None:
        return []
    live = read_live(config.resolve(source), evalset)
    results = input_drift(evalset, live, config.drift)
    if evalset.spec.task != "classification":
        return results
    for outcome in outcomes:
        row = outcome.evaluation
        if not outcome.ok or row["stage"] != "production" or row["evalset"] != evalset.spec.name:
            continue
        model = load_checkpoint(
            row["checkpoint_uri"], expected_sha256=row["checkpoint_sha256"]
        ).model
        live_pred = predict_classes(model, torch.from_numpy(live), device=device)
        reference = (
            np.asarray(outcome.predictions["prediction"]) if outcome.predictions else live_pred
        )
        results.append(prediction_drift(row["model"], evalset, reference, live_pred, config.drift))
    return results


def outcomes_of_run(history: History, run_id: str) -> list[Outcome]:
    """The outcomes a run recorded, read back from the history (for runs fanned out to workers)."""
    frame = history.evaluations(include_superseded=True)
    rows = frame[frame["run_id"] == run_id]
    metrics = history.metrics(rows["evaluation_id"]) if not rows.empty else None
    outcomes = []
    for row in rows.to_dict("records"):
        own = (
            []
            if metrics is None
            else metrics[metrics["evaluation_id"] == row["evaluation_id"]].to_dict("records")
        )
        outcomes.append(Outcome(row, own, history.predictions(row["evaluation_id"])))
    return outcomes
