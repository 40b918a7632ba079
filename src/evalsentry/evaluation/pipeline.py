"""One evaluation end to end, as plain functions the CLI and the Prefect tasks share.

``evaluate_checkpoint`` never raises for a bad checkpoint or a broken model: whatever goes wrong
while building or running it (a factory or state dict that fails, a ``forward`` that raises,
hangs past ``inference_timeout_s`` or crashes its process, an output that breaks the contract,
NaN) becomes that pair's ``error`` row with a one-line reason, so it fails itself and not the
others. The model runs in a child process (``evalsentry.evaluation.isolation``) that a timeout can kill.
"""

from __future__ import annotations

import contextlib
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
from evalsentry.cost.meter import CostMeter, Measurement, cost_fields
from evalsentry.errors import (
    EvalsentryError,
)
from evalsentry.history.store import History
from evalsentry.names import WEEKLY_RUN, WEEKLY_STAGES, RunKind
from evalsentry.weeks import now_utc

if TYPE_CHECKING:
    from datetime import datetime

    from evalsentry.checkpoints.registry import RegistryEntry
    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evaluation.inference import InferenceResult, ProgressFn
    from evalsentry.gate.drift import DriftResult

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
        """The target a registry entry describes (its pinned sha256 and model are enforced)."""
        return cls(entry.model, entry.uri, entry.version, entry.stage, entry.sha256, entry.lineage)

    @property
    def label(self) -> str:
        """``m@v2``, or a file given directly by its sha256: ``m (candidate 9ae2a1ad)``."""
        from evalsentry.gate.verdicts import checkpoint_label

        return checkpoint_label(self.model, self.version, self.sha256)

    @property
    def slug(self) -> str:
        """The label as a run or task name part: ``m-v2``, ``m-9ae2a1ad``."""
        from evalsentry.gate.verdicts import SHA_CHARS

        if self.version is not None:
            return f"{self.model}-v{int(self.version)}"
        return f"{self.model}-{(self.sha256 or 'file')[:SHA_CHARS]}"

    @property
    def pinned_model(self) -> Mapping[str, Any]:
        """What registration pinned (factory, kwargs, transform); empty for a file given directly."""
        model = self.lineage.get("model") if self.lineage else None
        return model if isinstance(model, Mapping) else {}


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


def week_results(history: History, week: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The week's current weekly evaluation rows and their metric rows, as plain records.

    Whatever runs recorded them: what the week's report shows, beside the gate of the week.
    """
    from evalsentry.history.frames import records

    frame = history.evaluations(weeks=[week], kind=WEEKLY_RUN)
    if frame.empty:
        return [], []
    return records(frame), records(history.metrics(frame["evaluation_id"]))


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
    kind: RunKind = WEEKLY_RUN,
    device: str = "auto",
    meter: CostMeter | None = None,
    validation: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
) -> Outcome:
    """Load, verify and run one checkpoint on one evalset; compute metrics per slice.

    The checkpoint is loaded and run in a child process that is killed after
    ``config.inference_timeout_s``; any failure is returned as an error outcome, never raised.
    The model is built by the factory pinned in the target's registry entry (a file given
    directly: its own), only if ``config.trust`` admits it.
    """
    from evalsentry.evaluation.isolation import evaluate_isolated
    from evalsentry.gate.metrics import metric_names

    evaluation_id = uuid.uuid4().hex
    started, clock = now_utc(), time.perf_counter()
    row = _started_row(evaluation_id, started, target, evalset, run_id, week, kind, validation)
    meter = meter or CostMeter(use_codecarbon=False)
    phase = "running the model"
    try:
        row.update(lineage_fields(target.lineage, f"the registry entry of {_who(target)}"))
        with meter.measure(evaluation_id) as measurement:
            ran = evaluate_isolated(
                target.uri,
                evalset,
                expected_sha256=target.sha256,
                trust=config.trust,
                factory=target.pinned_model.get("factory"),
                factory_kwargs=target.pinned_model.get("kwargs"),
                transform=target.pinned_model.get("transform"),
                device=device,
                timeout_s=config.inference_timeout_s,
                progress=progress,
            )
        row.update(lineage_fields(ran.lineage))
        row["checkpoint_sha256"] = ran.sha256
        result = ran.result
        phase = "computing metrics"
        names = metric_names(evalset.spec.metrics, evalset.spec.task, evalset.spec.num_classes)
        metrics = _metric_rows(result.columns, names, evalset, row)
    except Exception as exc:  # noqa: BLE001 - one broken pair never takes the others down; logged
        _record_failure(row, exc, phase, target, evalset, clock)
        return Outcome(row, [], None)
    _record_success(row, result, measurement, config, clock)
    return Outcome(row, metrics, result.columns)


def _started_row(
    evaluation_id: str,
    started: datetime,
    target: Target,
    evalset: Evalset,
    run_id: str,
    week: str,
    kind: RunKind,
    validation: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The evaluation's history row as it starts: what is evaluated on what, in which run."""
    return {
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
    }


def _record_failure(
    row: dict[str, Any],
    exc: Exception,
    phase: str,
    target: Target,
    evalset: Evalset,
    clock: float,
) -> None:
    """Complete ``row`` as an error: what the child learnt of the file, the reason, logged."""
    from evalsentry.evaluation.isolation import EvaluationFailed, failure_reason

    if isinstance(exc, EvaluationFailed) and exc.lineage:
        with contextlib.suppress(EvalsentryError):  # the reason below says what broke
            row.update(lineage_fields(exc.lineage))
        row["checkpoint_sha256"] = exc.sha256
    reason = failure_reason(exc, phase)
    log.warning(
        "%s on %s failed, recorded as an error: %s",
        target.label,
        evalset.spec.name,
        reason,
        exc_info=not isinstance(exc, EvaluationFailed),  # the child's traceback is logged
    )
    row.update(
        status="error",
        error=reason,
        finished_at=now_utc(),
        wall_s=time.perf_counter() - clock,
    )


def _record_success(
    row: dict[str, Any],
    result: InferenceResult,
    measurement: Measurement,
    config: Config,
    clock: float,
) -> None:
    """Complete ``row`` as ok: where the model ran, and what the evaluation cost."""
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
        input_tokens=result.tokens,
        **cost_fields(
            device=env.device,
            wall_s=time.perf_counter() - clock,
            inference_s=result.inference_seconds,
            n_examples=result.num_examples,
            measurement=measurement,
            rates=config.cost,
        ),
    )


def lineage_fields(lineage: Mapping[str, Any], where: object = "lineage") -> dict[str, Any]:
    """The history columns of a lineage, once its values are checked (``check_lineage_values``).

    Raises:
        LineageInvalid: a value the history cannot hold (an entry registered before the check).
    """
    from evalsentry.checkpoints.lineage import check_lineage_values

    if not lineage:
        return {}
    check_lineage_values(where, lineage)
    return {
        "git_sha": lineage.get("git_sha"),
        "git_dirty": lineage.get("git_dirty"),
        "data_sha": lineage.get("data_sha"),
        "config_json": json.dumps(lineage.get("config"), sort_keys=True),
        "seed": lineage.get("seed"),
        "trained_at": lineage.get("timestamp_utc"),
    }


def _who(target: Target) -> str:
    return f"{target.model}@v{target.version}" if target.version is not None else target.uri


def _metric_rows(
    columns: Mapping[str, np.ndarray],
    names: Sequence[str],
    evalset: Evalset,
    row: Mapping[str, Any],
) -> list[dict[str, Any]]:
    from evalsentry.gate.metrics import compute_metrics, get_metric
    from evalsentry.gate.slices import OVERALL, slice_masks

    units: list[tuple[str, np.ndarray | None]] = [(OVERALL, None), *slice_masks(evalset.slices)]
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


def record(
    history: History,
    outcomes: Sequence[Outcome],
    stages: Sequence[str] = WEEKLY_STAGES,
    retire: Sequence[str] = (),
) -> None:
    """Append a run's outcomes to the history (a weekly run evaluating ``stages``).

    ``retire``: the week's rows of lines the run's plan no longer has (``WeekPlan.retired``).
    """
    history.append(
        [o.evaluation for o in outcomes],
        [m for o in outcomes for m in o.metrics],
        {
            o.evaluation["evaluation_id"]: o.predictions
            for o in outcomes
            if o.predictions is not None
        },
        stages=stages,
        retire=retire,
    )


def live_drift(
    evalset: Evalset, outcomes: Sequence[Outcome], *, config: Config, device: str = "auto"
) -> list[DriftResult]:
    """Drift of the evalset's live sample (if configured): inputs, and each production model's predictions.

    Each model predicts the live sample in the evaluation child, under ``inference_timeout_s``
    like every forward of a checkpoint: one that hangs or crashes there is a WARN saying its
    drift was not measured, and the week goes on.
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.evaluation.isolation import (
        EvaluationFailed,
        failure_reason,
        load_arguments,
        predict_isolated,
    )
    from evalsentry.gate.drift import DriftResult, input_drift, prediction_drift, read_live

    source = config.drift.live.get(evalset.spec.name)  # token evalsets refused by planning
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
        target = Target.from_entry(
            Registry(config.registry_url).show(row["model"], int(row["version"]))
        )
        load = load_arguments(
            config.trust,
            target.sha256,
            target.pinned_model.get("factory"),
            target.pinned_model.get("kwargs"),
            target.pinned_model.get("transform"),
        )
        try:
            ran = predict_isolated(
                target.uri, load, evalset, live, device=device, timeout_s=config.inference_timeout_s
            )
        except EvaluationFailed as exc:
            reason = failure_reason(exc, "predicting the live sample")
            log.warning("%s: live drift not measured: %s", row["model"], reason)
            results.append(
                DriftResult.not_measured(
                    evalset.spec.name, str(row["model"]), reason, len(evalset), len(live)
                )
            )
            continue
        live_pred = np.asarray(ran.result)
        reference = (
            np.asarray(outcome.predictions["prediction"]) if outcome.predictions else live_pred
        )
        results.append(prediction_drift(row["model"], evalset, reference, live_pred, config.drift))
    return results


def outcomes_of_run(history: History, run_id: str) -> list[Outcome]:
    """The outcomes a run recorded, read back from the history (for runs fanned out to workers)."""
    from evalsentry.history.frames import records

    frame = history.evaluations(include_superseded=True)
    rows = frame[frame["run_id"] == run_id]
    metrics = history.metrics(rows["evaluation_id"]) if not rows.empty else None
    outcomes = []
    for row in records(rows):
        own = (
            []
            if metrics is None
            else records(metrics[metrics["evaluation_id"] == row["evaluation_id"]])
        )
        outcomes.append(Outcome(row, own, history.predictions(row["evaluation_id"])))
    return outcomes
