"""Slices: the evalset's columns a metric is also computed over, one value at a time.

Metrics are computed overall (the slice named ``OVERALL``) and per value of every slice
column; an evaluation's slice columns are named ``SLICE_PREFIX`` + the evalset's slice name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

OVERALL = ""
SLICE_PREFIX = "slice:"


def slice_column(name: str) -> str:
    """The evaluation column holding the values of the evalset's slice ``name``."""
    return SLICE_PREFIX + name


def slice_columns(columns: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    """The slices among an evaluation's columns, by slice name, in name order."""
    return {
        column.removeprefix(SLICE_PREFIX): columns[column]
        for column in sorted(columns)
        if column.startswith(SLICE_PREFIX)
    }


def slice_masks(slices: Mapping[str, Any]) -> list[tuple[str, NDArray[np.bool_]]]:
    """``(name=value, mask)`` for every value of every slice: the rows each slice value selects."""
    masks = []
    for name, raw in slices.items():
        labels = np.asarray(raw).astype(str)
        masks += [(f"{name}={v}", labels == v) for v in sorted(set(labels.tolist()))]
    return masks
