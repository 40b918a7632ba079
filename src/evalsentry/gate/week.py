"""The regression gate of a week, and of a candidate: each result against its references.

Each model line's current result is compared with the previous week of the same line and with
the baseline (the first recorded week, unless one is pinned), one comparison per (evalset,
metric, slice) (:func:`evalsentry.gate.pairs.compare`); a candidate is compared with its line's
production result. A week with nothing evaluated is an ERROR, never a PASS. The verdicts are
described in :mod:`evalsentry.gate.verdicts`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from evalsentry.config import Config
from evalsentry.errors import UsageError, did_you_mean
from evalsentry.gate.lineage import changes_of, diagnose, lineage_changes
from evalsentry.gate.pairs import (
    _error,
    _spec_for,
    _verdict,
    compare,
    failed_verdict,
)
from evalsentry.gate.verdicts import SEVERITY, Comparison, GateReport, Reference, Verdict
from evalsentry.history.store import History
from evalsentry.names import HARNESSES, LEAK_METRIC, NO_EVALSET, TIMING_METRIC, WEEKLY_RUN
from evalsentry.sections import DriftPolicy, GatePolicy
from evalsentry.weeks import latest_week, weeks_in_order

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.gate.drift import DriftResult

__all__ = [
    "SEVERITY",
    "Comparison",
    "GateReport",
    "Reference",
    "Verdict",
    "gate_candidate",
    "gate_week",
    "missing_lines",
    "nothing_evaluated",
    "week_drift",
]

log = logging.getLogger(__name__)


def gate_project_week(
    history: History, week: str, config: Config, models: Sequence[str] | None = None
) -> GateReport:
    """``week``'s verdict as the flows give it, with the project's settings.

    Its tolerances, evalsets, drift and registry; without ``models``, the lines the import
    flow records are left to it.
    """
    return gate_week(
        history,
        week,
        config.gate,
        models=models,
        evalsets_dir=config.evalsets_dir,
        drift=config.drift,
        registry_url=config.registry_url,
        recorded_elsewhere=() if models else tuple(config.imports),
    )


def gate_week(
    history: History,
    week: str | None,
    policy: GatePolicy,
    *,
    model: str | None = None,
    evalset: str | None = None,
    evalsets_dir: str | None = None,
    models: Sequence[str] | None = None,
    drift: DriftPolicy | None = None,
    registry_url: str | None = None,
    recorded_elsewhere: Collection[str] = (),
) -> GateReport:
    """Gate every production result of ``week`` against the previous week and the baseline.

    Evaluations that failed (status ``error``) are ERROR; candidates of the week are compared
    with the week's production result for information (they do not gate the week). ``model``
    or ``models`` restricts the gate to those model lines (a run of some models only).
    ``week`` None means the latest week of these results, else the latest of any (so that the
    gate can say what is missing); the history is read once for it. The week's recorded
    live-data drift is part of the report (:attr:`GateReport.drift`): any drift makes the week
    at least a WARN, and FAIL-level drift fails it when ``drift.fail_run`` is set.

    Absence is never a pass: a production line (model, evalset) with a row in the reference week
    (the latest earlier week of these results) and none this week is MISSING, an ERROR
    (:func:`missing_lines`), unless ``registry_url``'s registry has archived every version of
    its model, or its model is in ``recorded_elsewhere`` (lines another flow records: the weekly
    run does not wait for imported harness runs).

    Raises:
        UsageError: ``week`` is None and the history holds no weekly evaluation.
    """
    frame = history.evaluations(model=model, evalset=evalset, kind=WEEKLY_RUN)
    if models:
        frame = frame[frame["model"].isin(list(models))]
    if week is None:
        week = _latest_week(history, frame)
    comparisons: list[Comparison] = []
    this_week = frame[frame["week"] == week]
    drifts = week_drift(history, week, model or models, evalset)
    fails = drift is not None and drift.fail_run
    if this_week.empty:  # nothing evaluated is never a pass
        return GateReport(
            week,
            [nothing_evaluated(history, week, model or models, evalset)],
            policy.strict,
            drifts,
            fails,
        )
    for _, row in this_week[this_week["status"] != "ok"].iterrows():
        comparisons.append(failed_verdict(row))
    comparisons += missing_lines(frame, week, registry_url, recorded_elsewhere)
    comparisons += _gate_lines(history, week, frame[frame["status"] == "ok"], policy, evalsets_dir)
    findings = lineage_changes(frame, week, comparisons, history)
    report = GateReport(week, comparisons, policy.strict, drifts, fails, changes_of(findings))
    return replace(report, diagnosis=diagnose(findings, report.drifted, comparisons))


def _gate_lines(
    history: History, week: str, ok: pd.DataFrame, policy: GatePolicy, evalsets_dir: str | None
) -> list[Comparison]:
    """Every line's comparisons of ``week`` (see :func:`_gate_line`), then its paired timing."""
    comparisons: list[Comparison] = []
    production = ok[ok["stage"] == "production"]
    candidates = ok[(ok["week"] == week) & (ok["stage"] == "candidate")]
    lines = sorted(
        set(zip(production["model"], production["evalset"], strict=True))
        | set(zip(candidates["model"], candidates["evalset"], strict=True))
    )
    for line_model, line_evalset in lines:
        line = production[
            (production["model"] == line_model) & (production["evalset"] == line_evalset)
        ]
        its_candidates = candidates[
            (candidates["model"] == line_model) & (candidates["evalset"] == line_evalset)
        ]
        comparisons += _gate_line(history, week, line, its_candidates, policy, evalsets_dir)
    return comparisons + _stored_measurements(history, production[production["week"] == week])


def missing_lines(
    frame: pd.DataFrame,
    week: str,
    registry_url: str | None = None,
    recorded_elsewhere: Collection[str] = (),
) -> list[Comparison]:
    """An ERROR (MISSING) for each production line of the reference week with no row in ``week``.

    ``frame``: the weekly evaluations in the gate's scope. The reference week is the latest
    week before ``week`` among them. A line counts as present with any row of ``week`` on its
    evalset (a result, a failure, a candidate standing in) or an ERROR row of its model on no
    evalset. Lines of models in ``recorded_elsewhere``, and of models whose every registered
    version is archived in ``registry_url`` (retired on purpose), are not expected.
    """
    import pandas as pd

    earlier = [w for w in weeks_in_order(frame["week"]) if w < week]
    if not earlier:
        return []
    reference = frame[(frame["week"] == earlier[-1]) & (frame["stage"] == "production")]
    current = frame[frame["week"] == week]
    present = set(zip(current["model"], current["evalset"], strict=True))
    gone = sorted(
        (
            (model, evalset, None if pd.isna(version) else int(version))
            for model, evalset, version in zip(
                reference["model"], reference["evalset"], reference["version"], strict=True
            )
            if (model, evalset) not in present
            and (model, NO_EVALSET) not in present
            and model not in recorded_elsewhere
        ),
        key=lambda line: line[:2],
    )
    retired = _retired({model for model, _, _ in gone}, registry_url)
    on = {evalset: f" on {evalset}" if evalset != NO_EVALSET else "" for _, evalset, _ in gone}
    harness = dict(zip(reference["model"], reference["device"], strict=True))
    return [
        replace(
            Comparison.not_evaluated(
                week,
                f"MISSING: no result in {week} (last: {earlier[-1]}{on[evalset]}); "
                f"{_how_to_add(model, week, harness.get(model))}",
                model=model,
                evalset=evalset,
            ),
            version=version,
        )
        for model, evalset, version in gone
        if model not in retired
    ]


def _how_to_add(model: str, week: str, device: Any) -> str:
    """How a missing line's result is added: run it (or archive a retired line), or import it."""
    if device in HARNESSES:  # an imported line's device is its harness
        return (
            f"import its run (evalsentry import {device} ... --model {model} --week {week}, "
            f"or evalsentry import pickup --week {week})"
        )
    return (
        f"run it (evalsentry run --week {week} --model {model}), or archive the line's "
        "versions if it was retired"
    )


def _retired(models: Collection[str], registry_url: str | None) -> set[str]:
    """Those of ``models`` registered in ``registry_url`` with every version archived."""
    if not models or registry_url is None:
        return set()
    from evalsentry.checkpoints.registry import Registry

    registry = Registry(registry_url)
    stages: dict[str, set[str]] = {}
    for entry in (e for model in models for e in registry.list(model)):
        stages.setdefault(entry.model, set()).add(entry.stage)
    return {model for model, seen in stages.items() if seen == {"archived"}}


def _latest_week(history: History, frame: pd.DataFrame) -> str:
    """The latest week of ``frame``'s evaluations, else of any weekly evaluation."""
    week = latest_week(frame["week"]) or latest_week(history.evaluations(kind=WEEKLY_RUN)["week"])
    if week is None:
        raise UsageError(
            f"{history.root}: the history holds no weekly evaluation yet; run one first"
        )
    return week


def _gate_line(
    history: History,
    week: str,
    line: pd.DataFrame,
    candidates: pd.DataFrame,
    policy: GatePolicy,
    evalsets_dir: str | None,
) -> list[Comparison]:
    """One model line's comparisons of ``week``.

    Its production result against the previous week and the baseline (its first week: marked
    as the baseline), and its candidates against that result; with no production result this
    week, its candidates against the line.
    """
    current_rows = line[line["week"] == week]
    earlier = line[line["week"] < week]
    if current_rows.empty:
        # No production result this week (archived, or it failed): the line's candidates
        # are its result, gated against its last production result and its baseline.
        return [
            comparison
            for _, candidate in candidates.iterrows()
            for comparison in _against_line(history, candidate, earlier, policy, evalsets_dir)
        ]
    current = current_rows.iloc[-1]
    names, num_classes = _spec_for(current, evalsets_dir)
    if earlier.empty:
        return [_baseline_marker(current)]
    previous = earlier.iloc[-1]
    comparisons = compare(
        history, current, previous, Reference.PREVIOUS_WEEK, policy, names, num_classes
    )
    baseline = _baseline_row(history, line, current)
    if isinstance(baseline, Comparison):
        comparisons.append(baseline)
    elif baseline is not None and baseline["week"] not in (previous["week"], week):
        comparisons += compare(
            history, current, baseline, Reference.BASELINE, policy, names, num_classes
        )
    for _, candidate in candidates.iterrows():
        comparisons += compare(
            history,
            candidate,
            current,
            Reference.PRODUCTION,
            policy,
            names,
            num_classes,
            gating=False,
        )
    return comparisons


def week_drift(
    history: History,
    week: str,
    models: str | Sequence[str] | None = None,
    evalset: str | None = None,
) -> tuple[DriftResult, ...]:
    """The live-data drift recorded for ``week`` (its latest run's), of these lines and evalset.

    A model's prediction drift belongs to its line; the input drift of an evalset to every
    line on it.
    """
    from evalsentry.gate.drift import DriftResult
    from evalsentry.history.frames import records

    frame = history.drift([week])
    if frame.empty:
        return ()
    wanted = [models] if isinstance(models, str) else list(models or [])
    results = []
    for row in records(frame):
        if evalset is not None and row["evalset"] != evalset:
            continue
        if wanted and row.get("model") and row["model"] not in wanted:
            continue
        results.append(DriftResult.from_row(row))
    return tuple(results)


def _stored_measurements(history: History, current: pd.DataFrame) -> list[Comparison]:
    """The paired-timing and split-leak verdicts recorded for these evaluations.

    Both run in the weekly run (timing needs the checkpoints and the device, the leak check the
    training data); their verdicts are part of the week from then on, so every later gate of
    the week reports them too.
    """
    from evalsentry.history.frames import records

    if current.empty:
        return []
    stored = history.comparisons(current["evaluation_id"])
    if stored.empty:
        return []
    measured = stored[stored["metric"].isin([TIMING_METRIC, LEAK_METRIC])]
    return [Comparison.from_row(row) for row in records(measured)]


def nothing_evaluated(
    history: History,
    week: str,
    models: str | Sequence[str] | None = None,
    evalset: str | None = None,
) -> Comparison:
    """The ERROR of a gate with no result to judge, saying what is missing and what exists.

    Names the latest week with results (or that there is none) and, for a model or evalset
    that never had a result, the closest one that did.
    """
    names = [models] if isinstance(models, str) else list(models or [])
    scope = f"no result of week {week}"
    scope += f" for model {', '.join(names)}" if names else ""
    scope += f" on evalset {evalset}" if evalset else ""
    recorded = history.evaluations(kind=WEEKLY_RUN)

    def never(kind: str, name: str) -> str:
        suggestion = did_you_mean(name, recorded[kind])
        return f"{kind} {name!r} has none in any week" + (f".{suggestion}" if suggestion else "")

    hints = [never("model", name) for name in names if name not in set(recorded["model"])]
    if evalset and evalset not in set(recorded["evalset"]):
        hints.append(never("evalset", evalset))
    latest = latest_week(recorded["week"])
    hints.append(
        f"the latest week with results is {latest}"
        if latest
        else "no weekly result is recorded yet"
    )
    return Comparison.not_evaluated(week, "; ".join([scope, *hints]), evalset=evalset or "*")


def _baseline_marker(current: pd.Series) -> Comparison:
    return _verdict(
        current,
        Verdict.BASELINE,
        Reference.NONE,
        "first week of this model line: it becomes the baseline",
    )


def _baseline_row(
    history: History, line: pd.DataFrame, current: pd.Series
) -> pd.Series | Comparison | None:
    """The line's baseline result; an ERROR when a pinned baseline week holds none; else None.

    ``line`` is the line's production results. A pinned week without one is never skipped
    quietly: a degraded week would then pass the comparison the team asked for.
    """
    week, pinned = history.baseline(str(current["model"]), line["week"])
    rows = line[line["week"] == week]
    if not rows.empty:
        return rows.iloc[-1] if pinned else rows.iloc[0]
    if not pinned:
        return None
    return _error(
        current,
        Reference.BASELINE,
        f"not comparable: the pinned baseline {week} holds no production result of "
        f"{current['model']} on {current['evalset']}; pin a week that does (evalsentry "
        f"baseline set --model {current['model']} --week WEEK)",
        reference_week=week,
    )


def _against_line(
    history: History,
    candidate: pd.Series,
    production: pd.DataFrame,
    policy: GatePolicy,
    evalsets_dir: str | None,
) -> list[Comparison]:
    """A candidate against its line's latest production result and its baseline; both gate.

    With no production result to compare with, the verdict says so: an ERROR when the line's
    production evaluations all failed, else BASELINE (a new line), never a PASS.
    """
    if production.empty:
        return [_no_reference(history, candidate)]
    names, num_classes = _spec_for(candidate, evalsets_dir)
    reference = production.iloc[-1]
    comparisons = compare(
        history, candidate, reference, Reference.PRODUCTION, policy, names, num_classes
    )
    baseline = _baseline_row(history, production, candidate)
    if isinstance(baseline, Comparison):
        comparisons.append(baseline)
    elif baseline is not None and baseline["evaluation_id"] != reference["evaluation_id"]:
        comparisons += compare(
            history, candidate, baseline, Reference.BASELINE, policy, names, num_classes
        )
    return comparisons


def _no_reference(history: History, candidate: pd.Series) -> Comparison:
    """A candidate's verdict when its line has no production result: ERROR if they all failed."""
    tried = history.evaluations(
        model=candidate["model"], evalset=candidate["evalset"], kind=WEEKLY_RUN
    )
    failed = tried[(tried["stage"] == "production") & (tried["status"] != "ok")]
    if failed.empty:
        return replace(
            _baseline_marker(candidate), reason="no production result to compare with: a new line"
        )
    last = failed.iloc[-1]
    return _error(
        candidate,
        Reference.PRODUCTION,
        f"not comparable: every production evaluation of {candidate['model']} on "
        f"{candidate['evalset']} failed, so there is nothing to compare with (latest, "
        f"{last['week']}: {last['error']})",
    )


def gate_candidate(
    history: History,
    candidate: pd.Series,
    policy: GatePolicy,
    *,
    evalsets_dir: str | None = None,
) -> GateReport:
    """Gate a candidate against its model's latest production result and its baseline.

    Both comparisons gate, so the worse verdict decides: once a degraded model is in
    production, a candidate as bad still fails against the baseline. A line whose production
    evaluations all failed is an ERROR, never a first week.
    """
    frame = history.evaluations(
        model=candidate["model"], evalset=candidate["evalset"], kind=WEEKLY_RUN
    )
    production = frame[(frame["status"] == "ok") & (frame["stage"] == "production")]
    comparisons = _against_line(history, candidate, production, policy, evalsets_dir)
    return GateReport(candidate["week"], comparisons, policy.strict)
