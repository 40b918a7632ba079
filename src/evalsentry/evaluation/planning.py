"""A week's plan: which checkpoints run on which evalsets, and what is left to run.

The registry's production (and, with ``include_candidates``, candidate) versions become
``Target``s; each is paired with the evalsets its model line is bound to (``evalsentry.yaml``'s
``models:``), and a week's plan leaves out the pairs already recorded. A pair that cannot run
(a retired line, an evalset no model covers) is named, never silently dropped.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalsentry import __version__
from evalsentry.config import Config
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
from evalsentry.evaluation.pipeline import Outcome, Target, lineage_fields
from evalsentry.history.store import History
from evalsentry.names import NO_EVALSET, WEEKLY_RUN, WEEKLY_STAGES, RunKind
from evalsentry.weeks import now_utc

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.checkpoints.registry import Registry


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
    features; :func:`evalsentry.gate.drift.row_summaries`), and ``drift.live`` for one of token
    sequences (their input drift is not measured).

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
    named += [
        (f"gate.evalsets.{name}", name, "name an evalset that exists under gate.evalsets")
        for name in config.gate.evalsets
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
    for name in {*config.drift.live, *config.drift.features}:
        try:
            spec = read_spec(evalset_folder(name, config.evalsets_dir))
        except EvalsentryError:  # a broken manifest is the evalset's own ERROR, in validation
            continue
        if name in config.drift.live and spec.inputs.is_tokens:
            raise ConfigError(
                config.trust.config_file,
                f"drift.live.{name}",
                "the evalset holds token sequences, whose input drift is not measured; remove it",
            )
        try:
            if name in config.drift.features:
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


def imports_only(config: Config, registry: Registry, history: History) -> bool:
    """Whether the project's week is all imported: weekly-eval has nothing of its own to run.

    True when ``imports:`` lists lines, no model is bound or registered (in any stage), and the
    history holds results of imported lines only: a line the weekly run once evaluated and can
    no longer find is a broken registry, not a project without checkpoints.
    """
    if not config.imports or config.models or registry.list():
        return False
    recorded = history.evaluations()
    return recorded.empty or set(recorded["model"]) <= set(config.imports)


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
        row.update(lineage_fields(target.lineage))
    return Outcome(row, [], None)
