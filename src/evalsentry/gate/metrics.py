"""Evaluation metrics with seeded, vectorised percentile-bootstrap intervals.

Each metric is a function of *sufficient statistics*: weighted sums of per-example values (or
counts), grouped by a per-example key such as the class or the confidence bin. A bootstrap
resample is a vector of per-example counts, so every resample's statistics are weighted segment
sums over examples sorted by their joint key. No example rows are gathered, and all metrics
(and both models of a paired comparison) share the very same resample indices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evalsentry.errors import ConfigError, did_you_mean
from evalsentry.gate import task_metrics
from evalsentry.gate.metric_base import (
    BoolArray,
    Columns,
    FloatArray,
    IntArray,
    Metric,
    MetricValue,
    Task,
    UnknownMetric,
    _check_columns,
    _col,
    _error,
    _is_correct,
    _labels,
    _mean_of,
    _mean_reduce,
    _share_of,
    _share_reduce,
    _Term,
)
from evalsentry.names import SCORE_PREFIX

ECE_BINS = 15
DEFAULT_TOP_K = 5
DEFAULT_N_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
# Resamples are drawn in blocks of about this many (resample, example) cells:
# a 2 MB count block keeps the bincount scatter cache-resident (measured ~2x
# faster than 16 MB blocks) and bounds memory at a few MB whatever n is.
_BLOCK_CELLS = 1 << 18
# difflib's default cutoff (0.6) rejects obvious abbreviations such as "acc".
_SUGGESTION_CUTOFF = 0.5
# Resampling one example always reproduces it: a zero-width, meaningless CI.
_MIN_BOOTSTRAP_N = 2
_TOP_K_NAME = re.compile(r"^top(\d+)_accuracy$")


def _macro_f1_stats(columns: Columns, num_classes: int | None) -> tuple[_Term, ...]:
    target = _labels(columns, "target", num_classes)
    prediction = _labels(columns, "prediction", num_classes)
    # Classes absent from both columns can never have support, so compacting
    # to the present ones bounds the work by n rather than by num_classes.
    _, compact = np.unique(np.concatenate([target, prediction]), return_inverse=True)
    compact = compact.ravel().astype(np.intp)
    n_present = int(compact.max()) + 1 if compact.size else 1
    t, p = compact[: target.size], compact[target.size :]
    true_positive = np.where(t == p, t, n_present)  # the extra key collects misses
    return (_Term(t, n_present), _Term(p, n_present), _Term(true_positive, n_present + 1))


def _macro_f1_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    # sklearn's convention: average over classes present in target or
    # prediction (of this resample); a present class with no hit scores 0.
    denominator = sums[0] + sums[1]
    present = denominator > 0
    f1 = np.divide(
        2.0 * sums[2][:, :-1], denominator, out=np.zeros_like(denominator), where=present
    )
    return np.asarray(f1.sum(axis=1) / np.maximum(present.sum(axis=1), 1))


def _ece_stats(columns: Columns, num_classes: int | None) -> tuple[_Term, ...]:
    del num_classes
    confidence = _col(columns, "confidence", np.float64)
    # Bins are (k/B, (k+1)/B]; a confidence of exactly 0 joins the first bin.
    bins = np.clip(np.ceil(confidence * ECE_BINS).astype(np.intp) - 1, 0, ECE_BINS - 1)
    hits = bins * 2 + _is_correct(columns)
    return (_Term(hits, 2 * ECE_BINS), _Term(bins, ECE_BINS, confidence))


def _ece_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    # sum_b (n_b/n)|acc_b - conf_b| == sum_b |hits_b - confidence_sum_b| / n
    return np.asarray(np.abs(sums[0][:, 1::2] - sums[1]).sum(axis=1) / n)


def _r2_stats(columns: Columns, num_classes: int | None) -> tuple[_Term, ...]:
    del num_classes
    target = _col(columns, "target", np.float64)
    # Centring avoids catastrophic cancellation in sum(y^2) - sum(y)^2 / n.
    centred = target - (target.mean() if target.size else 0.0)
    return tuple(_Term(None, 1, value) for value in (centred, centred**2, _error(columns) ** 2))


def _r2_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    total = sums[1][:, 0] - sums[0][:, 0] ** 2 / n
    residual = sums[2][:, 0]
    # sklearn's force_finite convention: constant targets score 1 when fitted
    # exactly and 0 otherwise, so no resample yields NaN or infinity.
    constant = total <= 0
    fitted = 1.0 - residual / np.where(constant, 1.0, total)
    return np.where(constant, np.where(residual <= 0, 1.0, 0.0), fitted)


def top_k_accuracy(k: int) -> Metric:
    """Builds the top-k accuracy metric: the share of examples with ``target_rank < k``.

    Args:
        k: Number of top-ranked predictions that count as a hit; at least 1.

    Returns:
        A McNemar-tested metric, offered only when ``num_classes > k``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")

    def hit(columns: Columns) -> BoolArray:
        return np.asarray(_col(columns, "target_rank", np.intp) < k)

    return Metric(
        f"top{k}_accuracy", True, "mcnemar", "classification", ("target_rank",), min_classes=k + 1,
        stats_fn=_share_of(hit), reduce_fn=_share_reduce, correct_fn=hit,
    )  # fmt: skip


_LABELS = ("target", "prediction")
METRICS: Mapping[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric("accuracy", True, "mcnemar", "classification", _LABELS,
               stats_fn=_share_of(_is_correct), reduce_fn=_share_reduce, correct_fn=_is_correct),
        Metric("macro_f1", True, "bootstrap", "classification", _LABELS,
               stats_fn=_macro_f1_stats, reduce_fn=_macro_f1_reduce),
        Metric("nll", False, "bootstrap", "classification", ("loss",),
               stats_fn=_mean_of(lambda c: _col(c, "loss", np.float64)), reduce_fn=_mean_reduce),
        Metric("ece", False, "bootstrap", "classification", (*_LABELS, "confidence"),
               stats_fn=_ece_stats, reduce_fn=_ece_reduce),
        top_k_accuracy(DEFAULT_TOP_K),
        Metric("mae", False, "bootstrap", "regression", _LABELS,
               stats_fn=_mean_of(lambda c: np.abs(_error(c))), reduce_fn=_mean_reduce),
        Metric("rmse", False, "bootstrap", "regression", _LABELS,
               stats_fn=_mean_of(lambda c: _error(c) ** 2),
               reduce_fn=lambda sums, n: np.sqrt(_mean_reduce(sums, n))),
        Metric("r2", True, "bootstrap", "regression", _LABELS,
               stats_fn=_r2_stats, reduce_fn=_r2_reduce),
        *task_metrics.TASK_METRICS,
    )
}  # fmt: skip

DEFAULT_METRICS: Mapping[Task, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1", "nll", "ece", "top5_accuracy"),
    "regression": ("mae", "rmse", "r2"),
    **task_metrics.TASK_DEFAULTS,  # type: ignore[dict-item]  # its keys are Tasks
}


def get_metric(name: str) -> Metric:
    """A registered metric; ``top<K>_accuracy`` for any K >= 1; ``score:<key>``, a harness's score.

    Raises:
        UnknownMetric: For an unknown name; the message suggests the closest one.
    """
    if name in METRICS:
        return METRICS[name]
    if name.startswith(SCORE_PREFIX):  # the mean of the column so named (evalsentry.harnesses)
        read = _mean_of(lambda c: _col(c, name, np.float64))
        return Metric(name, True, "bootstrap", "classification", (name,), stats_fn=read, reduce_fn=_mean_reduce)  # fmt: skip
    match = _TOP_K_NAME.match(name)
    if match and int(match.group(1)) >= 1:
        return top_k_accuracy(int(match.group(1)))
    known = sorted(METRICS)
    hint = did_you_mean(name, known, cutoff=_SUGGESTION_CUTOFF) or (
        f" Known metrics: {', '.join(known)}."
    )
    raise UnknownMetric(f"Unknown metric '{name}'.{hint}")


def default_metrics(task: Task, num_classes: int | None = None) -> tuple[str, ...]:
    """The default metric names for ``task`` that are offered for ``num_classes``."""
    return tuple(name for name in DEFAULT_METRICS[task] if METRICS[name].is_applicable(num_classes))


def metric_names(
    evalset_metrics: Sequence[str] | None, task: str, num_classes: int | None
) -> list[str]:
    """The metrics an evalset is judged on: its own list, else the task's defaults.

    Raises:
        ConfigError: The evalset names an unknown metric.
    """
    names = list(evalset_metrics or default_metrics(task, num_classes))  # type: ignore[arg-type]
    try:
        for name in names:
            get_metric(name)
    except UnknownMetric as exc:
        raise ConfigError("evalset.yaml", "metrics", str(exc)) from None
    return names


def _n_rows(columns: Columns, names: Sequence[str]) -> int:
    lengths = {np.asarray(columns[name]).shape[0] for name in names if name in columns}
    if len(lengths) > 1:
        raise ValueError(f"Columns {sorted(set(names))} have different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def _summariser(terms: Sequence[_Term], n: int) -> Callable[[IntArray], list[FloatArray]]:
    """Returns a function from resample counts ``(rows, n)`` to every term's sums.

    Examples are sorted by their joint key so per-key sums become segment sums.
    Values summed over all examples (e.g. loss) need only one matrix product,
    which is much cheaper than a multiply-then-segment-sum pass.
    """
    joint = np.zeros(n, dtype=np.intp)
    for key in (t.key for t in terms if t.key is not None):
        # Re-compacting after each key keeps the combined code below n * n_keys.
        _, inverse = np.unique(joint * (int(key.max()) + 1) + key, return_inverse=True)
        joint = inverse.ravel().astype(np.intp)
    order = np.argsort(joint, kind="stable")
    starts = np.flatnonzero(np.r_[True, joint[order][1:] != joint[order][:-1]])
    free = [j for j, t in enumerate(terms) if t.key is None and t.value is not None]
    keyed = [j for j, t in enumerate(terms) if t.key is not None and t.value is not None]
    free_values = np.empty((n, len(free)))
    keyed_values = np.empty((n, len(keyed)), order="F")  # read one column at a time
    for values, indices in ((free_values, free), (keyed_values, keyed)):
        for col, j in enumerate(indices):
            values[:, col] = np.asarray(terms[j].value)[order]
    cell_keys = [None if t.key is None else t.key[order][starts] for t in terms]

    def summarise(weights: IntArray) -> list[FloatArray]:
        rows = weights.shape[0]
        per_cell = {-1: np.add.reduceat(weights, starts, axis=1).astype(np.float64)}
        for col, j in enumerate(keyed):
            per_cell[j] = np.add.reduceat(weights * keyed_values[:, col], starts, axis=1)
        free_sums = weights.astype(np.float64) @ free_values if free else free_values
        offsets = np.arange(rows, dtype=np.intp)[:, None]
        sums = []
        for j, (term, cell_key) in enumerate(zip(terms, cell_keys, strict=True)):
            cells = per_cell.get(j, per_cell[-1])
            if j in free:
                sums.append(free_sums[:, [free.index(j)]])
            elif cell_key is None:
                sums.append(cells.sum(axis=1, keepdims=True))
            else:
                flat = (cell_key[None, :] + offsets * term.n_keys).ravel()
                total = np.bincount(flat, weights=cells.ravel(), minlength=rows * term.n_keys)
                sums.append(np.asarray(total, dtype=np.float64).reshape(rows, term.n_keys))
        return sums

    return summarise


def bootstrap_metric_values(
    evaluations: Sequence[tuple[Metric, Columns]],
    *,
    num_classes: int | None,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    seed: int = 0,
    groups: IntArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Computes metric values on bootstrap resamples shared by all evaluations.

    Row ``i`` of every column set must be the same example, so two models'
    columns give a *paired* bootstrap. Resamples are processed in blocks whose
    size depends on n only, so results do not depend on the machine. With
    ``groups`` (each row's group, ``0..g-1``) a resample draws ``g`` whole groups
    with replacement (a cluster bootstrap) instead of ``n`` rows.

    Args:
        evaluations: ``(metric, columns)`` pairs whose column sets have equal length n.
        num_classes: Number of classes (classification), used for validation.
        n_resamples: Number of bootstrap resamples; 0 yields no samples.
        seed: Seed of the resample indices; equal inputs and seed give equal output.

    Returns:
        ``(points, samples)``: the point values, shape ``(k,)``, and the resampled
        values, shape ``(n_resamples, k)``; all NaN when n == 0.
    """
    if n_resamples < 0:
        raise ValueError(f"n_resamples must be >= 0, got {n_resamples}")
    for metric, columns in evaluations:
        _check_columns(metric, columns)
    sizes = {_n_rows(columns, metric.required_columns) for metric, columns in evaluations}
    if len(sizes) > 1:
        raise ValueError(f"Column sets have different numbers of rows: {sorted(sizes)}")
    n, k = (sizes.pop() if sizes else 0), len(evaluations)
    if n == 0:
        return np.full(k, np.nan), np.full((n_resamples, k), np.nan)
    term_lists = [metric.stats_fn(columns, num_classes) for metric, columns in evaluations]
    bounds = np.cumsum([0] + [len(terms) for terms in term_lists])
    summarise = _summariser([term for terms in term_lists for term in terms], n)

    def evaluate(weights: IntArray) -> FloatArray:
        sums = summarise(weights)
        values = [
            m.reduce_fn(sums[bounds[i] : bounds[i + 1]], n) for i, (m, _) in enumerate(evaluations)
        ]
        return np.stack(values, axis=1)

    points = evaluate(np.ones((1, n), dtype=np.intp))[0]
    samples = np.empty((n_resamples, k))
    rng = np.random.default_rng(seed)
    units = n if groups is None else int(groups.max()) + 1
    block = max(1, _BLOCK_CELLS // n)
    for begin in range(0, n_resamples, block):
        rows = min(block, n_resamples - begin)
        # Offset by row * units, one bincount gives the block's (rows, units) counts.
        indices = rng.integers(0, units, size=(rows, units), dtype=np.intp)
        indices += (np.arange(rows, dtype=np.intp) * units)[:, None]
        counts = np.bincount(indices.ravel(), minlength=rows * units).reshape(rows, units)
        samples[begin : begin + rows] = evaluate(counts if groups is None else counts[:, groups])
    return points, samples


def compute_metrics(
    columns: Columns,
    names: Sequence[str],
    *,
    num_classes: int | None,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    mask: BoolArray | None = None,
) -> dict[str, MetricValue]:
    """Computes metrics with percentile-bootstrap confidence intervals.

    All metrics share the same resample indices, drawn over the selected
    examples only.

    Args:
        columns: Per-example arrays, one row per example.
        names: Metric names (see :data:`METRICS` and :func:`get_metric`).
        num_classes: Number of classes for classification, else ``None``.
        n_resamples: Bootstrap resamples; 0 skips the interval.
        confidence: Central coverage of the interval, in (0, 1).
        seed: Resampling seed; equal inputs and seed give identical intervals.
        mask: Optional boolean row selector, e.g. a slice of the evaluation set.

    Returns:
        Metric name to :class:`MetricValue`. With fewer than two selected
        examples (or no resamples) the interval bounds are NaN; with no
        selected example the value is NaN as well. Nothing raises for these.

    Raises:
        UnknownMetric: For an unknown metric name.
        ValueError: For invalid arguments (no metric named, a mask of another
            length), missing columns, or a metric that is not offered for
            ``num_classes`` (see :func:`default_metrics`).

    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    metrics = _applicable(names, num_classes)
    needed = [name for metric in metrics for name in metric.required_columns]
    if mask is not None:
        columns = _masked(columns, needed, mask)
    n = _n_rows(columns, needed)
    draws = n_resamples if n >= _MIN_BOOTSTRAP_N else 0
    points, samples = bootstrap_metric_values(
        [(metric, columns) for metric in metrics],
        num_classes=num_classes,
        n_resamples=draws,
        seed=seed,
    )
    tail = (1.0 - confidence) / 2.0
    bounds = (
        np.quantile(samples, [tail, 1.0 - tail], axis=0)
        if draws
        else np.full((2, len(metrics)), np.nan)
    )
    return {
        metric.name: MetricValue(float(points[i]), float(bounds[0, i]), float(bounds[1, i]), n)
        for i, metric in enumerate(metrics)
    }


def _applicable(names: Sequence[str], num_classes: int | None) -> list[Metric]:
    """The named metrics (one at least), each offered for ``num_classes``."""
    if not names:
        raise ValueError("no metric named: name at least one (see default_metrics)")
    metrics = [get_metric(name) for name in names]
    for metric in metrics:
        if not metric.is_applicable(num_classes):
            raise ValueError(f"Metric '{metric.name}' needs num_classes >= {metric.min_classes}")
    return metrics


def _masked(columns: Columns, needed: Sequence[str], mask: BoolArray) -> Columns:
    """The needed columns' rows that ``mask`` (one boolean per row) selects."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (_n_rows(columns, needed),):
        raise ValueError(f"mask must be one boolean per row, got {mask.dtype} {mask.shape}")
    return {name: np.asarray(columns[name])[mask] for name in set(needed) if name in columns}
