"""What each example's answer is, per task, as the arrays inference compares outputs to.

- classification, multiple choice: the index of the label in ``classes`` (multiple choice: of
  the true continuation among the row's choices), int64;
- regression: float32;
- multi-label: a bool ``[N, L]`` matrix, ``L = len(classes)``, True where the label applies;
- language modelling: the first scored position of each row (int64). The target column is
  either the token column itself (every token after the first is scored) or an integer column
  giving the length of a prompt that is not scored; a row cut on the left loses that many
  prompt tokens first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from evalsentry.errors import EvalsetError

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import EvalsetSpec

#: Multi-label targets and predictions are stored as bit masks in one int64 per example.
MAX_LABELS = 62


def targets_array(table: pa.Table, spec: EvalsetSpec, where: str) -> np.ndarray:
    """The targets of ``table`` for ``spec``'s task (``where``: the manifest errors name)."""
    column = table.column(spec.target)
    if spec.task in ("classification", "multiple_choice") and spec.classes is not None:
        return _label_indices(column.to_pylist(), spec.classes, where)
    if spec.task == "multiple_choice":
        return np.asarray(column.to_numpy(), dtype=np.int64)
    if spec.task == "multilabel":
        return label_matrix(column, list(spec.classes or []), where)
    if spec.task == "language_modeling":
        return _scored_from(table, spec)
    return np.asarray(column.to_numpy(), dtype=np.float32)


def _label_indices(labels: list[Any], classes: list[Any], where: str) -> np.ndarray:
    index: dict[Any, int] = {c: i for i, c in enumerate(classes)}
    unknown = sorted({str(v) for v in labels if v not in index})
    if unknown:
        raise EvalsetError(
            f"{where}: classes: labels {', '.join(unknown[:5])} in the data "
            "are not among the classes; restore the frozen class list"
        )
    return np.array([index[v] for v in labels], dtype=np.int64)


def label_matrix(column: pa.ChunkedArray | pa.Array, classes: list[Any], where: str) -> np.ndarray:
    """A list column of labels as a bool ``[N, L]`` matrix over ``classes``."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rows = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
    flat = array.flatten().to_pylist()
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted({str(v) for v in flat if v not in index})
    if unknown:
        raise EvalsetError(
            f"{where}: classes: labels {', '.join(unknown[:5])} in the data are not among "
            "the classes; restore the frozen class list"
        )
    matrix = np.zeros((len(array), len(classes)), dtype=np.bool_)
    matrix[rows, [index[v] for v in flat]] = True
    return matrix


def _scored_from(table: pa.Table, spec: EvalsetSpec) -> np.ndarray:
    inputs = spec.inputs
    lengths = pc.list_value_length(table.column(str(inputs.tokens))).to_numpy(zero_copy_only=False)
    if spec.target == inputs.tokens:
        first = np.ones(len(lengths), np.int64)
    else:
        first = np.maximum(table.column(spec.target).to_numpy().astype(np.int64), 1)
    if inputs.truncation == "left":
        cut = np.maximum(lengths - int(inputs.max_length or 0), 0)
        first = np.maximum(first - cut, 1)
    return first


def natural_key(label: object) -> tuple[tuple[tuple[int, int | str], ...], str]:
    """Sort key of natural order: the numbers inside a string compared as numbers.

    Ties (``'01'`` and ``'1'``) fall back to the text, so the order never depends on the data's.
    """
    if isinstance(label, int):
        return ((0, label),), ""
    parts = re.split(r"([0-9]+)", str(label))  # ASCII digits: int() reads every such run
    return tuple((0, int(p)) if p[0] in "0123456789" else (1, p) for p in parts if p), str(label)
