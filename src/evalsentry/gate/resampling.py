"""Paired sign flips: one null distribution shared by every metric and slice of a comparison.

The gate compares two checkpoints on the same examples. Under the null hypothesis that the two
are exchangeable example by example, swapping their outputs on any subset of examples gives data
just as likely as what was observed. Each random swap pattern (a "sign flip" of every per-example
difference) gives every metric, in every slice, the values the two models would then have had.
All tests of one comparison see the *same* swaps, so their joint null distribution keeps the
metrics' correlation, which is what a Westfall-Young correction needs.

Every metric is a function of sums of per-example terms (see :mod:`evalsentry.gate.metrics`), so a
swap is linear: with ``s`` the 0/1 swap vector, the reference-like sums are ``base_ref + s @ D``
and the current-like ones ``base_cur - s @ D``, where ``D`` (current minus reference terms) is
zero on every example the two models treat alike. Only the examples that differ cost anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from evalsentry.gate.critical_cache import kept_swaps
from evalsentry.gate.metric_base import Metric
from evalsentry.sections import DEFAULT_SWAPS

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
Columns = Mapping[str, NDArray[Any]]

# Swaps are drawn in blocks of about this many (swap, example) cells: 8 MB whatever n is.
_BLOCK_CELLS = 1 << 20
# Moved examples x term columns up to this many cells (32 MB) form a dense matrix.
_DENSE_CELLS = 1 << 22


@dataclass(frozen=True)
class SwapValues:
    """Metric values of the reference-like and the current-like model, observed and swapped.

    Row 0 is the observed pair (nothing swapped); rows 1..R follow the random swaps. Columns
    follow the metrics given to :func:`swap_values`.

    Attributes:
        reference: Values of the model that is the reference where nothing is swapped.
        current: Values of the model that is the current one where nothing is swapped.
        n: Number of paired examples these values are over.

    """

    reference: FloatArray
    current: FloatArray
    n: int


def _check_pairs(ref_columns: Columns, cur_columns: Columns, names: Sequence[str]) -> int:
    lengths = {len(np.asarray(cols[name])) for cols in (ref_columns, cur_columns) for name in names}
    if len(lengths) != 1:
        raise ValueError(f"Reference and current columns differ in length: {sorted(lengths)}")
    both_labelled = "target" in ref_columns and "target" in cur_columns
    if both_labelled and not np.array_equal(ref_columns["target"], cur_columns["target"]):
        raise ValueError("Reference and current targets differ: not the same examples")
    return lengths.pop()


@dataclass(frozen=True)
class _Terms:
    """Every metric's per-example terms as global columns: ``(terms, 2n)`` keys and values.

    Rows ``0..n-1`` of each are the reference's examples, ``n..2n-1`` the current's; term ``j``
    of a metric owns the columns ``[start, stop)`` of its span, ``width`` columns in all.
    """

    columns: NDArray[np.intp]
    values: FloatArray
    width: int

    def sums(self, weights: FloatArray, part: slice) -> FloatArray:
        """Weighted column sums over the examples of ``part``, accumulated example by example."""
        cols = self.columns[:, part].T.ravel()  # example-major, as a sparse row product adds
        data = (self.values[:, part] * weights[None, :]).T.ravel()
        return np.bincount(cols, weights=data, minlength=self.width).astype(np.float64)


def _term_matrix(
    metrics: Sequence[Metric], columns: Columns, num_classes: int | None, n: int
) -> tuple[_Terms, list[list[tuple[int, int]]]]:
    """Both models' per-example terms (see :class:`_Terms`), and each metric's spans."""
    keys, data, spans = [], [], []
    width = 0
    for metric in metrics:
        own = []
        for term in metric.stats_fn(columns, num_classes):
            key = np.zeros(2 * n, np.intp) if term.key is None else np.asarray(term.key, np.intp)
            value = np.ones(2 * n) if term.value is None else np.asarray(term.value, np.float64)
            keys.append(key + width)
            data.append(value)
            own.append((width, width + term.n_keys))
            width += term.n_keys
        spans.append(own)
    return _Terms(np.stack(keys), np.stack(data), width), spans


def _moves(terms: _Terms, n: int) -> tuple[NDArray[np.intp], NDArray[np.intp], FloatArray]:
    """Current-minus-reference terms of the examples the two models treat apart.

    Returns ``(changed, columns, weights)``: the changed examples, and for each of them two
    entries per term (``(changed, 2 * terms)``, example-major): where both models' keys agree
    the difference of their values and a zero, else the current's value and minus the
    reference's. Nothing is changed where every entry is zero.
    """
    ref_cols, cur_cols = terms.columns[:, :n], terms.columns[:, n:]
    ref_vals, cur_vals = terms.values[:, :n], terms.values[:, n:]
    same = ref_cols == cur_cols
    first = np.where(same, cur_vals - ref_vals, cur_vals)
    second = np.where(same, 0.0, -ref_vals)
    changed = np.flatnonzero(((first != 0) | (second != 0)).any(axis=0))
    columns = np.stack([cur_cols[:, changed], ref_cols[:, changed]], axis=2)  # (terms, m, 2)
    weights = np.stack([first[:, changed], second[:, changed]], axis=2)
    entries = 2 * terms.columns.shape[0]
    return (
        changed,
        columns.transpose(1, 0, 2).reshape(changed.size, entries),
        weights.transpose(1, 0, 2).reshape(changed.size, entries),
    )


def _moved_matrix(columns: NDArray[np.intp], weights: FloatArray, width: int) -> Any:
    """The swapped examples' differences as a ``(examples, width)`` matrix.

    Dense (a BLAS product, and no scipy import on the gate's path) while it stays small;
    scipy's sparse matrix when many examples meet many columns (a many-class metric).
    """
    m = columns.shape[0]
    if m * width <= _DENSE_CELLS:
        flat = (np.arange(m, dtype=np.intp)[:, None] * width + columns).ravel()
        return np.bincount(flat, weights=weights.ravel(), minlength=m * width).reshape(m, width)
    from scipy import sparse

    rows = np.repeat(np.arange(m, dtype=np.intp), columns.shape[1])
    return sparse.csr_matrix((weights.ravel(), (rows, columns.ravel())), shape=(m, width))


def _reduce(
    metrics: Sequence[Metric], spans: list[list[tuple[int, int]]], sums: FloatArray, n: int
) -> FloatArray:
    """Metric values, one column per metric, from rows of term sums."""
    return np.stack(
        [
            metric.reduce_fn([sums[:, a:b] for a, b in own], n)
            for metric, own in zip(metrics, spans, strict=True)
        ],
        axis=1,
    )


def swap_values(
    metrics: Sequence[Metric],
    ref_columns: Columns,
    cur_columns: Columns,
    *,
    num_classes: int | None,
    masks: Sequence[BoolArray | None] = (None,),
    n_swaps: int = DEFAULT_SWAPS,
    seed: int = 0,
    clusters: NDArray[np.intp] | None = None,
) -> list[SwapValues]:
    """Every metric's values under ``n_swaps`` random per-example swaps, for each mask.

    The swaps are drawn once over all examples and shared by every mask (a slice sees the swaps
    of its own examples), so values of different metrics and slices are jointly distributed as
    the null hypothesis says.

    Args:
        metrics: The metrics to evaluate.
        ref_columns: Per-example columns of the reference model.
        cur_columns: Per-example columns of the current model, same examples and order.
        num_classes: Number of classes for classification metrics, else ``None``.
        masks: Row selectors, one result each; ``None`` selects every example.
        n_swaps: Number of random swap patterns (rows 1..R of each result).
        seed: Seed of the swaps; equal inputs and seed give equal values.
        clusters: Per example, its cluster: each swap then swaps whole clusters. ``None``:
            every example is its own cluster.

    Returns:
        One :class:`SwapValues` per mask, in order.

    Raises:
        ValueError: If the columns do not describe the same examples or a column is missing.

    """
    if n_swaps < 0:
        raise ValueError(f"n_swaps must be >= 0, got {n_swaps}")
    inputs = _Inputs(metrics, ref_columns, cur_columns, num_classes, masks, (n_swaps, seed), clusters)  # fmt: skip
    kept = kept_swaps(
        lambda: _key(inputs),
        lambda: _packed(_swapped(inputs)),
        lambda found: _sound(found, len(masks), n_swaps + 1, len(metrics)),
    )
    return [
        SwapValues(kept[f"reference{i}"], kept[f"current{i}"], int(kept[f"n{i}"]))
        for i in range(len(masks))
    ]


class _Inputs(NamedTuple):
    """What :func:`swap_values` is given; ``draws`` is ``(n_swaps, seed)``."""

    metrics: Sequence[Metric]
    ref_columns: Columns
    cur_columns: Columns
    num_classes: int | None
    masks: Sequence[BoolArray | None]
    draws: tuple[int, int]
    clusters: NDArray[np.intp] | None


def _swapped(inputs: _Inputs) -> list[SwapValues]:
    """:func:`swap_values`, computed."""
    metrics, ref_columns, cur_columns, num_classes, masks, draws, clusters = inputs
    n_swaps, seed = draws
    n, stacked = _stacked(metrics, ref_columns, cur_columns)
    terms, spans = _term_matrix(metrics, stacked, num_classes, n)
    moves = _moves(terms, n)
    selections = [np.ones(n, bool) if mask is None else np.asarray(mask, bool) for mask in masks]
    results = [
        _unswapped(metrics, spans, terms, select, moves[0], n_swaps) for select in selections
    ]
    if moves[0].size and n_swaps:
        owners = None if clusters is None else _owners(moves[0], clusters)
        _fill_swapped(results, metrics, spans, moves, terms.width, (n_swaps, seed), owners)
    return [SwapValues(m.reference, m.current, m.size) for m in results]


def _key(inputs: _Inputs) -> bytes | None:
    """Every input of :func:`swap_values` as bytes (None where a needed column is missing)."""
    metrics, ref_columns, cur_columns, num_classes, masks, draws, clusters = inputs
    names = sorted({name for metric in metrics for name in metric.required_columns})
    if any(name not in cols for cols in (ref_columns, cur_columns) for name in names):
        return None
    described = [
        (m.name, m.task, m.required_columns, _named(m.stats_fn), _named(m.reduce_fn))
        for m in metrics
    ]
    parts = [repr((described, num_classes, draws, names)).encode()]
    arrays = [cols[name] for cols in (ref_columns, cur_columns) for name in names]
    arrays += [np.ones(0, bool) if mask is None else mask for mask in masks]
    arrays.append(np.full(0, -1, np.intp) if clusters is None else clusters)
    for given in arrays:
        array = np.ascontiguousarray(given)
        parts += [repr((array.dtype.str, array.shape)).encode(), array.tobytes()]
    return b"\0".join(parts)


def _named(function: Any) -> str:
    return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', '')}"


def _packed(values: list[SwapValues]) -> dict[str, NDArray[Any]]:
    """Each mask's values as named arrays (``reference0``, ``current0``, ``n0``, ...)."""
    packed: dict[str, NDArray[Any]] = {}
    for i, value in enumerate(values):
        packed |= {f"reference{i}": value.reference, f"current{i}": value.current}
        packed[f"n{i}"] = np.asarray(value.n, np.int64)
    return packed


def _sound(found: dict[str, NDArray[Any]], masks: int, rows: int, metrics: int) -> bool:
    """Whether kept arrays are the values of ``masks`` masks: ``rows`` x ``metrics`` floats each."""
    for i in range(masks):
        values = [found.get(f"reference{i}"), found.get(f"current{i}")]
        count = found.get(f"n{i}")
        if count is None or count.shape != () or count.dtype != np.int64 or count < 0:
            return False
        if any(v is None or v.shape != (rows, metrics) or v.dtype != np.float64 for v in values):
            return False
    return len(found) == 3 * masks


def _owners(changed: NDArray[np.intp], clusters: NDArray[np.intp]) -> NDArray[np.intp]:
    """Per changed example, which swap decision moves it: its cluster's."""
    _, owner = np.unique(np.asarray(clusters, np.intp)[changed], return_inverse=True)
    return owner.ravel().astype(np.intp)


def _stacked(
    metrics: Sequence[Metric], ref_columns: Columns, cur_columns: Columns
) -> tuple[int, dict[str, NDArray[Any]]]:
    """The number of pairs, and each needed column: the reference's rows, then the current's."""
    names = sorted({name for metric in metrics for name in metric.required_columns})
    for columns in (ref_columns, cur_columns):
        missing = [name for name in names if name not in columns]
        if missing:
            raise ValueError(f"Metrics {[m.name for m in metrics]} need columns {missing}")
    n = _check_pairs(ref_columns, cur_columns, names)
    return n, {
        name: np.concatenate([np.asarray(ref_columns[name]), np.asarray(cur_columns[name])])
        for name in names
    }


@dataclass(frozen=True)
class _Masked:
    """One mask's share of the swaps: its unswapped sums and the value rows being filled."""

    inside: BoolArray  # which of the changed examples the mask selects
    base_ref: FloatArray
    base_cur: FloatArray
    size: int
    reference: FloatArray
    current: FloatArray


def _unswapped(
    metrics: Sequence[Metric],
    spans: list[list[tuple[int, int]]],
    terms: _Terms,
    select: BoolArray,
    changed: NDArray[np.intp],
    n_swaps: int,
) -> _Masked:
    """A mask's term sums with nothing swapped, and its value rows, each set to the observed."""
    n = len(select)
    size = int(select.sum())
    weights = select.astype(np.float64)
    base_ref = terms.sums(weights, slice(0, n))
    base_cur = terms.sums(weights, slice(n, 2 * n))
    ref_values = np.empty((n_swaps + 1, len(metrics)))
    cur_values = np.empty((n_swaps + 1, len(metrics)))
    ref_values[:] = _reduce(metrics, spans, base_ref[None, :], size)
    cur_values[:] = _reduce(metrics, spans, base_cur[None, :], size)
    return _Masked(select[changed], base_ref, base_cur, size, ref_values, cur_values)


def _fill_swapped(
    results: Sequence[_Masked],
    metrics: Sequence[Metric],
    spans: list[list[tuple[int, int]]],
    moves: tuple[NDArray[np.intp], NDArray[np.intp], FloatArray],
    width: int,
    draws: tuple[int, int],
    owners: NDArray[np.intp] | None,
) -> None:
    """Fill rows 1..``n_swaps`` of every mask's values, drawing the swaps block by block.

    ``draws`` is ``(n_swaps, seed)``; one fair decision is drawn per owner (a cluster: ``owners``
    says whose each changed example is; ``None``, each changed example its own) and moves every
    changed example it owns. Where the selection is everything, no copy of the draws is taken:
    those copies cost as much as the product itself.
    """
    changed, move_cols, move_weights = moves
    n_swaps, seed = draws
    rng = np.random.default_rng(seed)
    decisions = changed.size if owners is None else int(owners.max(initial=-1)) + 1
    block = max(1, _BLOCK_CELLS // max(decisions, width))  # the same draws as ever
    movers = {
        id(m.inside): _moved_matrix(move_cols[m.inside], move_weights[m.inside], width)
        for m in results
        if m.inside.any()
    }
    for begin in range(1, n_swaps + 1, block):
        rows = min(block, n_swaps + 1 - begin)
        # One random byte gives eight fair swap decisions.
        packed = rng.integers(0, 256, size=(rows, -(-decisions // 8)), dtype=np.uint8)
        swaps = np.unpackbits(packed, axis=1, count=decisions).astype(np.float64)
        if owners is not None:
            swaps = swaps[:, owners]
        for m in results:
            if not m.inside.any():
                continue
            mine = swaps if m.inside.all() else swaps[:, m.inside]
            shift = np.asarray(mine @ movers[id(m.inside)])
            m.reference[begin : begin + rows] = _reduce(
                metrics, spans, m.base_ref[None, :] + shift, m.size
            )
            m.current[begin : begin + rows] = _reduce(
                metrics, spans, m.base_cur[None, :] - shift, m.size
            )


def permutation_p_value(null_drops: FloatArray, observed: float) -> float:
    """The one-sided p-value of an observed drop against the swaps' drops.

    ``(1 + #{swapped drop >= observed}) / (R + 1)``, never 0 and exactly valid under
    exchangeability. A NaN drop counts as "at least as large", which keeps the test
    conservative; ties within 1e-12 relative count too; an observed NaN or infinity gives 1.
    """
    if not np.isfinite(observed):
        return 1.0
    drops = np.where(np.isnan(null_drops), np.inf, null_drops)
    slack = 1e-12 * max(1.0, abs(observed))
    return float((1 + np.count_nonzero(drops >= observed - slack)) / (null_drops.size + 1))


def permutation_p_values(null_drops: FloatArray, observed: float) -> tuple[float, FloatArray]:
    """One-sided p-values of a drop: the observed one and each swap's, from the swaps themselves.

    The observed p-value is :func:`permutation_p_value`. Each swap's own p-value (for the family
    correction) is the share of swaps whose drop is at least as large, NaN counted as larger.

    Args:
        null_drops: Drops under the R swaps, oriented so that positive means worse.
        observed: The observed drop.

    Returns:
        ``(p_observed, p_of_each_swap)``; with no swaps, ``(1.0, empty)``.

    """
    size = null_drops.size
    drops = np.where(np.isnan(null_drops), np.inf, null_drops)
    if not np.isfinite(observed):
        return 1.0, np.ones(size)
    own_slack = 1e-12 * np.maximum(1.0, np.abs(np.where(np.isfinite(drops), drops, 0.0)))
    at_least = size - np.searchsorted(np.sort(drops), drops - own_slack, side="left")
    return permutation_p_value(null_drops, observed), at_least / max(size, 1)
