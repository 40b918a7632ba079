"""Great Expectations integrity checks of an evaluation set's values.

GX only ever sees scalar columns: a tensor column is summarised per row (vector length,
NaN/inf count, minimum, maximum) with numpy over the Arrow buffer first, because handing GX a
column of arrays makes it pickle the whole frame (10x slower, twice the memory). Column types
are checked against the pinned Arrow schema by ``evalsets``, not by GX type expectations,
which misread pandas 3 dtypes. GX is imported lazily (4+ s) and each validation gets its own
ephemeral context, since contexts are not thread-safe.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from evalsentry.errors import EvalsetError
from evalsentry.evalsets.suite_shape import SUITE_FIX

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.evalsets.evalset import EvalsetSpec

log = logging.getLogger(__name__)

LENGTH, NONFINITE, ROW_MIN, ROW_MAX = "__len", "__nonfinite", "__min", "__max"
EXAMPLES_SHOWN = 5


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result in plain values."""

    expectation: str
    column: str | None
    success: bool
    observed: Any = None
    unexpected_count: int | None = None
    unexpected_examples: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class ValidationSummary:
    """A whole suite's result, ready for reports and the history."""

    success: bool
    evaluated: int
    failed: int
    outcomes: list[ExpectationOutcome]

    @property
    def failures(self) -> list[ExpectationOutcome]:
        """The expectations that failed."""
        return [o for o in self.outcomes if not o.success]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return json.loads(json.dumps(asdict(self), default=str))  # type: ignore[no-any-return]


def tensor_summaries(column: pa.ChunkedArray | pa.Array, name: str) -> dict[str, np.ndarray]:
    """Per-row length, NaN/inf count, minimum and maximum of a list column (``<name>__len`` etc.).

    A list of lists (a multiple-choice row's continuations) has its number of items as the
    length and the range of every value inside; a list of strings (a multi-label target) has
    its length only.
    """
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lengths = array.value_lengths().to_numpy(zero_copy_only=False)
    summaries = {name + LENGTH: np.nan_to_num(lengths, nan=-1).astype(np.int64)}
    values, rows = _leaves(array)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        return summaries
    n = len(array)
    flat = values.to_numpy(zero_copy_only=False).astype(np.float64)
    finite = np.isfinite(flat)
    nonfinite = np.bincount(rows, weights=~finite, minlength=n).astype(np.int64)
    row_min, row_max = np.full(n, np.nan), np.full(n, np.nan)
    kept, where = flat[finite], rows[finite]
    if kept.size:
        # Rows are in order, so each row's values are one run: reduce each run at its start.
        starts = np.flatnonzero(np.r_[True, where[1:] != where[:-1]])
        row_min[where[starts]] = np.minimum.reduceat(kept, starts)
        row_max[where[starts]] = np.maximum.reduceat(kept, starts)
    return summaries | {
        name + NONFINITE: nonfinite,
        name + ROW_MIN: row_min,
        name + ROW_MAX: row_max,
    }


def _leaves(array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The innermost values of a (nested) list array and the row each belongs to."""
    rows = np.arange(len(array))
    while (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or (pa.types.is_fixed_size_list(array.type))
    ):
        rows = rows[pc.list_parent_indices(array).to_numpy(zero_copy_only=False)]
        array = array.flatten()
    return array, rows


def validation_frame(table: pa.Table, summarised: str | Sequence[str] | None) -> pd.DataFrame:
    """The scalar view of an evalset that GX validates: its list columns become summaries.

    ``summarised``: the list columns the manifest names (a tensor column; token ids and
    continuations; a multi-label target), as ``list_columns`` gives them.
    """
    import pandas as pd

    names = {summarised} if isinstance(summarised, str) else set(summarised or ())
    data: dict[str, Any] = {}
    for name in table.column_names:
        if name in names:
            data.update(tensor_summaries(table.column(name), name))
        else:
            data[name] = table.column(name).to_pandas()
    return pd.DataFrame(data)


def list_columns(spec: EvalsetSpec) -> list[str]:
    """The list columns of an evalset that its suite sees as per-row summaries."""
    inputs = spec.inputs
    named = [inputs.column, inputs.tokens, inputs.choices]
    if spec.task == "multilabel":
        named.append(spec.target)
    return [c for c in dict.fromkeys(named) if c is not None]


def build_suite(
    frame: pd.DataFrame,
    *,
    name: str,
    id_column: str,
    target: str,
    task: str,
    classes: Sequence[Any] | None,
    tensor_column: str | None,
    tensor_size: int | None,
    feature_columns: Sequence[str],
    sequence_columns: Sequence[str] = (),
) -> dict[str, Any]:
    """Generate the expectation suite of a dataset being frozen, as GX's JSON document.

    Exact row count, ordered columns, no nulls, unique ids, labels equal to the class set (or
    the target's observed range for regression), observed ranges of numeric features, and for a
    tensor column: the vector length, no NaN/inf, the observed value range.
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe

    expectations: list[Any] = [
        gxe.ExpectTableRowCountToEqual(value=len(frame)),
        gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(frame.columns)),
        gxe.ExpectColumnValuesToBeUnique(column=id_column),
    ]
    expectations += [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in frame.columns]
    if task == "classification" and classes is not None:
        expectations.append(gxe.ExpectColumnValuesToBeInSet(column=target, value_set=list(classes)))
        expectations.append(
            gxe.ExpectColumnDistinctValuesToEqualSet(column=target, value_set=list(classes))
        )
    ranged = list(feature_columns) + ([target] if task == "regression" else [])
    for column in ranged:
        low, high = float(frame[column].min()), float(frame[column].max())
        expectations.append(
            gxe.ExpectColumnValuesToBeBetween(column=column, min_value=low, max_value=high)
        )
    if tensor_column is not None:
        expectations += [
            gxe.ExpectColumnValuesToBeBetween(
                column=tensor_column + LENGTH, min_value=tensor_size, max_value=tensor_size
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column=tensor_column + NONFINITE, min_value=0, max_value=0
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column=tensor_column + ROW_MIN,
                min_value=float(frame[tensor_column + ROW_MIN].min()),
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column=tensor_column + ROW_MAX,
                max_value=float(frame[tensor_column + ROW_MAX].max()),
            ),
        ]
    expectations += _sequence_expectations(frame, sequence_columns)
    suite = gx.ExpectationSuite(name=name, expectations=expectations)
    return suite.to_json_dict()  # type: ignore[no-any-return]


def _sequence_expectations(frame: pd.DataFrame, columns: Sequence[str]) -> list[Any]:
    """Each variable-length column's observed row lengths and value range, no NaN/inf."""
    import great_expectations.expectations as gxe

    expectations: list[Any] = []
    for column in columns:
        length = frame[column + LENGTH]
        expectations.append(
            gxe.ExpectColumnValuesToBeBetween(
                column=column + LENGTH, min_value=int(length.min()), max_value=int(length.max())
            )
        )
        if column + ROW_MIN not in frame:
            continue  # labels, not numbers
        expectations += [
            gxe.ExpectColumnValuesToBeBetween(column=column + NONFINITE, min_value=0, max_value=0),
            gxe.ExpectColumnValuesToBeBetween(
                column=column + ROW_MIN, min_value=float(frame[column + ROW_MIN].min())
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column=column + ROW_MAX, max_value=float(frame[column + ROW_MAX].max())
            ),
        ]
    return expectations


def run_suite(
    frame: pd.DataFrame, suite_document: Mapping[str, Any], source: str = "expectation suite"
) -> ValidationSummary:
    """Validate ``frame`` against a stored suite in a fresh ephemeral GX context.

    Args:
        source: the suite's file, named in errors.

    Raises:
        EvalsetError: GX cannot build an expectation of the suite (an unknown type, a missing
            or ill-typed argument); names ``source`` and the expectation.

    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    document = {k: v for k, v in suite_document.items() if k != "id"}
    _check_expectations(document.get("expectations"), source)

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    run_id = uuid.uuid4().hex[:8]
    batch = (
        context.data_sources.add_pandas(f"evalset-{run_id}")
        .add_dataframe_asset("frame")
        .add_batch_definition_whole_dataframe("whole")
    )
    try:
        suite = context.suites.add(gx.ExpectationSuite(**json.loads(json.dumps(document))))
    except (TypeError, ValueError) as exc:
        raise EvalsetError(
            f"{source}: not a suite Great Expectations can build ({_first_line(exc)}); {SUITE_FIX}"
        ) from None
    if len(suite.expectations) != len(document.get("expectations") or []):  # GX drops and logs
        raise EvalsetError(f"{source}: expectations: some cannot be built; {SUITE_FIX}")
    definition = gx.ValidationDefinition(name=f"validate-{run_id}", data=batch, suite=suite)
    result = definition.run(batch_parameters={"dataframe": frame}, result_format="SUMMARY")
    outcomes = [_outcome(r) for r in result.results]
    failed = sum(not o.success for o in outcomes)
    log.info("validated %d expectations, %d failed", len(outcomes), failed)
    return ValidationSummary(bool(result.success), len(outcomes), failed, outcomes)


def _check_expectations(expectations: object, source: str) -> None:
    """Build each expectation once, so that a bad one is named, not dropped with a log line.

    GX's suite constructor logs an unknown expectation type with a traceback and leaves it
    out, which would validate less than the suite says.
    """
    from great_expectations.exceptions import GreatExpectationsError
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    if not isinstance(expectations, list):
        raise EvalsetError(f"{source}: expectations: expected a list; {SUITE_FIX}")
    for index, entry in enumerate(expectations):
        kind = entry.get("type") if isinstance(entry, dict) else None
        try:
            if not isinstance(entry, dict):
                raise TypeError(f"expected an object, got {type(entry).__name__}")
            ExpectationConfiguration(**entry).to_domain_obj()
        except (TypeError, ValueError, GreatExpectationsError) as exc:
            raise EvalsetError(
                f"{source}: expectations.{index} ({kind}): {_expectation_problem(exc, entry)}; "
                f"{SUITE_FIX}"
            ) from None


def _expectation_problem(exc: Exception, entry: object) -> str:
    """A GX construction error as one short phrase: the field and what is wrong with it."""
    from great_expectations.exceptions import ExpectationNotFoundError

    cause = exc.__cause__ if exc.__cause__ is not None else exc
    fields = entry if isinstance(entry, dict) else {}
    if isinstance(cause, ExpectationNotFoundError):
        return f"unknown expectation type {fields.get('type')!r}"
    errors = getattr(cause, "errors", None)
    if callable(errors):  # GX's pydantic (v1) error over the expectation's fields
        first = errors()[0]
        loc = [str(p) for p in first.get("loc", ())]
        if loc and loc[0] not in fields:  # GX's model flattens the kwargs into its fields
            loc.insert(0, "kwargs")
        return f"{'.'.join(loc)}: {first.get('msg')}" if loc else str(first.get("msg"))
    return _first_line(cause)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _outcome(result: Any) -> ExpectationOutcome:
    config = result.expectation_config
    details = dict(result.result or {})
    observed = details.get("observed_value")
    return ExpectationOutcome(
        expectation=config.type,
        column=config.kwargs.get("column"),
        success=bool(result.success),
        observed=_plain(observed),
        unexpected_count=details.get("unexpected_count"),
        unexpected_examples=[_plain(v) for v in details.get("partial_unexpected_list", [])][
            :EXAMPLES_SHOWN
        ],
    )


def _plain(value: Any) -> Any:
    """Turn numpy scalars and containers into JSON-safe Python values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
