"""The regression gate: paired comparisons of an evaluation against its references.

For each (model, evalset, metric, slice) the current result is compared with the previous week
of the same model line and with the baseline (the first recorded week, unless one is pinned),
on the same example ids. :func:`compare` reads the aligned pairs from the history
(:func:`read_pairs`), measures them (:func:`evalsentry.gate.comparison.measure`: exact McNemar for
count metrics, paired sign flips for the others) and decides with the family correction
(:func:`evalsentry.gate.comparison.decide`). The verdicts are described in :mod:`evalsentry.gate.verdicts`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry.config import DriftPolicy, GatePolicy
from evalsentry.errors import UsageError, did_you_mean
from evalsentry.gate.metrics import metric_names
from evalsentry.gate.slices import OVERALL, slice_columns, slice_masks
from evalsentry.gate.verdicts import SEVERITY, Comparison, GateReport, Reference, Verdict
from evalsentry.history.store import History
from evalsentry.names import TIMING_METRIC, WEEKLY_RUN
from evalsentry.weeks import latest_week

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.gate.comparison import Decision, Family, Measurement, Unit
    from evalsentry.gate.drift import DriftResult

__all__ = [
    "SEVERITY",
    "Comparison",
    "GateReport",
    "Reference",
    "Verdict",
    "align",
    "compare",
    "failed_verdict",
    "gate_candidate",
    "gate_week",
    "nothing_evaluated",
    "read_pairs",
    "week_drift",
]

log = logging.getLogger(__name__)


ENVIRONMENT_FIELDS = (
    "device",
    "device_name",
    "torch_version",
    "python_version",
    "cuda_version",
    "driver_version",
    "precision",
)


def align(
    reference: dict[str, np.ndarray], current: dict[str, np.ndarray]
) -> dict[str, np.ndarray] | None:
    """The reference's per-example columns reordered to the current's example ids.

    Returns None unless both hold exactly the same examples: paired tests need pairs.
    """
    ref_ids, cur_ids = reference["example_id"], current["example_id"]
    if len(ref_ids) != len(cur_ids) or not len(ref_ids):
        return None
    order = np.argsort(ref_ids)
    position = np.clip(np.searchsorted(ref_ids, cur_ids, sorter=order), 0, len(order) - 1)
    aligned = order[position]
    if not np.array_equal(ref_ids[aligned], cur_ids):
        return None
    return {name: values[aligned] for name, values in reference.items()}


def _units(columns: dict[str, np.ndarray], policy: GatePolicy) -> list[Unit]:
    """Overall, then every value of every slice column; slices gate only when the policy says."""
    from evalsentry.gate.comparison import Unit

    family: Family = "gate" if policy.slices == "gate" else "report"
    slices = slice_masks(slice_columns(columns))
    return [Unit(OVERALL, None, "gate")] + [Unit(name, mask, family) for name, mask in slices]


def _owner(row: pd.Series) -> dict[str, Any]:
    """The fields of a comparison that say whose it is: the evaluation row's."""
    return {
        "evaluation_id": row["evaluation_id"],
        "week": row["week"],
        "model": row["model"],
        "version": _int(row.get("version")),
        "evalset": row["evalset"],
        "kind": _text(row.get("kind")),
        "stage": _text(row.get("stage")),
        "checkpoint_sha256": _text(row.get("checkpoint_sha256")),
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _verdict(
    row: pd.Series, verdict: Verdict, reference: Reference, reason: str, **fields: Any
) -> Comparison:
    """A verdict on one evaluation row as a whole (metric ``*`` unless given)."""
    return Comparison(
        **_owner(row),
        reference=reference,
        metric=fields.pop("metric", "*"),
        verdict=verdict,
        reason=reason,
        **fields,
    )


def _error(row: pd.Series, reference: Reference, reason: str, **fields: Any) -> Comparison:
    return _verdict(row, Verdict.ERROR, reference, reason, **fields)


def failed_verdict(row: Mapping[str, Any]) -> Comparison:
    """The ERROR of an evaluation row with no result (status ``error``), with its reason.

    ``evaluation failed`` when the checkpoint ran on the evalset and broke; ``not evaluated``
    when it never got there (an invalid evalset, a line bound to none, a line no run covered):
    such a row names no evalset hash.
    """
    import pandas as pd

    ran = isinstance(row.get("evalset_sha256"), str)
    what = "evaluation failed" if ran else "not evaluated"
    return _error(pd.Series(row), Reference.NONE, f"{what}: {row['error']}")


def _int(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


@dataclass(frozen=True)
class Pairs:
    """Two evaluations' per-example columns aligned on example id, and their stored metrics."""

    reference: dict[str, np.ndarray]
    current: dict[str, np.ndarray]
    stored: dict[tuple[str, str, str], float]  # (evaluation id, metric, slice) -> value


def read_pairs(history: History, current: pd.Series, reference: pd.Series) -> Pairs | str:
    """The aligned per-example columns of ``current`` and ``reference``, or why there are none.

    Returns the reason (``not comparable: ...``) when the evalset changed, predictions are
    missing or the two hold different examples: paired tests need pairs.
    """
    if reference["evalset_sha256"] != current["evalset_sha256"]:
        return "not comparable: the evalset changed (sha256 differs)"
    cur_cols = history.predictions(current["evaluation_id"])
    ref_cols = history.predictions(reference["evaluation_id"])
    if cur_cols is None or ref_cols is None:
        return "not comparable: predictions missing"
    aligned = align(ref_cols, cur_cols)
    if aligned is None:
        return "not comparable: different example ids"
    stored = history.metrics([current["evaluation_id"], reference["evaluation_id"]])
    values = {(r.evaluation_id, r.metric, r.slice): r.value for r in stored.itertuples()}
    return Pairs(aligned, cur_cols, values)


def compare(
    history: History,
    current: pd.Series,
    reference: pd.Series,
    reference_kind: Reference,
    policy: GatePolicy,
    names: Sequence[str],
    num_classes: int | None,
    *,
    gating: bool = True,
) -> list[Comparison]:
    """Compare one evaluation with one reference evaluation, metric by metric, slice by slice.

    Reads the aligned pairs, measures every metric both sides recorded on every unit (overall
    and each slice) and decides with the family correction; a metric recorded on one side only
    is an ERROR, as is a comparison without pairs.
    """
    ref_fields = {
        "reference_evaluation_id": reference["evaluation_id"],
        "reference_week": reference["week"],
        "reference_version": _int(reference.get("version")),
        "gating": gating,
    }
    pairs = read_pairs(history, current, reference)
    if isinstance(pairs, str):
        return [_error(current, reference_kind, pairs, **ref_fields)]
    # Without the evalset's spec, judge every metric either side recorded: one missing is an ERROR.
    metrics = list(names) or sorted({metric for _, metric, _ in pairs.stored})
    units = _units(pairs.current, policy)
    ids = (reference["evaluation_id"], current["evaluation_id"])

    decided = _measured_and_decided(pairs, ids, metrics, units, policy, num_classes)
    out = []
    for metric in metrics:
        for unit in units:
            fields = {**ref_fields, "gating": gating and unit.family == "gate"}
            if (metric, unit.name) not in decided:
                out.append(
                    _error(
                        current,
                        reference_kind,
                        "not comparable: metric missing",
                        metric=metric,
                        slice=unit.name,
                        **fields,
                    )
                )
                continue
            m, decision = decided[metric, unit.name]
            out.append(_comparison(current, reference_kind, m, decision, fields))
    return _flag_nondeterminism(out, current, reference, pairs.current, pairs.reference)


def _measured_and_decided(
    pairs: Pairs,
    ids: tuple[Any, Any],
    metrics: Sequence[str],
    units: Sequence[Unit],
    policy: GatePolicy,
    num_classes: int | None,
) -> dict[tuple[str, str], tuple[Measurement, Decision]]:
    """Each (metric, unit) both evaluations recorded, measured and judged with its family."""
    from evalsentry.gate.comparison import decide, measure

    def recorded(metric: str, unit: str) -> bool:
        return all((i, metric, unit) in pairs.stored for i in ids)

    measurable = [m for m in metrics if recorded(m, OVERALL)]
    measured = (
        measure(pairs.reference, pairs.current, measurable, units, policy, num_classes)
        if measurable
        else []
    )
    kept = [m for m in measured if recorded(m.metric, m.slice)]
    return {
        (m.metric, m.slice): (m, decision)
        for m, decision in zip(kept, decide(kept, policy), strict=True)
    }


def _comparison(
    current: pd.Series,
    reference_kind: Reference,
    m: Measurement,
    decision: Decision,
    ref_fields: Mapping[str, Any],
) -> Comparison:
    """The row of one measured and judged metric on one unit."""
    return Comparison(
        **_owner(current),
        reference=reference_kind,
        metric=m.metric,
        slice=m.slice,
        verdict=decision.verdict,
        reason=decision.reason,
        **ref_fields,
        reference_value=m.reference_value,
        value=m.value,
        delta=m.value - m.reference_value,
        drop=m.drop,
        tolerance=m.tolerance,
        p_value=m.p_value,
        p_adjusted=decision.p_adjusted,
        method=m.method,
        newly_wrong=m.newly_wrong,
        newly_right=m.newly_right,
        n=m.n,
        drop_bound=m.bound if math.isfinite(m.bound) else None,
        detectable_drop=decision.detectable,
        flip_delta=m.flip_delta,
        inconclusive_kind=decision.kind,
    )


def _flag_nondeterminism(
    out: list[Comparison],
    current: pd.Series,
    reference: pd.Series,
    cur_cols: dict[str, np.ndarray],
    ref_cols: dict[str, np.ndarray],
) -> list[Comparison]:
    """Same checkpoint, same data, different predictions: the environment changed something."""
    if current["checkpoint_sha256"] != reference["checkpoint_sha256"]:
        return out
    flipped = int((cur_cols["prediction"] != ref_cols["prediction"]).sum())
    if not flipped:
        return out
    changes = [
        f"{f} {reference.get(f)} -> {current.get(f)}"
        for f in ENVIRONMENT_FIELDS
        if reference.get(f) != current.get(f)
    ]
    reason = (
        f"same checkpoint and data gave {flipped} different prediction(s) "
        f"(flip rate {flipped / len(cur_cols['prediction']):.4f}); environment: {', '.join(changes) or 'no recorded difference'}"
    )
    return [
        replace(c, verdict=Verdict.WARN, reason=reason)
        if c.verdict == Verdict.PASS and c.slice == OVERALL
        else c
        for c in out
    ]


def _spec_for(current: pd.Series, evalsets_dir: str | None) -> tuple[list[str], int | None]:
    """The metrics to judge: the evalset's, while its manifest is the one this result was run on.

    A manifest edited since freeze (``metrics:`` narrowed, say), missing or unreadable, or frozen
    again since, says nothing about this result: then every metric either side recorded is judged.
    """
    from evalsentry.evalsets.evalset import check_manifest, evalset_folder, read_spec

    try:
        folder = evalset_folder(current["evalset"], evalsets_dir)
        spec = read_spec(folder)
        check_manifest(folder, spec)
    except Exception:  # noqa: BLE001 - fall back to the metrics recorded in the history
        return [], None
    if spec.evalset_sha256 != current["evalset_sha256"]:
        return [], None
    return metric_names(spec.metrics, spec.task, spec.num_classes), spec.num_classes


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
) -> GateReport:
    """Gate every production result of ``week`` against the previous week and the baseline.

    Evaluations that failed (status ``error``) are ERROR; candidates of the week are compared
    with the week's production result for information (they do not gate the week). ``model``
    or ``models`` restricts the gate to those model lines (a run of some models only).
    ``week`` None means the latest week of these results, else the latest of any (so that the
    gate can say what is missing); the history is read once for it. The week's recorded
    live-data drift is part of the report (:attr:`GateReport.drift`): any drift makes the week
    at least a WARN, and FAIL-level drift fails it when ``drift.fail_run`` is set.

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
    ok = frame[frame["status"] == "ok"]
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
    comparisons += _stored_timing(history, production[production["week"] == week])
    return GateReport(week, comparisons, policy.strict, drifts, fails)


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
    from evalsentry.history.store import records

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


def _stored_timing(history: History, current: pd.DataFrame) -> list[Comparison]:
    """The paired-timing verdicts recorded for these evaluations (by the run that timed them).

    Timing runs in the weekly run (it needs the checkpoints and the device); its verdict is
    part of the week from then on, so every later gate of the week reports it too.
    """
    from evalsentry.history.store import records

    if current.empty:
        return []
    stored = history.comparisons(current["evaluation_id"])
    if stored.empty:
        return []
    timing = stored[stored["metric"] == TIMING_METRIC]
    return [Comparison.from_row(row) for row in records(timing)]


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
