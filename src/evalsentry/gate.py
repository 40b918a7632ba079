"""The regression gate: paired comparisons of an evaluation against its references.

For each (model, evalset, metric, slice) the current result is compared with the previous week
of the same model line and with the baseline (the first recorded week, unless one is pinned),
on the same example ids: exact McNemar for accuracy-type metrics, paired bootstrap otherwise,
Holm-corrected across the metrics and slices of one comparison.

- FAIL: the drop exceeds the tolerance and is significant.
- WARN: the drop exceeds the tolerance but is not significant; or it is significant but within
  tolerance; or the same checkpoint on the same data gave different predictions.
- ERROR: not comparable (evalset changed, metric or predictions missing, evaluation failed).
- PASS otherwise; BASELINE for the first week of a model line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry.config import GatePolicy
from evalsentry.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, ConfigError, did_you_mean
from evalsentry.history import History, latest_week

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

OVERALL = ""
BRIEF_REASON_CHARS = 60  # an ERROR's reason in a headline: enough for the cause, not its path
ENVIRONMENT_FIELDS = (
    "device",
    "device_name",
    "torch_version",
    "python_version",
    "cuda_version",
    "driver_version",
    "precision",
)


class Verdict(StrEnum):
    """Outcome of one comparison."""

    PASS = "PASS"  # noqa: S105 - a verdict, not a password
    BASELINE = "BASELINE"
    WARN = "WARN"
    FAIL = "FAIL"
    ERROR = "ERROR"


SEVERITY = {
    Verdict.PASS: 0,
    Verdict.BASELINE: 0,
    Verdict.WARN: 1,
    Verdict.FAIL: 2,
    Verdict.ERROR: 3,
}


@dataclass(frozen=True)
class Comparison:
    """One metric (or slice) of one evaluation against one reference."""

    evaluation_id: str
    week: str
    model: str
    version: int | None
    evalset: str
    reference: str  # previous-week | baseline | production | none
    metric: str
    verdict: Verdict
    reason: str
    slice: str = OVERALL
    gating: bool = True
    reference_evaluation_id: str | None = None
    reference_week: str | None = None
    reference_version: int | None = None
    reference_value: float | None = None
    value: float | None = None
    delta: float | None = None
    drop: float | None = None
    tolerance: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    method: str | None = None
    newly_wrong: int | None = None
    newly_right: int | None = None
    n: int | None = None

    def row(self, run_id: str, created_at: Any) -> dict[str, Any]:
        """The history row of this comparison."""
        return {
            **asdict(self),
            "verdict": str(self.verdict),
            "run_id": run_id,
            "created_at": created_at,
        }

    @property
    def label(self) -> str:
        """``model/evalset metric[slice] vs reference``, for messages."""
        who = self.who(with_evalset=True)
        if self.metric == "*" and self.reference == "none":  # a verdict on the whole evaluation
            return who
        part = f"{self.metric}[{self.slice}]" if self.slice else self.metric
        return f"{who}: {part} vs {self.reference}"

    def who(self, *, with_evalset: bool) -> str:
        """Which checkpoint: ``m@v3``, ``m (candidate file)``, and ``on <evalset>`` if asked.

        Model ``*`` means no checkpoint ran: ``every checkpoint on <evalset>`` (an evalset
        problem), or ``nothing evaluated`` when the evalset is ``*`` too.
        """
        if self.model == "*":
            return (
                "nothing evaluated"
                if self.evalset == "*"
                else f"every checkpoint on {self.evalset}"
            )
        who = (
            f"{self.model}@v{self.version}"
            if self.version is not None
            else f"{self.model} (candidate file)"
        )
        return who + (f" on {self.evalset}" if with_evalset else "")

    @property
    def change(self) -> str:
        """The signed change from the reference: percentage points for an accuracy-type metric.

        An accuracy-type metric (a proportion of examples, tested by McNemar) changes by
        ``-6.8 pts``; any other by the signed change of its value to 3 significant digits.
        Empty when nothing was measured.
        """
        if self.delta is None:
            return ""
        if self.method == "mcnemar-exact":
            return f"{self.delta * 100:+.1f} pts"
        return f"{self.delta:+.3g}"

    def brief(self, *, with_evalset: bool = False) -> str:
        """A few words: verdict, who, metric, change (``FAIL m@v3 accuracy -6.8 pts (p=6e-11)``).

        The reference is named unless it is the previous week; an ERROR adds its reason in
        parentheses, cut to ``BRIEF_REASON_CHARS``.
        """
        words = [str(self.verdict), self.who(with_evalset=with_evalset)]
        if self.metric != "*":
            words.append(f"{self.metric}[{self.slice}]" if self.slice else self.metric)
        if self.change:
            words.append(self.change)
            if self.reference not in ("previous-week", "none"):
                words.append(f"vs {self.reference}")
            if self.p_adjusted is not None:
                words.append(f"(p={self.p_adjusted:.1g})")
        text = " ".join(words)
        if self.verdict == Verdict.ERROR and self.reason:
            reason = self.reason
            if len(reason) > BRIEF_REASON_CHARS:
                reason = reason[: BRIEF_REASON_CHARS - 1].rstrip() + "…"
            text += f" ({reason})"
        return text

    def describe(self) -> str:
        """One line with the numbers behind the verdict."""
        text = f"{self.verdict} {self.label}"
        if self.value is not None and self.reference_value is not None:
            text += f": {self.reference_value:.4f} -> {self.value:.4f} (drop {self.drop:+.4f}, tolerance {self.tolerance:.4f}"
            if self.p_adjusted is not None:
                text += f", p={self.p_adjusted:.2g} {self.method}"
            if self.newly_wrong is not None:
                text += f", flips -{self.newly_wrong}/+{self.newly_right}"
            text += ")"
        return text + (f"; {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class GateReport:
    """Every comparison the gate made, and what they add up to."""

    week: str
    comparisons: list[Comparison]

    def _with(self, verdict: Verdict) -> list[Comparison]:
        return [c for c in self.comparisons if c.gating and c.verdict == verdict]

    @property
    def failures(self) -> list[Comparison]:
        """Gating comparisons that FAILed."""
        return self._with(Verdict.FAIL)

    @property
    def errors(self) -> list[Comparison]:
        """Gating comparisons that were not comparable."""
        return self._with(Verdict.ERROR)

    @property
    def warnings(self) -> list[Comparison]:
        """Gating comparisons that WARNed."""
        return self._with(Verdict.WARN)

    @property
    def verdict(self) -> Verdict:
        """The worst gating verdict (PASS when there is nothing to compare)."""
        gating = [c.verdict for c in self.comparisons if c.gating]
        return max(gating, key=SEVERITY.__getitem__, default=Verdict.PASS)

    @property
    def exit_code(self) -> int:
        """0 pass or warn, 1 a FAIL, 2 an ERROR (fail closed)."""
        if self.errors:
            return EXIT_USAGE
        return EXIT_CHECK_FAILED if self.failures else EXIT_OK

    @property
    def problems(self) -> list[Comparison]:
        """Gating ERRORs and FAILs, worst first: overall before slices, then in gate order."""
        return sorted(
            self.errors + self.failures,
            key=lambda c: (-SEVERITY[c.verdict], c.slice != OVERALL),
        )

    def headline(self) -> str:
        """One line that leads with the worst problem and counts the rest.

        ``2026-W49: FAIL digits@v3 accuracy -6.8 pts (p=6e-11) and 3 more``; without a FAIL
        or an ERROR, the verdict and the number of warnings.
        """
        problems = self.problems
        if not problems:
            return f"{self.week}: {self.verdict}, {len(self.warnings)} warning(s)"
        several = len({c.evalset for c in self.comparisons}) > 1
        text = f"{self.week}: {problems[0].brief(with_evalset=several)}"
        return text + (f" and {len(problems) - 1} more" if len(problems) > 1 else "")

    def message(self, sep: str = "\n") -> str:
        """The headline, then one line per FAIL and ERROR (model, evalset, metric, drop, p, flips).

        Args:
            sep: What joins the lines; ``" | "`` gives one line, for a log or a state message.
        """
        return sep.join([self.headline()] + [c.describe() for c in self.problems])


def metric_names(
    evalset_metrics: Sequence[str] | None, task: str, num_classes: int | None
) -> list[str]:
    """The metrics an evalset is judged on: its own list, else the task's defaults."""
    from evalsentry.metrics import UnknownMetric, default_metrics, get_metric

    names = list(evalset_metrics or default_metrics(task, num_classes))  # type: ignore[arg-type]
    try:
        for name in names:
            get_metric(name)
    except UnknownMetric as exc:
        raise ConfigError("evalset.yaml", "metrics", str(exc)) from None
    return names


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


def _slices(columns: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    out = []
    for name in sorted(c for c in columns if c.startswith("slice:")):
        values = columns[name].astype(str)
        out += [(f"{name[6:]}={v}", values == v) for v in sorted(set(values.tolist()))]
    return out


def _verdict(
    row: pd.Series, verdict: Verdict, reference: str, reason: str, **fields: Any
) -> Comparison:
    """A verdict on one evaluation row as a whole (metric ``*`` unless given)."""
    return Comparison(
        evaluation_id=row["evaluation_id"],
        week=row["week"],
        model=row["model"],
        version=_int(row.get("version")),
        evalset=row["evalset"],
        reference=reference,
        metric=fields.pop("metric", "*"),
        verdict=verdict,
        reason=reason,
        **fields,
    )


def _error(row: pd.Series, reference: str, reason: str, **fields: Any) -> Comparison:
    return _verdict(row, Verdict.ERROR, reference, reason, **fields)


def _int(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def compare(
    history: History,
    current: pd.Series,
    reference: pd.Series,
    reference_kind: str,
    policy: GatePolicy,
    names: Sequence[str],
    num_classes: int | None,
    *,
    gating: bool = True,
) -> list[Comparison]:
    """Compare one evaluation with one reference evaluation, metric by metric, slice by slice."""
    from evalsentry.metrics import get_metric
    from evalsentry.stats import holm, minimum_detectable_drop, paired_drop_pvalue

    ref_fields = {
        "reference_evaluation_id": reference["evaluation_id"],
        "reference_week": reference["week"],
        "reference_version": _int(reference.get("version")),
        "gating": gating,
    }
    if reference["evalset_sha256"] != current["evalset_sha256"]:
        return [
            _error(
                current,
                reference_kind,
                "not comparable: the evalset changed (sha256 differs)",
                **ref_fields,
            )
        ]
    cur_cols, ref_cols = (
        history.predictions(current["evaluation_id"]),
        history.predictions(reference["evaluation_id"]),
    )
    if cur_cols is None or ref_cols is None:
        return [
            _error(current, reference_kind, "not comparable: predictions missing", **ref_fields)
        ]
    aligned = align(ref_cols, cur_cols)
    if aligned is None:
        return [
            _error(current, reference_kind, "not comparable: different example ids", **ref_fields)
        ]
    ref_cols = aligned
    stored = history.metrics([current["evaluation_id"], reference["evaluation_id"]])
    values = {(r.evaluation_id, r.metric, r.slice): r.value for r in stored.itertuples()}
    # Without the evalset's spec, judge every metric either side recorded: one missing is an ERROR.
    names = list(names) or sorted(set(stored["metric"]))

    tested: list[Comparison] = []
    units = [(OVERALL, None), *_slices(cur_cols)]
    for name in names:
        metric = get_metric(name)
        for slice_name, mask in units:
            ref_value = values.get((reference["evaluation_id"], name, slice_name))
            cur_value = values.get((current["evaluation_id"], name, slice_name))
            is_gating = gating and (slice_name == OVERALL or policy.slices == "gate")
            if ref_value is None or cur_value is None:
                tested.append(
                    _error(
                        current,
                        reference_kind,
                        "not comparable: metric missing",
                        metric=name,
                        slice=slice_name,
                        **{**ref_fields, "gating": is_gating},
                    )
                )
                continue
            pick = (
                (lambda cols: cols)
                if mask is None
                else (lambda cols, m=mask: {k: v[m] for k, v in cols.items()})
            )
            result = paired_drop_pvalue(
                metric,
                pick(ref_cols),
                pick(cur_cols),
                num_classes=num_classes,
                n_resamples=policy.bootstrap_resamples,
            )
            drop = (ref_value - cur_value) if metric.higher_is_better else (cur_value - ref_value)
            tested.append(
                Comparison(
                    evaluation_id=current["evaluation_id"],
                    week=current["week"],
                    model=current["model"],
                    version=_int(current.get("version")),
                    evalset=current["evalset"],
                    reference=reference_kind,
                    metric=name,
                    slice=slice_name,
                    verdict=Verdict.PASS,
                    reason="",
                    **{**ref_fields, "gating": is_gating},
                    reference_value=float(ref_value),
                    value=float(cur_value),
                    delta=float(cur_value - ref_value),
                    drop=float(drop),
                    tolerance=policy.tolerance(name).allowed_drop(float(ref_value)),
                    p_value=result.p_value,
                    method=result.method,
                    newly_wrong=result.newly_wrong,
                    newly_right=result.newly_right,
                    n=result.n,
                )
            )
    measured = [c for c in tested if c.p_value is not None]
    adjusted = holm([c.p_value for c in measured])  # type: ignore[misc]
    decided = {
        id(c): _decide(replace(c, p_adjusted=p), policy, minimum_detectable_drop)
        for c, p in zip(measured, adjusted, strict=True)
    }
    out = [decided.get(id(c), c) for c in tested]
    return _flag_nondeterminism(out, current, reference, cur_cols, ref_cols)


def _decide(c: Comparison, policy: GatePolicy, mdd: Any) -> Comparison:
    assert c.drop is not None and c.tolerance is not None and c.p_adjusted is not None  # noqa: S101 - set by compare
    beyond = c.drop > c.tolerance
    significant = c.drop > 0 and c.p_adjusted < policy.alpha
    if beyond and significant:
        return replace(c, verdict=Verdict.FAIL, reason="drop beyond tolerance and significant")
    if beyond:
        reason = "drop beyond tolerance but not significant"
        if c.method == "mcnemar-exact" and c.n and c.reference_value is not None:
            floor = mdd(c.n, c.reference_value, policy.alpha)
            reason += f" (this evalset detects drops of about {floor:.3f} or more)"
        return replace(c, verdict=Verdict.WARN, reason=reason)
    if significant:
        return replace(c, verdict=Verdict.WARN, reason="significant drop within tolerance")
    return c


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
    from evalsentry.evalsets import check_manifest, evalset_folder, read_spec

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
    week: str,
    policy: GatePolicy,
    *,
    model: str | None = None,
    evalset: str | None = None,
    evalsets_dir: str | None = None,
    models: Sequence[str] | None = None,
) -> GateReport:
    """Gate every production result of ``week`` against the previous week and the baseline.

    Evaluations that failed (status ``error``) are ERROR; candidates of the week are compared
    with the week's production result for information (they do not gate the week). ``model``
    or ``models`` restricts the gate to those model lines (a run of some models only).
    """
    frame = history.evaluations(model=model, evalset=evalset, kind="scheduled")
    if models:
        frame = frame[frame["model"].isin(list(models))]
    comparisons: list[Comparison] = []
    this_week = frame[frame["week"] == week]
    if this_week.empty:  # nothing evaluated is never a pass
        return GateReport(week, [nothing_evaluated(history, week, model or models, evalset)])
    for _, row in this_week[this_week["status"] != "ok"].iterrows():
        comparisons.append(_error(row, "none", f"evaluation failed: {row['error']}"))
    ok = frame[frame["status"] == "ok"]
    production = ok[ok["stage"] == "production"]
    for (line_model, line_evalset), line in production.groupby(["model", "evalset"]):
        current_rows = line[line["week"] == week]
        if current_rows.empty:
            continue
        current = current_rows.iloc[-1]
        earlier = line[line["week"] < week]
        names, num_classes = _spec_for(current, evalsets_dir)
        if earlier.empty:
            comparisons.append(_baseline_marker(current))
            continue
        previous = earlier.iloc[-1]
        comparisons += compare(
            history, current, previous, "previous-week", policy, names, num_classes
        )
        baseline = _baseline_row(history, line, str(line_model))
        if baseline is not None and baseline["week"] not in (previous["week"], week):
            comparisons += compare(
                history, current, baseline, "baseline", policy, names, num_classes
            )
        candidates = ok[
            (ok["week"] == week)
            & (ok["stage"] == "candidate")
            & (ok["model"] == line_model)
            & (ok["evalset"] == line_evalset)
        ]
        for _, candidate in candidates.iterrows():
            comparisons += compare(
                history, candidate, current, "production", policy, names, num_classes, gating=False
            )
    return GateReport(week, comparisons)


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
    recorded = history.evaluations(kind="scheduled")
    hints = [
        f"model {name!r} has none in any week.{did_you_mean(name, recorded['model'])}"
        for name in names
        if name not in set(recorded["model"])
    ]
    if evalset and evalset not in set(recorded["evalset"]):
        hints.append(
            f"evalset {evalset!r} has none in any week.{did_you_mean(evalset, recorded['evalset'])}"
        )
    latest = latest_week(recorded["week"])
    hints.append(
        f"the latest week with results is {latest}"
        if latest
        else "no weekly result is recorded yet"
    )
    return Comparison(
        evaluation_id="",
        week=week,
        model="*",
        version=None,
        evalset=evalset or "*",
        reference="none",
        metric="*",
        verdict=Verdict.ERROR,
        reason="; ".join([scope, *hints]),
    )


def _baseline_marker(current: pd.Series) -> Comparison:
    return _verdict(
        current,
        Verdict.BASELINE,
        "none",
        "first week of this model line: it becomes the baseline",
    )


def _baseline_row(history: History, line: pd.DataFrame, model: str) -> pd.Series | None:
    pinned = history.baseline_week(model)
    if pinned is None:
        return line.iloc[0]  # the first recorded week
    rows = line[line["week"] == pinned]
    return None if rows.empty else rows.iloc[-1]


def gate_candidate(
    history: History,
    candidate: pd.Series,
    policy: GatePolicy,
    *,
    evalsets_dir: str | None = None,
) -> GateReport:
    """Gate a candidate against its model's latest production result and its baseline.

    Both comparisons gate, so the worse verdict decides: once a degraded model is in
    production, a candidate as bad still fails against the baseline.
    """
    frame = history.evaluations(
        model=candidate["model"], evalset=candidate["evalset"], kind="scheduled"
    )
    production = frame[(frame["status"] == "ok") & (frame["stage"] == "production")]
    if production.empty:
        marker = replace(_baseline_marker(candidate), reason="no production result to compare with")
        return GateReport(candidate["week"], [marker])
    names, num_classes = _spec_for(candidate, evalsets_dir)
    reference = production.iloc[-1]
    comparisons = compare(history, candidate, reference, "production", policy, names, num_classes)
    baseline = _baseline_row(history, production, str(candidate["model"]))
    if baseline is not None and baseline["evaluation_id"] != reference["evaluation_id"]:
        comparisons += compare(history, candidate, baseline, "baseline", policy, names, num_classes)
    return GateReport(candidate["week"], comparisons)
