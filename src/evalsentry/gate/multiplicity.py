"""Family corrections over the tests of one comparison, on their joint null distribution.

The gating tests of one comparison (one checkpoint against one reference: its metrics, and its
slices when slices gate) form one family; its family-wise rate of false FAILs is held at alpha.
Their p-values are strongly correlated (one model, one evalset), so instead of Holm's
worst-case bound the correction reads their joint distribution from the shared sign flips of
:mod:`evalsentry.gate.resampling` (Westfall and Young, 1993).

A declared primary metric (accuracy by default) keeps nearly all of alpha: the other gating
tests may spend ``share`` of alpha on their own, and the primary's level gives back whatever
of that share falls where the primary would have rejected anyway (with correlated metrics,
nearly all of it). Once the primary has failed, the others are tested at the full alpha.
Formally a closed test whose local tests are level alpha by construction; the step-down below
is its shortcut. Report-only tests form their own family, Benjamini-Hochberg corrected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order.

    The i-th smallest of m p-values is multiplied by ``m / i``, a running minimum from the
    largest down keeps them monotone, and they are capped at 1. Rejecting those below alpha
    controls the false discovery rate of the family at alpha.
    """
    raw = np.asarray(p_values, dtype=np.float64)
    if raw.size == 0:
        return []
    order = np.argsort(raw, kind="stable")
    ranked = raw[order] * raw.size / np.arange(1, raw.size + 1)
    adjusted = np.empty_like(raw)
    adjusted[order] = np.minimum(1.0, np.minimum.accumulate(ranked[::-1])[::-1])
    return [float(v) for v in adjusted]


def _share_at_most(null: FloatArray, threshold: float) -> float:
    """The null probability of a value at most ``threshold``, the observed data counted in."""
    return (1 + int(np.count_nonzero(null <= threshold))) / (null.size + 1)


def _westfall_young(
    p: FloatArray, null_p: FloatArray, members: list[int], running: float
) -> dict[int, float]:
    """Step-down minP adjusted p-values of ``members`` (at least ``running``)."""
    adjusted = {}
    remaining = sorted(members, key=lambda j: (p[j], j))
    while remaining:
        j = remaining[0]
        floor = null_p[:, remaining].min(axis=1)
        running = max(running, p[j], _share_at_most(floor, p[j]))
        adjusted[j] = min(1.0, running)
        remaining = remaining[1:]
    return adjusted


def _primary_level(
    p_primary: float, null_primary: FloatArray, floor: FloatArray, share: float
) -> float:
    """The smallest alpha at which the primary test rejects inside the family.

    At level alpha the other tests reject on their own when their smallest p-value is at most
    ``e(alpha)``, the largest threshold crossed by at most ``share * alpha`` of the null; the
    primary rejects when ``p_primary + P(others reject, primary would not) <= alpha``.
    """
    size = floor.size
    if share <= 0.0 or size == 0:
        return p_primary
    order = np.argsort(floor, kind="stable")
    ranked = floor[order]
    exclusive = np.cumsum(null_primary[order] > p_primary)
    # Cuts between distinct values only: ties fall on the same side of any threshold.
    cuts = np.r_[0, np.flatnonzero(np.r_[ranked[1:] != ranked[:-1], True]) + 1]
    starts = cuts / ((size + 1) * share)
    levels = p_primary + np.r_[0, exclusive][cuts] / (size + 1)
    candidate = np.maximum(starts, levels)
    ends = np.r_[starts[1:], np.inf]
    fits = np.flatnonzero(candidate < ends)
    return float(candidate[fits[0]]) if fits.size else 1.0


def family_adjusted(
    p: Sequence[float], null_p: FloatArray, *, primary: int | None, share: float
) -> list[float]:
    """Family-adjusted p-values of one comparison's gating tests (reject those below alpha).

    Args:
        p: The observed p-values, one per test.
        null_p: Each test's p-value under each null resample, shape ``(R, k)``: the joint null
            distribution (shared sign flips; exact for the count tests).
        primary: Index of the primary test, or None for a plain Westfall-Young minP family.
        share: Share of alpha the other tests may spend before the primary rejects, in [0, 1).

    Returns:
        Adjusted p-values, in the input order, never below the raw ones.

    """
    observed = np.asarray(p, dtype=np.float64)
    k = observed.size
    if k == 0:
        return []
    if primary is None:
        members = list(range(k))
        return [_westfall_young(observed, null_p, members, 0.0)[j] for j in range(k)]
    others = [j for j in range(k) if j != primary]
    floor = null_p[:, others].min(axis=1) if others else np.ones(null_p.shape[0])
    through_primary = _primary_level(observed[primary], null_p[:, primary], floor, share)
    adjusted: dict[int, float] = {}
    running = 0.0
    remaining = sorted(others, key=lambda j: (observed[j], j))
    while primary not in adjusted:
        through_other = (
            _share_at_most(floor, observed[remaining[0]]) / share
            if remaining and share > 0
            else np.inf
        )
        if through_primary <= through_other:
            running = max(running, through_primary)
            adjusted[primary] = min(1.0, running)
        else:
            running = max(running, observed[remaining[0]], through_other)
            adjusted[remaining[0]] = min(1.0, running)
            remaining = remaining[1:]
    adjusted.update(_westfall_young(observed, null_p, remaining, running))
    return [adjusted[j] for j in range(k)]


def effective_levels(
    null_p: FloatArray, *, primary: int | None, share: float, alpha: float
) -> list[float]:
    """The p-value each test must get below to reject on its own, before any other has.

    What the family's adjustment costs a test, for sizing the drops it can detect: the primary
    meets nearly alpha, the others (together) ``share * alpha`` spread by their correlation; in
    a plain family every test meets the alpha-quantile of the null's smallest p-value.
    """
    size, k = null_p.shape
    others = [j for j in range(k) if j != primary]
    floor = null_p[:, others].min(axis=1) if others else np.ones(size)
    budget = alpha if primary is None else share * alpha
    # Rejecting below t costs (1 + #{null floor < t}) / (R + 1) of the budget.
    crossable = int(np.floor(budget * (size + 1))) - 1
    ranked = np.sort(floor)
    threshold = 1.0 if crossable >= size else float(ranked[crossable]) if crossable >= 0 else 0.0
    levels = [threshold] * k
    if primary is not None:
        crossing = floor < threshold
        lost = np.count_nonzero(crossing & (null_p[:, primary] >= alpha)) / (size + 1)
        levels[primary] = alpha - lost
    return levels
