"""The building blocks of metrics: a metric as sufficient statistics and their reduction.

A metric is a function of weighted sums of per-example values (or counts), grouped by a
per-example key (``_Term``); ``evalsentry.gate.metrics`` resamples those sums for its bootstrap
intervals and registers the metrics by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

Task = Literal["classification", "regression", "multilabel", "language_modeling", "multiple_choice"]
PairedTest = Literal["mcnemar", "bootstrap"]
Columns = Mapping[str, NDArray[Any]]
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class _Term:
    """Weighted per-key sums of ``value`` (``None``: of the example count)."""

    key: IntArray | None  # None puts every example under a single key
    n_keys: int
    value: FloatArray | None = None


StatsFn = Callable[[Columns, "int | None"], tuple[_Term, ...]]
# Receives one (resamples, n_keys) array of sums per term, and the sample size.
ReduceFn = Callable[[Sequence[FloatArray], int], FloatArray]
CorrectFn = Callable[[Columns], BoolArray]


@dataclass(frozen=True)
class Metric:
    """A named evaluation metric over per-example columns.

    Attributes:
        name: Registry name, e.g. ``"accuracy"``.
        higher_is_better: Direction used to decide whether a change is a drop.
        paired_test: ``"mcnemar"`` when the metric is the mean of a per-example
            0/1 correctness, otherwise ``"bootstrap"``.
        task: Task family whose columns the metric reads.
        required_columns: Column names the metric needs.
        min_classes: Metric is only offered when ``num_classes >= min_classes``.
    """

    name: str
    higher_is_better: bool
    paired_test: PairedTest
    task: Task
    required_columns: tuple[str, ...]
    min_classes: int = 0
    stats_fn: StatsFn = field(repr=False, compare=False, kw_only=True)
    reduce_fn: ReduceFn = field(repr=False, compare=False, kw_only=True)
    correct_fn: CorrectFn | None = field(default=None, repr=False, compare=False, kw_only=True)

    def is_applicable(self, num_classes: int | None) -> bool:
        """Whether the metric is offered for ``num_classes`` classes (unknown: not if it has a minimum)."""
        return self.min_classes == 0 or (num_classes or 0) >= self.min_classes

    def correct(self, columns: Columns) -> BoolArray | None:
        """Per-example 0/1 correctness for McNemar metrics; ``None`` for the others."""
        if self.correct_fn is None:
            return None
        _check_columns(self, columns)
        return self.correct_fn(columns)


@dataclass(frozen=True)
class MetricValue:
    """A point estimate with its percentile-bootstrap interval (NaN when n < 2)."""

    value: float
    ci_low: float
    ci_high: float
    n: int


class UnknownMetric(KeyError):
    """Raised by :func:`get_metric` for a name that is not registered."""

    def __str__(self) -> str:
        # KeyError would otherwise repr-quote the whole message.
        return str(self.args[0]) if self.args else ""


def _check_columns(metric: Metric, columns: Columns) -> None:
    missing = [name for name in metric.required_columns if name not in columns]
    if missing:
        raise ValueError(f"Metric '{metric.name}' needs columns {missing}; got {sorted(columns)}")


def _col(columns: Columns, name: str, dtype: type[np.generic]) -> NDArray[Any]:
    return np.asarray(columns[name]).astype(dtype, copy=False).ravel()


def _labels(columns: Columns, name: str, num_classes: int | None) -> IntArray:
    labels = _col(columns, name, np.intp)
    too_big = num_classes is not None and labels.size > 0 and labels.max() >= num_classes
    if too_big or (labels.size > 0 and labels.min() < 0):
        raise ValueError(f"Column '{name}' has labels outside [0, {num_classes})")
    return labels


def _is_correct(columns: Columns) -> BoolArray:
    return np.asarray(_col(columns, "prediction", np.intp) == _col(columns, "target", np.intp))


def _error(columns: Columns) -> FloatArray:
    return np.asarray(_col(columns, "prediction", np.float64) - _col(columns, "target", np.float64))


def _mean_of(transform: Callable[[Columns], FloatArray]) -> StatsFn:
    return lambda columns, _num_classes: (_Term(None, 1, transform(columns)),)


def _share_of(indicator: CorrectFn) -> StatsFn:
    # A 0/1 key is cheaper than a 0/1 value: counts need no multiply pass.
    return lambda columns, _num_classes: (_Term(indicator(columns).astype(np.intp), 2),)


def _share_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    return sums[0][:, 1] / n


def _mean_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    return sums[0][:, 0] / n
