"""Paired significance tests that decide whether a metric drop is real.

The regression gate evaluates the reference and the current checkpoint on the
same frozen examples, so every test here is *paired*: it compares the two
models example by example, which removes the between-example variance that an
unpaired comparison of two accuracies would have to overcome. All p-values
are one-sided, for the alternative "the current model is worse".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evalsentry.metrics import Columns, Metric, bootstrap_metric_values, get_metric

PairedMethod = Literal["mcnemar-exact", "paired-bootstrap"]

DEFAULT_BOOTSTRAP_RESAMPLES = 2000
DEFAULT_POWER = 0.8
# Under H0 a discordant example is equally likely to flip either way.
_NULL_FLIP_PROBABILITY = 0.5
# A bootstrap of one example always reproduces it and would report any
# difference on that example as certain.
_MIN_BOOTSTRAP_N = 2


@dataclass(frozen=True)
class PairedResult:
    """Outcome of a one-sided paired test of "current is worse than reference".

    Attributes:
        p_value: One-sided p-value; small means the drop is unlikely to be noise.
        newly_wrong: Examples the reference got right and the current got wrong (b).
        newly_right: Examples the reference got wrong and the current got right (c).
        n: Number of paired examples.
        method: ``"mcnemar-exact"`` or ``"paired-bootstrap"``.

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


def _flips(ref_correct: NDArray[np.bool_], cur_correct: NDArray[np.bool_]) -> tuple[int, int]:
    newly_wrong = int(np.count_nonzero(ref_correct & ~cur_correct))
    newly_right = int(np.count_nonzero(~ref_correct & cur_correct))
    return newly_wrong, newly_right


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
    ref = _as_bool_vector(ref_correct, "ref_correct")
    cur = _as_bool_vector(cur_correct, "cur_correct")
    if ref.shape != cur.shape:
        raise ValueError(f"Paired arrays differ in length: {ref.size} vs {cur.size}")
    newly_wrong, newly_right = _flips(ref, cur)
    p_value = 1.0
    if newly_wrong:
        # P(X >= b) = P(X > b - 1): the binomial survival function. scipy.special imports in a
        # quarter of the time scipy.stats needs, which keeps `evalsentry gate` quick to start.
        from scipy.special import bdtrc

        total = newly_wrong + newly_right
        p_value = min(1.0, float(bdtrc(newly_wrong - 1, total, _NULL_FLIP_PROBABILITY)))
    return PairedResult(p_value, newly_wrong, newly_right, int(ref.size), "mcnemar-exact")


def _check_same_examples(ref_columns: Columns, cur_columns: Columns, names: Sequence[str]) -> int:
    lengths = {len(np.asarray(cols[name])) for cols in (ref_columns, cur_columns) for name in names}
    if len(lengths) != 1:
        raise ValueError(f"Reference and current columns differ in length: {sorted(lengths)}")
    both_labelled = "target" in ref_columns and "target" in cur_columns
    if both_labelled and not np.array_equal(ref_columns["target"], cur_columns["target"]):
        raise ValueError("Reference and current targets differ: not the same examples")
    return lengths.pop()


def paired_bootstrap_drop_pvalue(
    metric: Metric | str,
    ref_columns: Columns,
    cur_columns: Columns,
    *,
    num_classes: int | None,
    n_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> PairedResult:
    """Paired bootstrap test that the current model is worse on ``metric``.

    The same resampled example indices are applied to both models, so each
    resample yields a paired difference. With ``delta`` oriented so that a
    positive value means "current is worse", the one-sided p-value is
    ``(1 + #{delta <= 0}) / (n_resamples + 1)``, which is never 0 and is 1.0
    for identical models.

    Args:
        metric: The metric, or its registered name.
        ref_columns: Per-example columns of the reference model.
        cur_columns: Per-example columns of the current model, same examples and order.
        num_classes: Number of classes for classification metrics, else ``None``.
        n_resamples: Number of paired bootstrap resamples (at least 1).
        seed: Resampling seed; equal inputs and seed give an equal p-value.

    Returns:
        The test result. ``newly_wrong``/``newly_right`` count prediction flips
        for classification metrics whose columns include ``prediction`` and
        ``target``, else they are 0. Fewer than two examples give p = 1.0.

    Raises:
        ValueError: If the column sets do not describe the same examples.

    """
    metric = get_metric(metric) if isinstance(metric, str) else metric
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    for columns in (ref_columns, cur_columns):
        missing = [name for name in metric.required_columns if name not in columns]
        if missing:
            raise ValueError(f"Metric '{metric.name}' needs columns {missing}")
    n = _check_same_examples(ref_columns, cur_columns, metric.required_columns)
    newly_wrong = newly_right = 0
    has_labels = all("prediction" in c and "target" in c for c in (ref_columns, cur_columns))
    if metric.task == "classification" and has_labels:
        newly_wrong, newly_right = _flips(
            *(_correct_predictions(c) for c in (ref_columns, cur_columns))
        )
    p_value = 1.0
    if n >= _MIN_BOOTSTRAP_N:
        _, samples = bootstrap_metric_values(
            [(metric, ref_columns), (metric, cur_columns)],
            num_classes=num_classes,
            n_resamples=n_resamples,
            seed=seed,
        )
        delta = samples[:, 1] - samples[:, 0]
        worse = -delta if metric.higher_is_better else delta
        # NaN deltas count as "not worse", which keeps the test conservative.
        not_worse = int(np.count_nonzero(~(worse > 0)))
        p_value = (1 + not_worse) / (n_resamples + 1)
    return PairedResult(p_value, newly_wrong, newly_right, n, "paired-bootstrap")


def _correct_predictions(columns: Columns) -> NDArray[np.bool_]:
    prediction: NDArray[Any] = np.asarray(columns["prediction"])
    return np.asarray(prediction == np.asarray(columns["target"]), dtype=np.bool_)


def paired_drop_pvalue(
    metric: Metric | str,
    ref_columns: Columns,
    cur_columns: Columns,
    *,
    num_classes: int | None,
    n_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> PairedResult:
    """Runs the paired test the metric asks for (``Metric.paired_test``).

    Args:
        metric: The metric, or its registered name.
        ref_columns: Per-example columns of the reference model.
        cur_columns: Per-example columns of the current model, same examples and order.
        num_classes: Number of classes for classification metrics, else ``None``.
        n_resamples: Resamples, used only by the bootstrap test.
        seed: Seed, used only by the bootstrap test.

    Returns:
        The McNemar result for 0/1-correctness metrics, else the paired bootstrap result.

    """
    metric = get_metric(metric) if isinstance(metric, str) else metric
    ref_correct, cur_correct = metric.correct(ref_columns), metric.correct(cur_columns)
    if metric.paired_test == "mcnemar" and ref_correct is not None and cur_correct is not None:
        _check_same_examples(ref_columns, cur_columns, metric.required_columns)
        return mcnemar_drop_pvalue(ref_correct, cur_correct)
    return paired_bootstrap_drop_pvalue(
        metric,
        ref_columns,
        cur_columns,
        num_classes=num_classes,
        n_resamples=n_resamples,
        seed=seed,
    )


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


def minimum_detectable_drop(
    n: int, accuracy: float, alpha: float, power: float = DEFAULT_POWER
) -> float:
    """Approximate smallest absolute accuracy drop a paired McNemar test detects.

    Normal approximation to the one-sided McNemar test (Connor, 1987, with the
    small ``delta**2`` term dropped): with discordant-pair rate ``psi`` and
    true drop ``delta``, the test reaches the given power when
    ``delta >= (z_{1-alpha} + z_{power}) * sqrt(psi / n)``. We take
    ``psi = 2 * accuracy * (1 - accuracy)``, the rate for two models of that
    accuracy with independent errors. Checkpoints of one model usually err on
    the same examples, so the real ``psi`` is smaller and this estimate errs
    on the large (cautious) side; dropping ``delta**2`` does too. The exact
    test also cannot reject with fewer than ``ceil(log2(1/alpha))`` flips, so
    the result is at least that many examples' worth of accuracy.

    Meant for a human-readable warning ("this eval set cannot detect drops
    smaller than ..."), not for decisions.

    Args:
        n: Number of paired examples.
        accuracy: Reference accuracy in [0, 1].
        alpha: One-sided significance level in (0, 1).
        power: Desired probability of detecting the drop, in (0, 1).

    Returns:
        The drop in accuracy units (0.01 = one percentage point); may exceed
        ``accuracy`` when n is too small to detect any drop.

    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must lie in [0, 1], got {accuracy}")
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    standard_normal = NormalDist()
    z_sum = standard_normal.inv_cdf(1.0 - alpha) + standard_normal.inv_cdf(power)
    discordance = 2.0 * accuracy * (1.0 - accuracy)
    approximate = z_sum * math.sqrt(discordance / n)
    fewest_flips = math.ceil(math.log2(1.0 / alpha))
    return max(approximate, fewest_flips / n)
