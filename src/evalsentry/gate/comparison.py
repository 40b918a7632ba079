"""One paired comparison of two evaluations' per-example columns: measure, then decide.

:func:`measure` is pure arithmetic on aligned columns: per metric and unit (overall, or one
slice), both values, the drop, two tests of it (against the tolerance, and against no change:
the exact margin test of :mod:`evalsentry.gate.margin` and exact McNemar for count metrics, paired
sign flips for the others, all on one set of shared swaps), the upper confidence bound of the
drop, and the flips. When both sides carry clusters (:mod:`evalsentry.gate.clusters`) the swaps
swap whole clusters and count metrics take the cluster-robust t test instead of exact ones. :func:`decide` applies the family correction (a primary-first
Westfall-Young family over the gating units, Benjamini-Hochberg over the report-only ones) and
gives each its verdict:

- FAIL when the drop is significantly beyond the tolerance (``H0: drop <= tolerance`` rejected
  after the family correction; beyond it exactly, in examples, for counts);
- PASS when the drop's upper bound is within the tolerance (non-inferiority shown); WARN when
  that holds but the drop is also significantly above zero;
- INCONCLUSIVE otherwise, of one of two kinds: *possible regression* when the observed drop is
  beyond the tolerance (but not significantly), *unresolved* when it is within the tolerance
  but the evalset cannot show the bound within it. Either says the drop this evalset detects.

Non-inferiority needs no multiplicity correction: a comparison passes only if every one of its
tests shows it (an intersection-union test), so each bound is at the plain ``1 - alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from statistics import NormalDist
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from evalsentry.gate.clusters import Clusters, clustered_t, paired_clusters, t_sf
from evalsentry.gate.margin import DEFAULT_POWER, detectable_drop, margin_p
from evalsentry.gate.metric_base import Metric
from evalsentry.gate.metrics import get_metric
from evalsentry.gate.multiplicity import benjamini_hochberg, effective_levels, family_adjusted
from evalsentry.gate.resampling import (
    Columns,
    permutation_p_value,
    permutation_p_values,
    swap_values,
)
from evalsentry.gate.slices import OVERALL
from evalsentry.gate.stats import (
    PairedMethod,
    beyond,
    drop_upper_bound,
    flips,
    mcnemar_p,
    within_tolerance,
)
from evalsentry.gate.verdicts import InconclusiveKind, Verdict
from evalsentry.sections import GatePolicy, Tolerance

FloatArray = NDArray[np.float64]
Family = Literal["gate", "report"]
#: Regression examples count as worse (better) when their absolute error grows (shrinks) by more
#: than this share of the targets' standard deviation, unless ``gate.regression_delta`` says.
DEFAULT_DELTA_SHARE = 0.05
#: Two drops this close (relative) are equal: a drop equal to the tolerance is within it.
_TIE = 1e-9
_SEED = 0


@dataclass(frozen=True)
class Unit:
    """The examples one set of tests looks at: all of them, or one slice."""

    name: str  # "" overall, else "column=value"
    mask: NDArray[np.bool_] | None
    family: Family


@dataclass(frozen=True)
class Measurement:
    """One metric on one unit of a paired comparison, measured but not yet judged."""

    metric: str
    slice: str
    family: Family
    n: int
    reference_value: float
    value: float
    drop: float
    tolerance: float
    beyond: bool
    within: bool
    bound: float
    #: One-sided p-value of ``H0: drop <= tolerance``: what a FAIL needs.
    p_value: float
    method: PairedMethod
    #: One-sided p-value of ``H0: drop <= 0``: what a WARN (a real drop within tolerance) needs.
    p_zero: float = 1.0
    newly_wrong: int | None = None
    newly_right: int | None = None
    flip_delta: float | None = None
    #: Count metrics: the tolerance in examples, exactly.
    allowed: Fraction | None = None
    null_p: FloatArray = field(default_factory=lambda: np.ones(0), repr=False, compare=False)
    null_drop: FloatArray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    #: How the examples were clustered (``clustered by passage: 40 clusters``); empty if not.
    clustered: str = ""


@dataclass(frozen=True)
class Decision:
    """The verdict on one measurement, with the numbers behind it."""

    verdict: Verdict
    reason: str
    p_adjusted: float
    detectable: float | None
    kind: InconclusiveKind | None = None


def allowed_examples(tolerance: Tolerance, reference_count: int, n: int) -> Fraction:
    """A count metric's tolerance in examples, exactly.

    An absolute tolerance ``t`` allows ``t * n`` examples (the decimal as written: 0.02 is
    exactly 2/100); a relative one, ``"5%"``, allows 5/100 of the reference's count of correct
    examples, that is 5% of the reference value.
    """
    text = str(tolerance.max_drop).strip()
    if text.endswith("%"):
        return Fraction(text[:-1].strip()) / 100 * reference_count
    return Fraction(text) * n


def _orient(metric: Metric, reference: FloatArray, current: FloatArray) -> FloatArray:
    drop = reference - current if metric.higher_is_better else current - reference
    return np.asarray(drop, np.float64)


def _pick(columns: Columns, mask: NDArray[np.bool_] | None) -> Columns:
    return columns if mask is None else {k: np.asarray(v)[mask] for k, v in columns.items()}


def _regression_delta(policy: GatePolicy, ref_columns: Columns) -> float:
    if policy.regression_delta is not None:
        return policy.regression_delta
    return DEFAULT_DELTA_SHARE * float(np.std(np.asarray(ref_columns["target"], np.float64)))


def _flip_counts(
    metric: Metric, ref: Columns, cur: Columns, delta: float
) -> tuple[int | None, int | None, float | None]:
    """Examples newly wrong and newly right (regression: worse and better by more than delta)."""
    if metric.task == "regression":
        ref_error = np.abs(np.asarray(ref["prediction"], float) - np.asarray(ref["target"], float))
        cur_error = np.abs(np.asarray(cur["prediction"], float) - np.asarray(cur["target"], float))
        grew = cur_error - ref_error
        return int(np.count_nonzero(grew > delta)), int(np.count_nonzero(-grew > delta)), delta
    if all("prediction" in c and "target" in c for c in (ref, cur)):
        wrong, right = flips(
            np.asarray(ref["prediction"]) == np.asarray(ref["target"]),
            np.asarray(cur["prediction"]) == np.asarray(cur["target"]),
        )
        return wrong, right, None
    return None, None, None


def _count_measurement(
    metric: Metric,
    unit: Unit,
    ref: Columns,
    cur: Columns,
    values: tuple[FloatArray, FloatArray],
    policy: GatePolicy,
) -> Measurement:
    """A count metric (accuracy-type): exact counts, exact tolerance, exact tests.

    The exact margin test decides FAIL; exact McNemar (no change) decides WARN and, on each
    swap, gives the null p-values the family correction reads.
    """
    ref_ok, cur_ok = metric.correct(ref), metric.correct(cur)
    assert ref_ok is not None and cur_ok is not None  # noqa: S101 - count metrics define correct()
    n = int(ref_ok.size)
    wrong, right = flips(ref_ok, cur_ok)
    allowed = allowed_examples(policy.tolerance(metric.name), int(ref_ok.sum()), n)
    null_drop = _orient(metric, *values)[1:]
    # Each swap keeps the discordant examples; its newly wrong count follows from its drop.
    null_wrong = np.rint((wrong + right + np.rint(null_drop * n)) / 2)
    margin = float(allowed / n)
    return Measurement(
        metric=metric.name,
        slice=unit.name,
        family=unit.family,
        n=n,
        reference_value=int(ref_ok.sum()) / n,
        value=int(cur_ok.sum()) / n,
        drop=(wrong - right) / n,
        tolerance=margin,
        beyond=beyond(wrong, right, allowed),
        within=within_tolerance(wrong, right, n, margin, policy.alpha),
        bound=drop_upper_bound(wrong, right, n, policy.alpha),
        p_value=margin_p(wrong, right, n, allowed),
        method="exact-margin",
        p_zero=float(mcnemar_p(wrong, wrong + right)),
        newly_wrong=wrong,
        newly_right=right,
        allowed=allowed,
        null_p=mcnemar_p(null_wrong, wrong + right),
        null_drop=null_drop,
    )


def _clustered_count_measurement(
    metric: Metric,
    unit: Unit,
    ref: Columns,
    cur: Columns,
    values: tuple[FloatArray, FloatArray],
    policy: GatePolicy,
    clusters: Clusters,
) -> Measurement:
    """A count metric on clustered examples: the cluster-robust t test, never called exact.

    Its p-values and bound are each the more cautious of the clustered t test (``clusters - 1``
    degrees of freedom) and the unclustered exact one: clustering only ever takes confidence
    away, and a cluster-robust standard error of zero (no flips) says nothing. The swaps' null
    p-values (for the family correction) use the same t, on the flip-invariant uncentred error.
    """
    exact = _count_measurement(metric, unit, ref, cur, values, policy)
    ref_ok, cur_ok = metric.correct(ref), metric.correct(cur)
    assert ref_ok is not None and cur_ok is not None  # noqa: S101 - count metrics define correct()
    differences = _orient(metric, ref_ok.astype(np.float64), cur_ok.astype(np.float64))
    test = clustered_t(differences, clusters, exact.tolerance, policy.alpha)
    totals = np.bincount(clusters.index, weights=differences)
    null_se = float(np.sqrt(np.sum(totals**2))) / max(exact.n, 1)
    null_t = exact.null_drop / null_se if null_se > 0 else np.zeros_like(exact.null_drop)
    null_p = t_sf(null_t, test.df) if test.df >= 1 else np.ones_like(exact.null_drop)
    bound = max(test.bound, exact.bound)
    return replace(
        exact,
        within=bound <= exact.tolerance or math.isclose(bound, exact.tolerance, rel_tol=_TIE),
        bound=bound,
        p_value=max(test.p_margin, exact.p_value),
        method="clustered-t",
        p_zero=max(test.p_zero, exact.p_zero),
        null_p=np.maximum(null_p, exact.null_p),
        clustered=clusters.label,
    )


def _swapped_measurement(
    metric: Metric,
    unit: Unit,
    ref: Columns,
    cur: Columns,
    values: tuple[FloatArray, FloatArray],
    policy: GatePolicy,
    delta: float,
    clusters: Clusters | None = None,
) -> Measurement:
    """Any other metric: paired sign-flip tests, and the bound from their null spread.

    The swaps' drops are the drop's null spread around no change; shifted to the tolerance they
    are its spread around the tolerance (a shift model), so the test of the margin compares the
    observed drop minus the tolerance with them, as PASS compares the drop plus their
    ``1 - alpha`` quantile with the tolerance. With ``clusters`` the swaps swapped whole clusters.
    """
    drops = _orient(metric, *values)
    observed, null_drop = float(drops[0]), drops[1:]
    p_zero, null_p = permutation_p_values(null_drop, observed)
    reference_value = float(values[0][0])
    tolerance = policy.tolerance(metric.name).allowed_drop(reference_value)
    spread = float(np.nanquantile(null_drop, 1 - policy.alpha)) if null_drop.size else 0.0
    bound = observed + spread if np.isfinite(spread) else math.inf
    tied = math.isclose(observed, tolerance, rel_tol=_TIE, abs_tol=_TIE * 1e-3)
    wrong, right, flip_delta = _flip_counts(metric, ref, cur, delta)
    return Measurement(
        metric=metric.name,
        slice=unit.name,
        family=unit.family,
        n=int(np.asarray(next(iter(ref.values()))).size),
        reference_value=reference_value,
        value=float(values[1][0]),
        drop=observed,
        tolerance=tolerance,
        beyond=observed > tolerance and not tied,
        within=bound <= tolerance or math.isclose(bound, tolerance, rel_tol=_TIE),
        bound=bound,
        p_value=permutation_p_value(null_drop, observed - tolerance),
        method="sign-flip" if clusters is None else "cluster-sign-flip",
        p_zero=p_zero,
        newly_wrong=wrong,
        newly_right=right,
        flip_delta=flip_delta,
        null_p=null_p,
        null_drop=null_drop,
        clustered=clusters.label if clusters is not None else "",
    )


def measure(
    ref_columns: Columns,
    cur_columns: Columns,
    names: Sequence[str],
    units: Sequence[Unit],
    policy: GatePolicy,
    num_classes: int | None,
) -> list[Measurement]:
    """Measure every metric on every unit of one paired comparison, on shared sign flips.

    When both sides carry the same ``cluster`` column, every test is clustered (see
    :mod:`evalsentry.gate.clusters`).

    Args:
        ref_columns: The reference's per-example columns, aligned with the current's.
        cur_columns: The current's per-example columns.
        names: The metrics.
        units: The examples to look at: overall and each slice, with the family each joins.
        policy: Tolerances, alpha, number of swaps, regression delta.
        num_classes: Number of classes for classification metrics, else ``None``.

    Returns:
        One measurement per metric and unit, metric by metric, units in the order given.

    """
    metrics = [get_metric(name) for name in names]
    clusters = paired_clusters(ref_columns, cur_columns)
    swapped = swap_values(
        metrics,
        ref_columns,
        cur_columns,
        num_classes=num_classes,
        masks=[unit.mask for unit in units],
        n_swaps=policy.bootstrap_resamples,
        seed=_SEED,
        clusters=clusters.index if clusters is not None else None,
    )
    delta = (
        _regression_delta(policy, ref_columns)
        if any(m.task == "regression" for m in metrics)
        else 0.0
    )
    picked = [(_pick(ref_columns, unit.mask), _pick(cur_columns, unit.mask)) for unit in units]
    out = []
    for i, metric in enumerate(metrics):
        for unit, values, (ref, cur) in zip(units, swapped, picked, strict=True):
            pair = (values.reference[:, i], values.current[:, i])
            grouped = clusters.within(unit.mask) if clusters is not None else None
            if metric.paired_test != "mcnemar" or metric.correct_fn is None:
                m = _swapped_measurement(metric, unit, ref, cur, pair, policy, delta, grouped)
            elif grouped is not None:
                m = _clustered_count_measurement(metric, unit, ref, cur, pair, policy, grouped)
            else:
                m = _count_measurement(metric, unit, ref, cur, pair, policy)
            out.append(m)
    return out


def _primary(measured: Sequence[Measurement], policy: GatePolicy) -> int | None:
    """The primary test of the gating family: the configured metric overall, else the first."""
    overall = [i for i, m in enumerate(measured) if m.slice == OVERALL]
    named = [i for i in overall if measured[i].metric == policy.primary]
    chosen = named or overall
    return chosen[0] if chosen else None


def detectable_of(m: Measurement, level: float) -> float | None:
    """The true drop this test FAILs with 80% probability at ``level``, always above tolerance.

    Count metrics: exact (:func:`evalsentry.gate.margin.detectable_drop`, from n, the observed churn,
    the tolerance in examples and the level). Others: the normal approximation
    ``tolerance + critical drop + z_0.8 * sd`` from the swaps' spread of the drop. None when no
    drop the evalset can hold is detected that often, or the swaps show no spread.
    """
    if not 0.0 < level < 1.0:
        return None
    if m.allowed is not None and m.newly_right is not None and not m.clustered:
        return detectable_drop(m.n, m.newly_right, m.allowed, level, largest=m.reference_value)
    null = m.null_drop[np.isfinite(m.null_drop)]
    spread = float(np.std(null)) if null.size else 0.0
    if spread == 0.0:
        return None
    critical = float(np.quantile(null, 1 - level))
    return m.tolerance + critical + NormalDist().inv_cdf(DEFAULT_POWER) * spread


def _amount(m: Measurement, value: float, *, signed: bool = False) -> str:
    """A drop, change or tolerance in the metric's units: points for a count metric."""
    if m.allowed is not None:
        return f"{value * 100:{'+' if signed else ''}.1f} pts"
    return f"{value:{'+' if signed else ''}.3g}"


def _inconclusive(m: Measurement, p_adjusted: float, alpha: float) -> tuple[InconclusiveKind, str]:
    """Which kind of INCONCLUSIVE, and its words.

    A drop beyond the tolerance that is not significantly beyond it is a possible regression;
    anything else (a drop within the tolerance whose bound is not) is unresolved: the evalset
    cannot tell the tolerance apart from no change, which says nothing against the model.
    """
    if m.beyond:
        return "possible-regression", (
            f"possible regression (observed drop {_amount(m, m.drop)} beyond the tolerance "
            f"{_amount(m, m.tolerance)}, not significant: p={p_adjusted:.2g})"
        )
    change = m.value - m.reference_value
    return "unresolved", (
        f"cannot resolve ±{_amount(m, m.tolerance)} on {m.n} examples (observed change "
        f"{_amount(m, change, signed=True)}; the drop may be up to {_amount(m, m.bound)}, "
        f"{1 - alpha:.0%} bound)"
    )


def _judge(
    m: Measurement, p_adjusted: float, p_zero: float, level: float, alpha: float, explain: bool
) -> Decision:
    if m.beyond and p_adjusted < alpha:
        return Decision(Verdict.FAIL, "drop significantly beyond tolerance", p_adjusted, None)
    if m.within:
        if m.drop > 0 and p_zero < alpha:
            return Decision(Verdict.WARN, "significant drop within tolerance", p_adjusted, None)
        return Decision(Verdict.PASS, "", p_adjusted, None)
    kind, why = _inconclusive(m, p_adjusted, alpha)
    if not explain:
        return Decision(Verdict.INCONCLUSIVE, why, p_adjusted, None, kind)
    detectable = detectable_of(m, level)
    can = (
        f"this evalset detects drops of about {detectable:.3f} or more"
        if detectable is not None
        else "this evalset is too small to detect a drop of this metric reliably"
    )
    return Decision(Verdict.INCONCLUSIVE, f"{why}; {can}", p_adjusted, detectable, kind)


def _adjusted(
    measured: Sequence[Measurement], p_values: Sequence[float], policy: GatePolicy
) -> tuple[list[float], list[float]]:
    """Each test's family-adjusted p-value, and the level it meets on its own in its family."""
    adjusted: list[float] = [1.0] * len(measured)
    levels: list[float] = [policy.alpha] * len(measured)
    gate = [i for i, m in enumerate(measured) if m.family == "gate"]
    if gate:
        members = [measured[i] for i in gate]
        null_p = np.stack([m.null_p for m in members], axis=1)
        primary = _primary(members, policy)
        share = policy.secondary_share
        family = family_adjusted([p_values[i] for i in gate], null_p, primary=primary, share=share)
        level = effective_levels(null_p, primary=primary, share=share, alpha=policy.alpha)
        for position, i in enumerate(gate):
            adjusted[i], levels[i] = family[position], level[position]
    report = [i for i, m in enumerate(measured) if m.family == "report"]
    for i, q in zip(report, benjamini_hochberg([p_values[i] for i in report]), strict=True):
        adjusted[i], levels[i] = q, policy.alpha / len(report)
    return adjusted, levels


def decide(
    measured: Sequence[Measurement], policy: GatePolicy, *, explain: bool = True
) -> list[Decision]:
    """Correct each family of one comparison and judge every measurement.

    The gating family is corrected together (primary-first Westfall-Young on the shared swaps,
    see :mod:`evalsentry.gate.multiplicity`); the report-only family with Benjamini-Hochberg. Both
    tests are corrected so: the margin tests (FAIL) and the tests against no change (WARN).
    Their joint null is the same, read from the swaps: shifted to the tolerance, the drops
    spread as they do around no change.

    Args:
        measured: The measurements of one comparison.
        policy: Alpha, the primary metric, the secondaries' share.
        explain: Whether an INCONCLUSIVE states the drop this evalset detects, the costliest
            part of a decision; a simulation of the verdicts alone may leave it out.

    Returns:
        One decision per measurement, in the order given.

    """
    adjusted, levels = _adjusted(measured, [m.p_value for m in measured], policy)
    zero, _ = _adjusted(measured, [m.p_zero for m in measured], policy)
    return [
        _clustered_reason(m, _judge(m, p, p0, level, policy.alpha, explain))
        for m, p, p0, level in zip(measured, adjusted, zero, levels, strict=True)
    ]


def _clustered_reason(m: Measurement, decision: Decision) -> Decision:
    """A clustered measurement's decision says so: ``clustered by passage: 40 clusters``."""
    if not m.clustered:
        return decision
    reason = f"{decision.reason}; {m.clustered}" if decision.reason else m.clustered
    return replace(decision, reason=reason)
