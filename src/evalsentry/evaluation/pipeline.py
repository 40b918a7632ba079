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
    ConfigError,
    EvalsentryError,
    EvalsetError,
    NothingToEvaluate,
    NotRegistered,
    RegistryError,
    UsageError,
    did_you_mean,
)
from evalsentry.history.store import History
from evalsentry.names import NO_EVALSET, WEEKLY_RUN, WEEKLY_STAGES, RunKind
from evalsentry.weeks import now_utc

if TYPE_CHECKING:
    from datetime import datetime

    import pandas as pd

    from evalsentry.checkpoints.registry import Registry, RegistryEntry
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
        """The factory and kwargs pinned at registration; empty for a file given directly."""
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


def resolve_targets(
    registry: Registry, models: Sequence[str] | None, stages: Sequence[str]
) -> list[Target]:
    """The newest version of each model (``models``, else every one) in each of ``stages``.

    A stage in which a model has no version is skipped; resolving nothing at all is an error,
    never an empty week that passes.

    Raises:
        NotRegistered: a model named in ``models`` is not in the registry (with a did-you-mean).
        NothingToEvaluate: the registry is empty, or no model has a version in ``stages``.
    """
    known = registry.models()
    if not known:
        raise NothingToEvaluate(
            f"{registry.root}: the registry holds no checkpoint; register one with "
            "`evalsentry register CHECKPOINT --model NAME --new-model --stage production`"
        )
    for model in models or ():
        if model not in known:
            raise NotRegistered(f"model {model!r}", model, known)
    targets = []
    for model in models or known:
        for stage in stages:
            try:
                targets.append(Target.from_entry(registry.resolve(model, stage)))
            except NotRegistered:
                continue
    if not targets:
        raise NothingToEvaluate(
            f"{registry.root}: no version of {', '.join(models or known)} is in stage "
            f"{' or '.join(stages)}; promote one with "
            "`evalsentry registry promote MODEL VERSION`"
        )
    return targets


def check_bindings(config: Config, available: Sequence[str]) -> None:
    """Refuse evalset settings that cannot apply, before anything is evaluated.

    A ``models:`` binding, or a ``drift.live``/``drift.features`` entry, that names an evalset
    the project does not have (a misspelt drift entry would never check anything), and
    ``drift.features`` for an evalset whose inputs are named columns (its columns are its
    features; :func:`evalsentry.gate.drift.row_summaries`).

    Raises:
        ConfigError: naming the config file, the field and the fix.
    """
    from evalsentry.evalsets.evalset import evalset_folder, read_spec
    from evalsentry.gate.drift import row_summaries

    named = [
        (f"models.{model}.evalsets", name, "bind the model to one that exists")
        for model, binding in config.models.items()
        for name in binding.evalsets
    ]
    named += [
        (f"drift.{setting}.{name}", name, f"name an evalset that exists under drift.{setting}")
        for setting, entries in (("live", config.drift.live), ("features", config.drift.features))
        for name in entries
    ]
    for setting, name, fix in named:
        if name not in available:
            raise ConfigError(
                config.trust.config_file,
                setting,
                f"{name!r} is not an evalset in {config.evalsets_dir} "
                f"(there: {', '.join(available) or 'none'}).{did_you_mean(name, available)}"
                f" Freeze it, or {fix}",
            )
    for name in config.drift.features:
        try:
            spec = read_spec(evalset_folder(name, config.evalsets_dir))
        except EvalsentryError:  # a broken manifest is the evalset's own ERROR, in validation
            continue
        try:
            row_summaries(spec, config.drift)
        except EvalsetError as exc:  # its message starts with the field
            raise ConfigError(config.trust.config_file, "", str(exc)) from None


def tolerance_warnings(config: Config, available: Sequence[str]) -> list[str]:
    """One line per configured tolerance finer than an evalset can certify, with the fix.

    A warning, never an error: the run goes on, and a comparison the evalset cannot resolve
    reads INCONCLUSIVE (unresolved). See :mod:`evalsentry.gate.resolution`; the churn is the one
    the history measured for each model line on the evalset, else the assumed one.
    """
    from evalsentry.gate.resolution import evalset_resolutions, measured_comparisons

    comparisons = measured_comparisons(config) if available else None
    lines = []
    for name in available:
        try:
            found = evalset_resolutions(config, name, comparisons)
        except EvalsentryError:  # a broken manifest is the evalset's own ERROR, in validation
            continue
        lines += [r.warning() for r in found if r.too_fine]
    return lines


def bound_evalsets(model: str, config: Config, available: Sequence[str]) -> list[str] | None:
    """The evalsets ``model`` runs on: its ``models:`` binding, else the only evalset there is.

    None when it is unbound and the project has several evalsets: which one fits the model's
    inputs is the team's decision, never a guess.
    """
    bound = config.bound_evalsets(model)
    if bound is not None:
        return bound
    return list(available) if len(available) <= 1 else None


def binding_text(model: str, config: Config, available: Sequence[str]) -> str:
    """How ``model`` is tied to its evalsets, in words, for listings and reports."""
    bound = config.bound_evalsets(model)
    if bound is not None:
        return ", ".join(bound)
    if len(available) == 1:
        return f"{available[0]} (the only evalset; unbound)"
    return "unbound"


def unbound_reason(model: str, config: Config, available: Sequence[str]) -> str:
    """Why an unbound model runs on nothing, and the line that fixes it."""
    import difflib

    example = next(iter(difflib.get_close_matches(model, available, n=1)), "EVALSET")
    return (
        f"model {model!r} is bound to no evalset and {config.evalsets_dir} holds "
        f"{len(available)} ({', '.join(available)}); nothing was evaluated. Bind it in "
        f"{config.trust.config_file}: models: {{{model}: {{evalsets: [{example}]}}}}"
    )


def pair_targets(
    targets: Sequence[Target],
    config: Config,
    available: Sequence[str],
    selected: Sequence[str] | None = None,
) -> tuple[list[tuple[Target, str]], dict[str, str]]:
    """Each checkpoint with the evalsets its model is bound to (of ``selected``, default all).

    Returns:
        The (checkpoint, evalset name) pairs to evaluate, and for each model that is bound to
        nothing while there are several evalsets, the reason it is an ERROR.
    """
    wanted = set(selected) if selected is not None else set(available)
    pairs: list[tuple[Target, str]] = []
    unbound: dict[str, str] = {}
    for target in targets:
        names = bound_evalsets(target.model, config, available)
        if names is None:
            unbound[target.model] = unbound_reason(target.model, config, available)
            continue
        pairs += [(target, name) for name in names if name in wanted]
    return pairs, unbound


def evalsets_for(model: str, config: Config, selected: Sequence[str] | None = None) -> list[str]:
    """The evalsets one checkpoint of ``model`` is evaluated on (a candidate run): its binding.

    ``selected`` narrows them; naming an evalset the model is not bound to is refused.

    Raises:
        UsageError: no evalset exists, the model is unbound among several, or ``selected``
            names one outside its binding.
        ConfigError: a binding names a missing evalset.
    """
    from evalsentry.evalsets.evalset import list_evalsets

    available = list_evalsets(config.evalsets_dir)
    if not available:
        raise UsageError(f"{config.evalsets_dir}: no evalsets found; freeze one first")
    check_bindings(config, available)
    names = bound_evalsets(model, config, available)
    if names is None:
        raise UsageError(unbound_reason(model, config, available))
    for name in selected or ():
        if name not in names:
            raise UsageError(
                f"model {model!r} is evaluated on {', '.join(names)} only; {name!r} is not one "
                f"of them.{did_you_mean(name, names)} Change its binding in "
                f"{config.trust.config_file} (models:) to evaluate it there"
            )
    return [name for name in names if not selected or name in selected]


def check_model_line(model: str, registry: Registry, history: History) -> None:
    """Refuse a model line nobody knows (``register``, ``evaluate``): likely a typo.

    A typo'd line registered would fail every weekly run until archived; a candidate of one
    would be gated against nothing. ``--new-model`` says it is meant.

    Raises:
        RegistryError: ``model`` is neither registered nor in the history (with a did-you-mean).
    """
    if model in registry.models():
        return
    if history.evaluations(model=model).empty:
        known = set(registry.models()) | set(history.evaluations()["model"])
        raise RegistryError(
            f"model {model!r} is neither registered nor in the history.{did_you_mean(model, known)}"
            " If it is a new model line, pass --new-model to start one"
        )


Pair = tuple[Target, str]


def expected_pairs(
    targets: Sequence[Target], config: Config, available: Sequence[str]
) -> list[Pair]:
    """Every (checkpoint, evalset) a full week of ``targets`` records a row for.

    A model bound to no evalset where there are several is one pair per checkpoint on
    ``NO_EVALSET``: its row is the week's ERROR saying how to bind it.
    """
    pairs, unbound = pair_targets(targets, config, available)
    return pairs + [(t, NO_EVALSET) for t in targets if t.model in unbound]


def missing_pairs(current: pd.DataFrame, expected: Sequence[Pair]) -> list[Pair]:
    """The pairs of ``expected`` with no row among ``current`` (a week's current rows).

    A line's result counts whatever its version (a week evaluates the version in its stage when
    the week ran); a line-level ERROR (``NO_EVALSET``) counts for every evalset of that model.
    """
    have = set(zip(current["model"], current["stage"], current["evalset"], strict=True))
    return [
        (target, name)
        for target, name in expected
        if (target.model, target.stage, name) not in have
        and (target.model, target.stage, NO_EVALSET) not in have
        and not (name == NO_EVALSET and target.model in set(current["model"]))
    ]


@dataclass(frozen=True)
class WeekPlan:
    """What one weekly run evaluates, the ERROR rows of what it cannot, and what it retires."""

    pairs: list[Pair]  # (checkpoint, evalset) to evaluate
    errors: list[Outcome]  # unbound lines; a partial run's lines no run of the week covered
    partial: str | None  # what a partial run was asked for ("model(s) wine"); None: the week
    #: The week's current rows of lines the registry and bindings no longer have (an archived
    #: line, a binding removed): the run lists them as replaced, so the week is what should run.
    retired: list[str] = field(default_factory=list)


def plan_week(
    config: Config,
    registry: Registry,
    history: History,
    *,
    week: str,
    run_id: str,
    models: Sequence[str] | None = None,
    evalsets: Sequence[str] | None = None,
    stages: Sequence[str] = WEEKLY_STAGES,
) -> WeekPlan:
    """Plan one weekly run: its pairs, and an ERROR row for each line it should cover and cannot.

    A model bound to no evalset among several is an ERROR row (``NO_EVALSET``). A partial run
    (``models`` or ``evalsets`` leave out lines the week has) also records an ERROR for each
    line left out that no earlier run of the week covered: the week's verdict covers every line
    the registry and the bindings say should run, and a missing one is never a pass. Rows of the
    week for lines they no longer have (in ``stages``) are retired: a line archived after a bad
    week, or a typo'd line, stops failing the week when the week is run again.

    Raises:
        NotRegistered, NothingToEvaluate: an unknown model, or nothing registered in ``stages``.
        ConfigError: a binding or drift setting names a missing evalset.
        UsageError: ``evalsets`` names a missing evalset, or nothing is bound to those named.
    """
    from evalsentry.evalsets.evalset import list_evalsets

    targets = resolve_targets(registry, models, stages)
    available = list_evalsets(config.evalsets_dir)
    check_bindings(config, available)
    _check_named(evalsets, available, config.evalsets_dir)
    pairs, unbound = pair_targets(targets, config, available, evalsets)
    if not pairs and not unbound:
        raise NothingToEvaluate(
            f"no registered model is bound to {', '.join(map(repr, evalsets or ()))}; bind one "
            f"under models: in {config.trust.config_file}"
        )
    errors = [
        not_evaluated(t, NO_EVALSET, unbound[t.model], run_id=run_id, week=week)
        for t in targets
        if t.model in unbound
    ]
    ran = {(t.model, t.stage, name) for t, name in pairs}
    ran |= {(t.model, t.stage, NO_EVALSET) for t in targets if t.model in unbound}
    week_targets = targets if models is None else resolve_targets(registry, None, stages)
    expected = expected_pairs(week_targets, config, available)
    current = history.evaluations(weeks=[week], kind=WEEKLY_RUN)
    gone, retired = _retired(current, expected, stages)
    others = [(t, name) for t, name in expected if (t.model, t.stage, name) not in ran]
    if not others:
        return WeekPlan(pairs, errors, None, retired)
    asked = [f"model(s) {', '.join(models)}"] if models else []
    asked += [f"evalset(s) {', '.join(evalsets)}"] if evalsets else []
    partial = ", ".join(asked)
    kept = current[[not g for g in gone]] if gone else current
    errors += _uncovered(kept, others, partial, run_id=run_id, week=week)
    return WeekPlan(pairs, errors, partial, retired)


def _check_named(evalsets: Sequence[str] | None, available: Sequence[str], folder: str) -> None:
    """Every evalset a run names exists under ``folder``."""
    for name in evalsets or ():
        if name not in available:
            raise UsageError(
                f"evalset {name!r}: no such evalset under {folder}.{did_you_mean(name, available)}"
            )


def _retired(
    current: pd.DataFrame, expected: Sequence[Pair], stages: Sequence[str]
) -> tuple[list[bool], list[str]]:
    """Which of the week's rows are of lines (in ``stages``) it no longer has, and their ids."""
    lines = {(t.model, t.stage, name) for t, name in expected}
    gone = [
        (model, stage, evalset) not in lines and stage in stages
        for model, stage, evalset in zip(
            current["model"], current["stage"], current["evalset"], strict=True
        )
    ]
    return gone, current.loc[gone, "evaluation_id"].astype(str).tolist() if gone else []


def _uncovered(
    kept: pd.DataFrame, others: Sequence[Pair], partial: str, *, run_id: str, week: str
) -> list[Outcome]:
    """An ERROR row for each line a partial run left out that no earlier run of the week covered."""
    errors = []
    for target, name in missing_pairs(kept, others):
        on = f" on {name}" if name != NO_EVALSET else ""
        errors.append(
            not_evaluated(
                target,
                name,
                f"no run of {week} covered {target.model}@v{target.version} "
                f"({target.stage}){on}; the last covered only {partial}. Run it: "
                f"evalsentry run --week {week} --model {target.model}",
                run_id=run_id,
                week=week,
            )
        )
    return errors


def not_evaluated(
    target: Target, evalset: str, reason: str, *, run_id: str, week: str, kind: RunKind = WEEKLY_RUN
) -> Outcome:
    """The ERROR row of a pair that should have been evaluated and was not, saying why.

    An unbound model line (``evalset`` ``NO_EVALSET``), an invalid evalset, a line no run of the
    week covered: recorded like a failed evaluation, so the gate of the week reports it from the
    history, and a later result of the pair supersedes it.
    """
    now = now_utc()
    row = {
        "evaluation_id": uuid.uuid4().hex,
        "run_id": run_id,
        "week": week,
        "kind": kind,
        "started_at": now,
        "finished_at": now,
        "status": "error",
        "error": reason,
        "model": target.model,
        "version": target.version,
        "stage": target.stage,
        "checkpoint_uri": target.uri,
        "checkpoint_sha256": target.sha256,
        "evalset": evalset,
        "evalsentry_version": __version__,
        "wall_s": 0.0,
    }
    with contextlib.suppress(EvalsentryError):  # an ERROR row either way; lineage if it holds
        row.update(_lineage_fields(target.lineage))
    return Outcome(row, [], None)


def week_results(history: History, week: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The week's current weekly evaluation rows and their metric rows, as plain records.

    Whatever runs recorded them: what the week's report shows, beside the gate of the week.
    """
    from evalsentry.history.store import records

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
        row.update(_lineage_fields(target.lineage, f"the registry entry of {_who(target)}"))
        with meter.measure(evaluation_id) as measurement:
            ran = evaluate_isolated(
                target.uri,
                evalset,
                expected_sha256=target.sha256,
                trust=config.trust,
                factory=target.pinned_model.get("factory"),
                factory_kwargs=target.pinned_model.get("kwargs"),
                device=device,
                timeout_s=config.inference_timeout_s,
                progress=progress,
            )
        row.update(_lineage_fields(ran.lineage))
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
            row.update(_lineage_fields(exc.lineage))
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
        **cost_fields(
            device=env.device,
            wall_s=time.perf_counter() - clock,
            inference_s=result.inference_seconds,
            n_examples=result.num_examples,
            measurement=measurement,
            rates=config.cost,
        ),
    )


def _lineage_fields(lineage: Mapping[str, Any], where: object = "lineage") -> dict[str, Any]:
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
        target = Target.from_entry(
            Registry(config.registry_url).show(row["model"], int(row["version"]))
        )
        load = load_arguments(
            config.trust,
            target.sha256,
            target.pinned_model.get("factory"),
            target.pinned_model.get("kwargs"),
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
    from evalsentry.history.store import records

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
