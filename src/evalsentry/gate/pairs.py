"""One evaluation against one reference: the aligned example pairs, measured and decided.

For each (model, evalset, metric, slice) the current result is compared with a reference result
of the same model line (the previous week, or the baseline) on the same example ids.
:func:`compare` reads the aligned pairs from the history (:func:`read_pairs`), measures them
(:func:`evalsentry.gate.comparison.measure`: exact McNemar for count metrics, paired sign flips
for the others) and decides with the family correction (:func:`evalsentry.gate.comparison.decide`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry.errors import EvalsentryError
from evalsentry.gate.clusters import cluster_mismatch
from evalsentry.gate.content import content_change, unchanged_ids
from evalsentry.gate.metrics import metric_names
from evalsentry.gate.slices import OVERALL, slice_columns, slice_masks
from evalsentry.gate.verdicts import Comparison, Reference, Verdict
from evalsentry.history.schema import METRICS
from evalsentry.history.store import History
from evalsentry.sections import GatePolicy
from evalsentry.storage import join

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.gate.comparison import Decision, Family, Measurement, Unit


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
    order = np.argsort(ref_ids, kind="stable")  # fast on ids stored in order, as most are
    ordered = ref_ids[order]
    if not (np.array_equal(ordered, cur_ids) and np.all(ordered[1:] != ordered[:-1])):
        # The current in another order, or an id given twice: each current id's first match.
        position = np.clip(np.searchsorted(ordered, cur_ids), 0, len(order) - 1)
        order = order[position]
        if not np.array_equal(ref_ids[order], cur_ids):
            return None
    return {name: values[order] for name, values in reference.items()}


def canonical(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-example columns in example-id order: what is measured never depends on storage order.

    Resampling draws, cluster bootstraps and floating-point sums follow row positions; sorted by
    id, the same set of (example, values) gives the same numbers to the last digit, however the
    rows were written (a harness's shuffled samples, several GPUs gathering out of order).
    """
    order = np.argsort(columns["example_id"], kind="stable")
    return {name: values[order] for name, values in columns.items()}


def _units(columns: dict[str, np.ndarray], policy: GatePolicy) -> list[Unit]:
    """Overall, then every value of every slice column; slices gate only when the policy says."""
    from evalsentry.gate.comparison import Unit

    family: Family = "gate" if policy.slices == "gate" else "report"
    slices = slice_masks(slice_columns(columns))
    return [Unit(OVERALL, None, "gate")] + [Unit(name, mask, family) for name, mask in slices]


def owner(row: Mapping[str, Any] | pd.Series) -> dict[str, Any]:
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
        **owner(row),
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
    """Two evaluations' per-example columns aligned on example id, and their stored metrics.

    ``left_out`` says which examples were left out when only the unchanged ones were paired
    (``gate.only_unchanged``); None when every example was.
    """

    reference: dict[str, np.ndarray]
    current: dict[str, np.ndarray]
    stored: dict[tuple[str, str, str], float]  # (evaluation id, metric, slice) -> value
    left_out: str | None = None


def read_pairs(
    history: History, current: pd.Series, reference: pd.Series, *, only_unchanged: bool = False
) -> Pairs | str:
    """The aligned per-example columns of ``current`` and ``reference``, or why there are none.

    Returns the reason (``not comparable: ...``) when the evalset changed, predictions are
    missing or the two hold different examples: paired tests need pairs. With
    ``only_unchanged``, two imported runs whose examples changed pair on the examples both
    hold unchanged, saying how many were left out.
    """
    left_out = None
    cur_cols: dict[str, np.ndarray] | None
    ref_cols: dict[str, np.ndarray] | None
    if reference["evalset_sha256"] != current["evalset_sha256"]:
        reason = _content_change(history, current, reference) or (
            "not comparable: the evalset changed (sha256 differs)"
        )
        subset = _unchanged(history, current, reference) if only_unchanged else None
        if subset is None:
            return reason
        cur_cols, ref_cols, left_out = subset
    else:
        cur_cols = history.predictions(current["evaluation_id"])
        ref_cols = history.predictions(reference["evaluation_id"])
    if cur_cols is None or ref_cols is None:
        return "not comparable: predictions missing"
    ordered = canonical(cur_cols)
    aligned = align(ref_cols, ordered)
    if aligned is None:
        return "not comparable: different example ids"
    mismatch = cluster_mismatch(aligned, ordered)
    if mismatch:
        return mismatch
    stored = history.metrics([current["evaluation_id"], reference["evaluation_id"]])
    values = {(r.evaluation_id, r.metric, r.slice): r.value for r in stored.itertuples()}
    return Pairs(aligned, ordered, values, left_out)


def _unchanged(
    history: History, current: pd.Series, reference: pd.Series
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str] | None:
    """Both runs' columns cut to the examples both hold unchanged, and what was left out."""
    cur_cols = history.predictions(current["evaluation_id"])
    ref_cols = history.predictions(reference["evaluation_id"])
    found = unchanged_ids(ref_cols, cur_cols) if cur_cols and ref_cols else None
    if cur_cols is None or ref_cols is None or found is None or not found[0].size:
        return None
    ids, left = found
    cut_cur = {k: v[np.isin(cur_cols["example_id"], ids)] for k, v in cur_cols.items()}
    cut_ref = {k: v[np.isin(ref_cols["example_id"], ids)] for k, v in ref_cols.items()}
    total = len(ref_cols["example_id"])  # the reference's examples (an edit replaces one)
    said = f"gated on the {ids.size} of the reference's {total} examples both runs hold unchanged, {left}"  # fmt: skip
    return cut_cur, cut_ref, f"{said} (gate.only_unchanged)"


def _content_change(history: History, current: pd.Series, reference: pd.Series) -> str | None:
    """What content changed between two imported evaluations (see :mod:`.content`), if known."""
    try:
        cur_cols = history.predictions(current["evaluation_id"])
        ref_cols = history.predictions(reference["evaluation_id"])
    except EvalsentryError:  # unreadable: the evalset changed, which is all that can be said
        return None
    return content_change(ref_cols, cur_cols) if cur_cols and ref_cols else None


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
    is an ERROR, as is a comparison without pairs. The evalset's own tolerances
    (``gate.evalsets.<evalset>``) apply.
    """
    policy = policy.for_evalset(str(current["evalset"]))
    ref_fields = {
        "reference_evaluation_id": reference["evaluation_id"],
        "reference_week": reference["week"],
        "reference_version": _int(reference.get("version")),
        "gating": gating,
    }
    only_unchanged = str(current["evalset"]) in policy.only_unchanged
    pairs = read_pairs(history, current, reference, only_unchanged=only_unchanged)
    if isinstance(pairs, str):
        return [_error(current, reference_kind, pairs, **ref_fields)]
    # Without the evalset's spec, judge every metric either side recorded: one missing is an ERROR.
    metrics = list(names) or sorted({metric for _, metric, _ in pairs.stored})
    if not metrics:  # nothing compared is never a PASS
        return [_error(current, reference_kind, _no_metric(history), **ref_fields)]
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
    if pairs.left_out:
        out = [_on_a_subset(c, pairs.left_out) for c in out]
    return _flag_nondeterminism(out, current, reference, pairs.current, pairs.reference)


def _on_a_subset(comparison: Comparison, left_out: str) -> Comparison:
    """A comparison of the unchanged examples only: says so, and is never a plain PASS."""
    verdict = Verdict.WARN if comparison.verdict == Verdict.PASS else comparison.verdict
    reason = f"{comparison.reason}; {left_out}" if comparison.reason else left_out
    return replace(comparison, verdict=verdict, reason=reason)


def _no_metric(history: History) -> str:
    """Why two evaluations with predictions have nothing to compare, naming where it looked."""
    return (
        "not comparable: no metric to compare (neither evaluation has a row in "
        f"{join(history.path, METRICS)}, and no usable manifest of the evalset names them)"
    )


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
        **owner(current),
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
    column = "prediction" if "prediction" in cur_cols else "loss"  # a language model's score
    flipped = int((cur_cols[column] != ref_cols[column]).sum())
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
