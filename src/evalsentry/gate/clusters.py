"""Clustered statistics: when examples come in groups, the cluster is the unit of evidence.

Examples that share a passage (or a prompt template, a document) are not independent: a model
that misreads the passage gets all its questions wrong together. Tests and intervals that treat
them as independent are too narrow. Following Miller (2024, "Adding Error Bars to Evals"), a
comparison whose two sides both carry a ``cluster`` column (``evalsentry import ... --cluster``)
is tested on clusters:

- the paired sign flips (:mod:`evalsentry.gate.resampling`) swap whole clusters;
- a count metric's drop gets the cluster-robust standard error
  ``sqrt(sum_c (sum_{i in c} (d_i - mean d))**2) / n`` of its per-example differences ``d``
  and Student's t with ``clusters - 1`` degrees of freedom (:func:`clustered_t`); its upper
  bound, which a PASS needs within the tolerance, is the score-type bound (:func:`score_bound`):
  the largest drop that test does not reject with the spread measured around that drop itself,
  and the small-sample factor ``clusters / (clusters - 1)``. Around the observed drop (a Wald
  bound) a true drop at the tolerance PASSed in 6-7% of weeks at alpha 0.05 with 20-100
  clusters of intra-cluster correlated examples; the score bound keeps it at 4.3-5.7%;
- per-example metric intervals resample whole clusters (:func:`cluster_intervals`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evalsentry.gate.metric_base import MetricValue
from evalsentry.gate.metrics import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    bootstrap_metric_values,
    get_metric,
)

#: The per-example column naming each example's cluster, and the one naming the key it came from.
CLUSTER_COLUMN = "cluster"
CLUSTER_KEY_COLUMN = "cluster_key"

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
Columns = Mapping[str, NDArray[Any]]


@dataclass(frozen=True)
class Clusters:
    """Which cluster each paired example belongs to.

    Attributes:
        index: Per example, its cluster as an integer in ``[0, count)``.
        count: Number of clusters.
        key: The field the clusters came from (``passage``), when recorded.

    """

    index: IntArray
    count: int
    key: str | None = None

    def within(self, mask: NDArray[np.bool_] | None) -> Clusters:
        """The clusters of the examples ``mask`` selects, renumbered."""
        if mask is None:
            return self
        _, index = np.unique(self.index[np.asarray(mask, bool)], return_inverse=True)
        return Clusters(index.ravel().astype(np.intp), int(index.max(initial=-1)) + 1, self.key)

    @property
    def label(self) -> str:
        """What the evidence says: ``clustered by passage: 40 clusters``."""
        by = f" by {self.key}" if self.key else ""
        return f"clustered{by}: {self.count} cluster{'s' if self.count != 1 else ''}"


def paired_clusters(ref_columns: Columns, cur_columns: Columns) -> Clusters | None:
    """The clusters of a paired comparison: both sides must carry the same grouping.

    None when either side has no ``cluster`` column (then every example is its own cluster),
    or when the two group the examples differently (then no grouping is known to hold).
    """
    if CLUSTER_COLUMN not in ref_columns or CLUSTER_COLUMN not in cur_columns:
        return None
    ref = np.asarray(ref_columns[CLUSTER_COLUMN]).astype(str)
    cur = np.asarray(cur_columns[CLUSTER_COLUMN]).astype(str)
    if ref.shape != cur.shape or not np.array_equal(ref, cur) or not cur.size:
        return None
    _, index = np.unique(cur, return_inverse=True)
    keys = {str(v) for cols in (ref_columns, cur_columns) for v in cols.get(CLUSTER_KEY_COLUMN, [])}
    key = keys.pop() if len(keys) == 1 else None
    return Clusters(index.ravel().astype(np.intp), int(index.max()) + 1, key)


def cluster_mismatch(ref_columns: Columns, cur_columns: Columns) -> str | None:
    """Why two aligned sides cannot be tested as clustered, or None when their grouping agrees.

    A grouping on one side only, or two groupings, would leave the comparison unclustered,
    its intervals too narrow for grouped examples: refused instead, saying how to import them.
    """
    sides = [CLUSTER_COLUMN in ref_columns, CLUSTER_COLUMN in cur_columns]
    if not any(sides):
        return None
    if not all(sides):
        columns = ref_columns if sides[0] else cur_columns
        key = _key(columns)
        which = "the reference" if sides[0] else "this run"
        return (
            f"not comparable: only {which} is grouped into clusters (by {key}); import both "
            f"runs with --cluster {key}, or neither"
        )
    ref = np.asarray(ref_columns[CLUSTER_COLUMN]).astype(str)
    cur = np.asarray(cur_columns[CLUSTER_COLUMN]).astype(str)
    if ref.shape == cur.shape and np.array_equal(ref, cur):
        return None
    differ = int((ref != cur).sum()) if ref.shape == cur.shape else max(ref.size, cur.size)
    return (
        f"not comparable: the clusters differ ({differ} of {cur.size} examples grouped "
        f"otherwise: by {_key(ref_columns)}, then by {_key(cur_columns)}); import both runs "
        "with the same --cluster"
    )


def _key(columns: Columns) -> str:
    keys = sorted({str(v) for v in columns.get(CLUSTER_KEY_COLUMN, [])})
    return "/".join(keys) or "a field not recorded"


def clustered_se(differences: FloatArray, index: IntArray) -> float:
    """The cluster-robust standard error of the mean of per-example ``differences``.

    ``sqrt(sum_c (sum_{i in c} (d_i - mean d))**2) / n`` (Miller 2024, eq. 4 on differences);
    with every example its own cluster it is the plain ``sd / sqrt(n)`` (ddof 0).
    """
    d = np.asarray(differences, np.float64)
    if not d.size:
        return math.nan
    totals = np.bincount(index, weights=d - d.mean())
    return float(math.sqrt(float(np.sum(totals**2))) / d.size)


def t_sf(statistic: FloatArray | float, df: int) -> FloatArray:
    """Upper tail ``P(T >= statistic)`` of Student's t with ``df`` degrees of freedom."""
    from scipy import stats

    return np.asarray(stats.t.sf(statistic, df), np.float64)


def t_quantile(level: float, df: int) -> float:
    """The ``level`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(level, df))


@dataclass(frozen=True)
class ClusteredT:
    """A drop's clustered test: its standard error, degrees of freedom and one-sided p-values."""

    se: float
    df: int
    p_margin: float  # H0: drop <= margin
    p_zero: float  # H0: drop <= 0
    bound: float  # the one-sided upper (1 - alpha) confidence bound of the drop


def clustered_t(
    differences: FloatArray, clusters: Clusters, margin: float, alpha: float
) -> ClusteredT:
    """The cluster-robust t test of a paired drop, against ``margin`` and against zero.

    ``differences`` are per-example drops (positive: worse); the drop is their mean. With fewer
    than two clusters, or a standard error of zero, nothing is learnt from the spread: the
    p-values are 1 (0 where the drop is certainly beyond) and the bound is the drop itself
    (infinite with one cluster).
    """
    d = np.asarray(differences, np.float64)
    drop, df = float(d.mean()), clusters.count - 1
    se = clustered_se(d, clusters.index)
    if df < 1:
        return ClusteredT(se, df, 1.0, 1.0, math.inf)
    if se == 0.0:
        return ClusteredT(se, df, float(drop <= margin), float(drop <= 0), drop)
    p_margin = float(t_sf((drop - margin) / se, df))
    p_zero = float(t_sf(drop / se, df))
    return ClusteredT(se, df, p_margin, p_zero, score_bound(d, clusters, t_quantile(1 - alpha, df)))


def score_bound(differences: FloatArray, clusters: Clusters, t: float) -> float:
    """The upper bound of the mean drop: the largest ``delta`` with ``(delta - mean) / se <= t``.

    ``se`` is the cluster-robust standard error with each cluster's sum centred at ``delta``
    itself (the spread the data would have if ``delta`` were the drop), times
    ``clusters / (clusters - 1)``: a quadratic in ``delta``. Binary differences have less spread
    where the observed drop is small, so a bound from the spread around the observed drop is too
    low exactly when a PASS is at stake. Infinite where so few clusters cannot bound it.
    """
    d = np.asarray(differences, np.float64)
    n, drop = d.size, float(d.mean())
    sums = np.bincount(clusters.index, weights=d, minlength=clusters.count)
    sizes = np.bincount(clusters.index, minlength=clusters.count).astype(np.float64)
    q = t * t * clusters.count / (clusters.count - 1) / (n * n)
    # (delta - drop)**2 = q * sum_c (sum_c - size_c * delta)**2, as a * delta**2 - 2 b delta + c.
    a = 1.0 - q * float(sizes @ sizes)
    b = drop - q * float(sums @ sizes)
    c = drop * drop - q * float(sums @ sums)
    if a <= 0.0:
        return math.inf
    return (b + math.sqrt(max(b * b - a * c, 0.0))) / a


def cluster_intervals(
    columns: Columns,
    names: Sequence[str],
    clusters: Clusters,
    *,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, MetricValue]:
    """Metrics with percentile intervals from a cluster bootstrap: whole clusters resampled.

    Each resample draws ``clusters.count`` clusters with replacement and evaluates every metric
    on their examples; all metrics share the resamples. The point value is the metric on every
    example. With fewer than two clusters the interval is NaN, as with fewer than two examples.
    """
    metrics = [get_metric(name) for name in names]
    n = int(clusters.index.size)
    draws = n_resamples if clusters.count >= 2 else 0
    points, samples = bootstrap_metric_values(
        [(m, columns) for m in metrics],
        num_classes=None,
        n_resamples=draws,
        seed=seed,
        groups=clusters.index,
    )
    tail = (1.0 - confidence) / 2.0
    bounds = (
        np.quantile(samples, [tail, 1.0 - tail], axis=0)
        if draws
        else np.full((2, len(metrics)), np.nan)
    )
    return {
        m.name: MetricValue(float(points[i]), float(bounds[0, i]), float(bounds[1, i]), n)
        for i, m in enumerate(metrics)
    }
