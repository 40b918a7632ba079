"""Which examples flipped between two evaluations: the example ids behind the flip counts.

The gate counts flips (``-45/+3``); a reviewer wants to open the examples. These are the ids
of the examples the reference got right and the current got wrong (newly wrong), and the
reverse (newly right), by top-1 correctness, read from the history's stored predictions.
"""

from __future__ import annotations

import logging
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
    found = flips_of(history, evaluation_id, reference_evaluation_id)
    if found is None:
        return None
    ids = found.current["example_id"]
    return ids[found.newly_wrong], ids[found.newly_right]


@dataclass(frozen=True)
class Flips:
    """Two evaluations' top-1 correctness side by side, in the current's example order."""

    current: dict[str, np.ndarray]  # the current's columns
    reference_prediction: np.ndarray
    was_right: np.ndarray  # the reference got it right
    newly_wrong: np.ndarray
    newly_right: np.ndarray


def flips_of(history: History, evaluation_id: str, reference_evaluation_id: str) -> Flips | None:
    """Which examples flipped between the reference and the current, in example order.

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
    return Flips(current, aligned["prediction"], was_right, newly_wrong, newly_right)


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
