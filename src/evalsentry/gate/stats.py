"""Paired tests on counts: exact McNemar and the non-inferiority bound.

The regression gate evaluates the reference and the current checkpoint on the same frozen
examples, so every test here is *paired*: only the discordant examples (newly wrong ``b``,
newly right ``c``) carry information. All tests are one-sided, for "the current model is worse".
Drops and tolerances of count metrics are compared in exact arithmetic (:func:`beyond`), so a
drop equal to the tolerance is within it. The test of a drop against the tolerance itself, what
a FAIL needs, is :mod:`evalsentry.gate.margin`; McNemar here tests against no change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evalsentry.gate.binomial import binomial_tails
from evalsentry.gate.margin import tango_z

#: How a comparison's drop was tested: the exact margin test of a count metric
#: (:mod:`evalsentry.gate.margin`), paired sign flips of any other; ``mcnemar-exact`` is the test of
#: no change, and what the history's count comparisons recorded before the margin test. On
#: clustered examples (:mod:`evalsentry.gate.clusters`): ``clustered-t`` for a count metric (not
#: exact), ``cluster-sign-flip`` (whole clusters swapped) for any other.
PairedMethod = Literal[
    "exact-margin", "mcnemar-exact", "sign-flip", "clustered-t", "cluster-sign-flip"
]

# Under H0 a discordant example is equally likely to flip either way.
_NULL_FLIP_PROBABILITY = 0.5
# Bisection steps for bounds in [0, 1]: 2**-60 is far below any reported digit.
_BISECTION_STEPS = 60


@dataclass(frozen=True)
class PairedResult:
    """Outcome of a one-sided paired test of "current is worse than reference".

    Attributes:
        p_value: One-sided p-value; small means the drop is unlikely to be noise.
        newly_wrong: Examples the reference got right and the current got wrong (b).
        newly_right: Examples the reference got wrong and the current got right (c).
        n: Number of paired examples.
        method: ``"mcnemar-exact"``.

    """

    p_value: float
    newly_wrong: int
    newly_right: int
    n: int
    method: PairedMethod


def _as_bool_vector(values: ArrayLike, name: str) -> NDArray[np.bool_]:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.dtype != np.bool_ and not np.isin(array, (0, 1)).all():
        raise ValueError(f"{name} must hold only 0/1 values")
    return array.astype(np.bool_)


def flip_masks(
    ref_correct: ArrayLike, cur_correct: ArrayLike
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Masks of the examples only the reference got right (newly wrong), and only the current."""
    ref = _as_bool_vector(ref_correct, "ref_correct")
    cur = _as_bool_vector(cur_correct, "cur_correct")
    if ref.shape != cur.shape:
        raise ValueError(f"Paired arrays differ in length: {ref.size} vs {cur.size}")
    return ref & ~cur, ~ref & cur


def flips(ref_correct: ArrayLike, cur_correct: ArrayLike) -> tuple[int, int]:
    """``(newly_wrong, newly_right)``: examples only the reference, or only the current, got right."""
    wrong, right = flip_masks(ref_correct, cur_correct)
    return int(np.count_nonzero(wrong)), int(np.count_nonzero(right))


def mcnemar_p(newly_wrong: ArrayLike, discordant: ArrayLike) -> NDArray[np.float64]:
    """Exact one-sided McNemar p-values ``P(X >= b)``, ``X ~ Binomial(b + c, 1/2)``; 1 where b = 0."""
    b = np.rint(np.asarray(newly_wrong, np.float64)).astype(np.int64)
    m = np.rint(np.asarray(discordant, np.float64)).astype(np.int64)
    p = np.where(b > 0, binomial_tails(np.maximum(b - 1, 0), m, _NULL_FLIP_PROBABILITY)[1], 1.0)
    return np.asarray(np.minimum(p, 1.0), np.float64)


def mcnemar_drop_pvalue(ref_correct: ArrayLike, cur_correct: ArrayLike) -> PairedResult:
    """Exact one-sided McNemar test that the current model is less often correct.

    Only discordant examples carry information: with b newly-wrong and c
    newly-right examples, under H0 each of the b + c flips is equally likely
    either way, so p = P(X >= b) for X ~ Binomial(b + c, 1/2).

    Args:
        ref_correct: Per-example 0/1 correctness of the reference model.
        cur_correct: Per-example 0/1 correctness of the current model, same examples.

    Returns:
        The test result; ``p_value`` is 1.0 when no example changed.

    Raises:
        ValueError: If the arrays are not equally long 0/1 vectors.

    """
    newly_wrong, newly_right = flips(ref_correct, cur_correct)
    p_value = float(mcnemar_p(newly_wrong, newly_wrong + newly_right))
    n = int(np.asarray(ref_correct).size)
    return PairedResult(p_value, newly_wrong, newly_right, n, "mcnemar-exact")


def beyond(newly_wrong: int, newly_right: int, allowed: Fraction) -> bool:
    """Whether a count drop exceeds the tolerance, exactly: ``b - c > allowed``.

    ``allowed`` is the tolerance in examples (tolerance times n, or a relative tolerance times
    the reference's count of correct examples), an exact fraction; equal is within.
    """
    return newly_wrong - newly_right > allowed


def _tango_z(newly_wrong: int, newly_right: int, n: int, margin: float) -> float:
    """Tango's score statistic for the paired difference ``p_b - p_c`` at ``margin`` (one value)."""
    return float(tango_z(newly_wrong, newly_right, n, margin))


def within_tolerance(
    newly_wrong: int, newly_right: int, n: int, margin: float, alpha: float
) -> bool:
    """Non-inferiority: whether the drop is shown to be at most ``margin`` at level ``alpha``.

    Tango's score test of ``H0: drop >= margin``; true when the one-sided upper ``1 - alpha``
    confidence bound of the drop (:func:`drop_upper_bound`) is at most ``margin``.
    """
    if margin >= 1.0:
        return True
    z = NormalDist().inv_cdf(1.0 - alpha)
    return _tango_z(newly_wrong, newly_right, n, margin) <= -z


def drop_upper_bound(newly_wrong: int, newly_right: int, n: int, alpha: float) -> float:
    """The one-sided upper ``1 - alpha`` confidence bound of a paired accuracy drop (Tango score).

    With no example changed it is about ``z**2 / n`` (2.7 / n at alpha 0.05), not 0: a small
    evalset that saw no flip still cannot rule out a drop of that size.

    Args:
        newly_wrong: Examples only the reference got right (b).
        newly_right: Examples only the current got right (c).
        n: Paired examples.
        alpha: One-sided error rate of the bound.

    Returns:
        The bound, in accuracy units, in ``[(b - c) / n, 1]``.

    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    z = NormalDist().inv_cdf(1.0 - alpha)
    low, high = (newly_wrong - newly_right) / n, 1.0
    if _tango_z(newly_wrong, newly_right, n, high) > -z:
        return high
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if _tango_z(newly_wrong, newly_right, n, middle) > -z:
            low = middle
        else:
            high = middle
    return high


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    The i-th smallest of m p-values is multiplied by ``m - i + 1`` (i from 1),
    a running maximum keeps the adjusted values monotone in the raw ones, and
    they are capped at 1. NaN entries (e.g. tests that could not run) are
    returned untouched and do not count towards m.

    Args:
        p_values: Raw p-values in [0, 1], or NaN.

    Returns:
        Adjusted p-values; rejecting those <= alpha controls the family-wise error rate.

    Raises:
        ValueError: If a p-value lies outside [0, 1].

    """
    raw = np.asarray(p_values, dtype=np.float64).ravel()
    valid = ~np.isnan(raw)
    tested = raw[valid]
    if ((tested < 0.0) | (tested > 1.0)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {p_values}")
    order = np.argsort(tested, kind="stable")
    multipliers = tested.size - np.arange(tested.size)
    adjusted = np.empty_like(tested)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(multipliers * tested[order]))
    result = raw.copy()
    result[valid] = adjusted
    return [float(value) for value in result]
