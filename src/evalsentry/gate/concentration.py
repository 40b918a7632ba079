"""Where a line's newly wrong examples are: classes, slices and confusion cells beyond chance.

A FAIL's flips that sit in a few classes (or in one value of a slice column) point at the data
(a labelling batch, a broken source) more than at the model. Of the examples the reference got
right, each group's share of the newly wrong is tested against its share of those examples
(hypergeometric upper tail), Holm-adjusted over every group tested (classes and slice values
together, one family). The confusion cells (true -> predicted) that grew most are named beside.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry.gate.flips import Flips, flips_of
from evalsentry.gate.slices import slice_columns, slice_masks
from evalsentry.gate.stats import holm

if TYPE_CHECKING:
    from evalsentry.history.store import History

#: Fewer newly wrong examples than this say nothing about where they concentrate.
MIN_FLIPS = 5
#: At most this many grown confusion cells are named.
MAX_CELLS = 3


@dataclass(frozen=True)
class Concentration:
    """Where a line's newly wrong examples are, in words and by name.

    ``classes`` and ``slices`` (``region=north``) are the groups holding more of the flips than
    chance would at the family-wise ``alpha``; ``cells`` the grown confusion cells (``3 -> 8``).
    """

    text: str
    classes: tuple[str, ...]
    slices: tuple[str, ...] = ()
    cells: tuple[str, ...] = ()

    @property
    def places(self) -> str:
        """``classes 3, 5, 8 and slice region=north``; "" when the flips spread as chance would."""
        parts = [f"classes {', '.join(self.classes)}"] if self.classes else []
        parts += [f"slice {', '.join(self.slices)}"] if self.slices else []
        return " and ".join(parts)


def concentration(
    history: History, evaluation_id: str, reference_evaluation_id: str, alpha: float = 0.05
) -> Concentration | None:
    """Whether the newly wrong examples sit in some classes or slice values beyond chance.

    ``46 of 52 flips are in classes 3, 5, 8 at p=1e-20 (hypergeometric, Holm over 10 classes
    and 2 slice values); grown cells (true -> predicted): 3 -> 8 +14, 5 -> 3 +11``. None for a task
    without classes (or with one, as an imported harness run's right-or-wrong, and no slice) or
    with fewer than ``MIN_FLIPS`` flips.
    """
    return concentration_of(flips_of(history, evaluation_id, reference_evaluation_id), alpha)


def concentration_of(found: Flips | None, alpha: float = 0.05) -> Concentration | None:
    """:func:`concentration` of flips already read (:func:`~evalsentry.gate.flips.flips_of`)."""
    if found is None or np.asarray(found.current["target"]).ndim != 1:
        return None
    flips = int(found.newly_wrong.sum())
    if flips < MIN_FLIPS:
        return None
    right = found.was_right
    groups = _groups(found.current, right)
    if not groups:
        return None  # one class and no slice (an imported harness run: right or wrong)
    adjusted, more = _adjusted(groups, found.newly_wrong[right])
    beyond = {
        (g.kind, g.name): float(p)
        for g, p, m in zip(groups, adjusted, more, strict=True)
        if p < alpha and m
    }
    named = {kind: tuple(n for k, n in beyond if k == kind) for kind in ("class", "slice")}
    n_classes = sum(g.kind == "class" for g in groups)
    counted = [f"{n_classes} classes"] if n_classes else []
    counted += [f"{len(groups) - n_classes} slice values"] if len(groups) > n_classes else []
    test = f"hypergeometric, Holm over {' and '.join(counted)}"
    parts = [
        f"{_hits(groups, kind, names, found.newly_wrong[right])} of {flips} flips are in "
        f"{'classes' if kind == 'class' else 'slice'} {', '.join(names)} "
        f"at p={max(beyond[kind, n] for n in names):.2g}"
        for kind, names in named.items()
        if names
    ]
    spread = f"{flips} flips spread over the {'classes' if n_classes else 'slices'} as chance would"
    text = f"{'; '.join(parts) if parts else spread} ({test})"
    cells = _grown_cells(found.current, found.reference_prediction) if n_classes else []
    if cells:
        grown = ", ".join(f"{t} -> {p} +{g}" for t, p, g in cells)
        text += f"; grown cells (true -> predicted): {grown}"
    return Concentration(
        text, named["class"], named["slice"], tuple(f"{t} -> {p}" for t, p, _ in cells)
    )


@dataclass(frozen=True)
class _Group:
    kind: str  # class or slice
    name: str  # ``3`` or ``region=north``
    mask: np.ndarray  # over the examples the reference got right


def _groups(current: dict[str, Any], right: np.ndarray) -> list[_Group]:
    """Every class and every slice value, as masks over the examples the reference got right."""
    target = np.asarray(current["target"])[right]
    classes = np.unique(target)
    groups = [_Group("class", str(c), target == c) for c in classes] if len(classes) > 1 else []
    masks = [(name, mask[right]) for name, mask in slice_masks(slice_columns(current))]
    return groups + [_Group("slice", name, mask) for name, mask in masks if mask.any()]


def _adjusted(groups: list[_Group], newly_wrong: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each group's Holm-adjusted p of its flips by chance, and whether it holds over its share."""
    flips, total = int(newly_wrong.sum()), len(newly_wrong)
    hits = np.array([int(newly_wrong[g.mask].sum()) for g in groups])
    sizes = np.array([int(g.mask.sum()) for g in groups])
    tails = [_upper_tail(int(h), total, int(k), flips) for h, k in zip(hits, sizes, strict=True)]
    return np.asarray(holm(tails), dtype=np.float64), hits * total > flips * sizes


def _hits(groups: list[_Group], kind: str, names: tuple[str, ...], newly_wrong: np.ndarray) -> int:
    """How many flips fall in any of the groups ``names`` of ``kind``, each flip counted once."""
    union = np.logical_or.reduce([g.mask for g in groups if g.kind == kind and g.name in names])
    return int(newly_wrong[union].sum())


def _grown_cells(
    current: dict[str, Any], reference_prediction: np.ndarray
) -> list[tuple[str, str, int]]:
    """The off-diagonal confusion cells that grew most: (true, predicted, growth), largest first."""
    target = np.asarray(current["target"]).astype(str)
    now = Counter(zip(target, np.asarray(current["prediction"]).astype(str), strict=True))
    before = Counter(zip(target, np.asarray(reference_prediction).astype(str), strict=True))
    grown = [
        (count - before.get(cell, 0), cell)
        for cell, count in now.items()
        if cell[0] != cell[1] and count > before.get(cell, 0)
    ]
    grown.sort(key=lambda item: (-item[0], item[1]))
    return [(t, p, g) for g, (t, p) in grown[:MAX_CELLS]]


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
