"""Metrics of the multi-label, language-modelling and multiple-choice tasks.

Built from the same sufficient statistics as the others (``evalsentry.gate.metric_base``), so
their bootstrap intervals and paired comparisons resample exactly like a classifier's:

- multi-label (bit masks ``target``/``prediction``, per-example ``hamming``): ``exact_match``
  (the whole label set right; a per-example 0/1, so McNemar), ``hamming_score`` (the share of
  labels right), ``micro_f1`` (over every label decision) and ``macro_label_f1`` (the mean of
  the per-label F1 over labels present in target or prediction);
- language modelling (per-example ``loss``, ``tokens``, ``nll_sum``): ``token_nll`` (the mean
  over examples of each example's mean NLL per token) and ``perplexity`` (exp of the NLL per
  token over all scored tokens);
- multiple choice reuses ``accuracy`` and ``nll`` (over each row's choices).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evalsentry.gate.metric_base import (
    BoolArray,
    Columns,
    FloatArray,
    Metric,
    _col,
    _mean_of,
    _mean_reduce,
    _share_of,
    _share_reduce,
    _Term,
)

_BITS = ("target", "prediction")


def _bits(columns: Columns, name: str, labels: int) -> BoolArray:
    values = _col(columns, name, np.int64)
    return np.asarray((values[:, None] >> np.arange(labels, dtype=np.int64)) & 1, dtype=np.bool_)


def _exact(columns: Columns) -> BoolArray:
    return np.asarray(_col(columns, "target", np.int64) == _col(columns, "prediction", np.int64))


def _label_counts(columns: Columns, labels: int) -> tuple[BoolArray, BoolArray, BoolArray]:
    """Per example and label: true positive, false positive, false negative."""
    truth, predicted = _bits(columns, "target", labels), _bits(columns, "prediction", labels)
    return truth & predicted, ~truth & predicted, truth & ~predicted


def _micro_f1_stats(columns: Columns, num_labels: int | None) -> tuple[_Term, ...]:
    counts = _label_counts(columns, num_labels or 62)
    return tuple(_Term(None, 1, c.sum(axis=1).astype(np.float64)) for c in counts)


def _micro_f1_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    del n
    tp, fp, fn = (s[:, 0] for s in sums)
    denominator = 2 * tp + fp + fn
    return np.divide(2 * tp, denominator, out=np.ones_like(tp), where=denominator > 0)


def _macro_f1_stats(columns: Columns, num_labels: int | None) -> tuple[_Term, ...]:
    counts = _label_counts(columns, num_labels or 62)
    return tuple(
        _Term(None, 1, c[:, label].astype(np.float64))
        for c in counts
        for label in range(c.shape[1])
    )


def _macro_f1_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    del n
    labels = len(sums) // 3
    tp, fp, fn = (
        np.stack([s[:, 0] for s in sums[k * labels : (k + 1) * labels]], axis=1) for k in range(3)
    )
    denominator = 2 * tp + fp + fn
    present = denominator > 0
    f1 = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=present)
    return np.asarray(f1.sum(axis=1) / np.maximum(present.sum(axis=1), 1))


def _perplexity_stats(columns: Columns, num_classes: int | None) -> tuple[_Term, ...]:
    del num_classes
    return (
        _Term(None, 1, _col(columns, "nll_sum", np.float64)),
        _Term(None, 1, _col(columns, "tokens", np.float64)),
    )


def _perplexity_reduce(sums: Sequence[FloatArray], n: int) -> FloatArray:
    del n
    return np.asarray(np.exp(sums[0][:, 0] / np.maximum(sums[1][:, 0], 1)))


TASK_METRICS: tuple[Metric, ...] = (
    Metric("exact_match", True, "mcnemar", "multilabel", _BITS,
           stats_fn=_share_of(_exact), reduce_fn=_share_reduce, correct_fn=_exact),
    Metric("hamming_score", True, "bootstrap", "multilabel", ("hamming",),
           stats_fn=_mean_of(lambda c: _col(c, "hamming", np.float64)), reduce_fn=_mean_reduce),
    Metric("micro_f1", True, "bootstrap", "multilabel", _BITS,
           stats_fn=_micro_f1_stats, reduce_fn=_micro_f1_reduce),
    Metric("macro_label_f1", True, "bootstrap", "multilabel", _BITS,
           stats_fn=_macro_f1_stats, reduce_fn=_macro_f1_reduce),
    Metric("token_nll", False, "bootstrap", "language_modeling", ("loss",),
           stats_fn=_mean_of(lambda c: _col(c, "loss", np.float64)), reduce_fn=_mean_reduce),
    Metric("perplexity", False, "bootstrap", "language_modeling", ("nll_sum", "tokens"),
           stats_fn=_perplexity_stats, reduce_fn=_perplexity_reduce),
)  # fmt: skip

TASK_DEFAULTS = {
    "multilabel": ("exact_match", "hamming_score", "micro_f1", "macro_label_f1"),
    "language_modeling": ("perplexity", "token_nll"),
    "multiple_choice": ("accuracy", "nll"),
}
