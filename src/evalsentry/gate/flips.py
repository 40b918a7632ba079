"""Which examples flipped between two evaluations: the example ids behind the flip counts.

The gate counts flips (``-45/+3``); a reviewer wants to open the examples. These are the ids
of the examples the reference got right and the current got wrong (newly wrong), and the
reverse (newly right), by top-1 correctness, read from the history's stored predictions.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from evalsentry.errors import EvalsentryError
from evalsentry.gate.verdicts import SEVERITY, Comparison

if TYPE_CHECKING:
    from evalsentry.history.store import History

logger = logging.getLogger(__name__)

#: At most this many pairs of evaluations are read for a report (each reads two files).
MAX_PAIRS = 20


@dataclass(frozen=True)
class ExampleFlips:
    """The examples that changed between a reference evaluation and the current one."""

    label: str  # whose and against what: ``m (candidate file) on toy vs production (v1, 2026-W40)``
    newly_wrong: list[str]
    newly_right: list[str]


def flipped_ids(
    history: History, evaluation_id: str, reference_evaluation_id: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """The example ids newly wrong and newly right in ``evaluation_id`` against the reference.

    None when either evaluation's predictions are missing, their examples differ, or the task
    has no right or wrong to flip (regression: float predictions; language modelling: none).
    """
    found = _flips(history, evaluation_id, reference_evaluation_id)
    if found is None:
        return None
    current, _, newly_wrong, newly_right = found
    return current["example_id"][newly_wrong], current["example_id"][newly_right]


#: Fewer newly wrong examples than this say nothing about where they concentrate.
MIN_FLIPS = 5


@dataclass(frozen=True)
class Concentration:
    """Where a line's newly wrong examples are: ``text`` in words, the ``classes`` beyond chance."""

    text: str
    classes: tuple[str, ...]


def class_concentration(
    history: History, evaluation_id: str, reference_evaluation_id: str, alpha: float = 0.05
) -> Concentration | None:
    """Whether the newly wrong examples sit in some classes beyond chance, in words.

    Of the examples the reference got right, each class's share of the newly wrong is tested
    against its share of those examples (hypergeometric, upper tail, Holm over the classes):
    ``46 of 52 flips are in classes 3, 5, 8 (p=1e-20, ...)``. None for a task without classes
    or with fewer than ``MIN_FLIPS`` flips.
    """
    found = _flips(history, evaluation_id, reference_evaluation_id)
    if found is None or np.asarray(found[0]["target"]).ndim != 1:
        return None
    current, was_right, newly_wrong, _ = found
    flips = int(newly_wrong.sum())
    if flips < MIN_FLIPS:
        return None
    targets = np.asarray(current["target"])[was_right]
    classes, at_risk = np.unique(targets, return_counts=True)
    hits = np.array([int(newly_wrong[was_right][targets == c].sum()) for c in classes])
    total = int(at_risk.sum())
    tails = np.array(
        [_upper_tail(int(h), total, int(k), flips) for h, k in zip(hits, at_risk, strict=True)]
    )
    adjusted = _holm(tails)
    test = f"hypergeometric, Holm over {len(classes)} classes"
    beyond = (adjusted < alpha) & (hits > flips * at_risk / at_risk.sum())
    if not beyond.any():
        return Concentration(f"{flips} flips spread over the classes as chance would ({test})", ())
    named = tuple(str(c) for c in classes[beyond])
    return Concentration(
        f"{int(hits[beyond].sum())} of {flips} flips are in classes {', '.join(named)} "
        f"(p={float(adjusted[beyond].max()):.1g}, {test})",
        named,
    )


def _upper_tail(hits: int, total: int, in_class: int, drawn: int) -> float:
    """P(X >= hits) for X hypergeometric: ``drawn`` of ``total``, ``in_class`` of them marked.

    Summed exactly in log space (no scipy: the gate's command starts without it).
    """
    top = min(in_class, drawn)
    if hits > top:
        return 0.0
    x = np.arange(max(hits, 0), top + 1)
    log_terms = _log_choose(in_class, x) + _log_choose(total - in_class, drawn - x)
    log_terms -= math.lgamma(total + 1) - math.lgamma(drawn + 1) - math.lgamma(total - drawn + 1)
    peak = float(log_terms.max())
    return float(min(1.0, math.exp(peak) * np.exp(log_terms - peak).sum()))


def _log_choose(n: int, k: np.ndarray) -> np.ndarray:
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    return np.asarray(math.lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1), dtype=np.float64)


def _holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of ``p_values`` (family-wise error)."""
    order = np.argsort(p_values)
    steps = (len(p_values) - np.arange(len(p_values))) * p_values[order]
    adjusted = np.empty_like(steps)
    adjusted[order] = np.minimum(np.maximum.accumulate(steps), 1.0)
    return np.asarray(adjusted, dtype=np.float64)


def _flips(
    history: History, evaluation_id: str, reference_evaluation_id: str
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray] | None:
    """The current's columns (example order), and which the reference got right, newly wrong, newly right.

    None where there is no right or wrong to flip (see :func:`flipped_ids`).
    """
    from evalsentry.gate.pairs import align, canonical
    from evalsentry.gate.stats import flip_masks

    current = history.predictions(evaluation_id)
    reference = history.predictions(reference_evaluation_id)
    if current is None or reference is None:
        return None
    current = canonical(current)  # the flips in example order, however the rows were stored
    aligned = align(reference, current)
    if (
        aligned is None
        or not _labelled(current)
        or np.issubdtype(current["prediction"].dtype, np.floating)
    ):
        return None
    was_right = aligned["prediction"] == aligned["target"]
    newly_wrong, newly_right = flip_masks(was_right, current["prediction"] == current["target"])
    return current, was_right, newly_wrong, newly_right


def _labelled(columns: dict[str, np.ndarray]) -> bool:
    """Whether predictions can be right or wrong: they have a prediction and a target."""
    return "prediction" in columns and "target" in columns


def _label(c: Comparison) -> str:
    against = ", ".join(
        part
        for part in (
            f"v{c.reference_version}" if c.reference_version is not None else "",
            c.reference_week or "",
        )
        if part
    )
    return f"{c.who(with_evalset=True)} vs {c.reference}" + (f" ({against})" if against else "")


def report_flips(
    history: History, comparisons: Sequence[Comparison], *, max_pairs: int = MAX_PAIRS
) -> list[ExampleFlips]:
    """The flipped examples of each evaluation against each of its references, worst first.

    One entry per (evaluation, reference evaluation) among the overall gating comparisons,
    ordered by the worst verdict between them; at most ``max_pairs`` pairs are read. Pairs with
    nothing to flip (see :func:`flipped_ids`) are left out, and so are pairs whose predictions
    cannot be read: the gate has said so already (an ERROR), and a list of ids never hides it.
    """
    worst: dict[tuple[str, str], Comparison] = {}
    for c in comparisons:
        if c.slice or not c.gating or not c.evaluation_id or not c.reference_evaluation_id:
            continue
        key = (c.evaluation_id, c.reference_evaluation_id)
        if key not in worst or SEVERITY[c.verdict] > SEVERITY[worst[key].verdict]:
            worst[key] = c
    ordered = sorted(worst.items(), key=lambda item: -SEVERITY[item[1].verdict])
    found = []
    for (evaluation_id, reference_id), c in ordered[:max_pairs]:
        try:
            ids = flipped_ids(history, evaluation_id, reference_id)
        except EvalsentryError as exc:
            logger.warning("flipped examples of %s not listed: %s", _label(c), exc)
            continue
        if ids is not None:
            found.append(
                ExampleFlips(_label(c), [str(i) for i in ids[0]], [str(i) for i in ids[1]])
            )
    return found
