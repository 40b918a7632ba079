"""The history's tables and their Arrow schemas (schema version 2), and the rows they accept.

Each table is a folder of Parquet files under the store: ``evaluations``, ``metrics``,
``comparisons``, ``drift`` (and ``predictions/<evaluation_id>.parquet``, ``baselines``). A row
is written with exactly its table's schema; a field the schema lacks is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from evalsentry.errors import HistoryError

if TYPE_CHECKING:
    pass


SCHEMA_VERSION = 2


EVALUATIONS, METRICS, COMPARISONS, PREDICTIONS, BASELINES = (
    "evaluations",
    "metrics",
    "comparisons",
    "predictions",
    "baselines",
)


COMPACT_ROW_GROUP = 100_000  # small enough for min/max statistics to skip most of a large file


#: The columns naming one result of a line in a week: of its rows not listed in a ``supersedes``,
#: only the newest is current (a re-run; two runs racing; files written before schema 2). A
#: candidate check's line is its file: two files checked in one week are two results.
LINE_KEY = ("week", "kind", "model", "stage", "evalset", "checkpoint")


_TS = pa.timestamp("us", tz="UTC")


#: What a Parquet reader raises on a damaged or foreign file: arrow's own errors, or I/O.
_UNREADABLE = (pa.ArrowException, OSError)


_MOVE_ASIDE = "move the damaged file aside (every file is independent: the rest reads without it)"


_FIX_STORE = "point `store:` in evalsentry.yaml at a folder, or move the file aside"


EVALUATIONS_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("evaluation_id", pa.string()),
        ("run_id", pa.string()),
        ("week", pa.string()),
        ("kind", pa.string()),
        ("started_at", _TS),
        ("finished_at", _TS),
        ("status", pa.string()),
        ("error", pa.string()),
        ("model", pa.string()),
        ("version", pa.int64()),
        ("stage", pa.string()),
        ("checkpoint_sha256", pa.string()),
        ("checkpoint_uri", pa.string()),
        ("git_sha", pa.string()),
        ("git_dirty", pa.bool_()),
        ("data_sha", pa.string()),
        ("config_json", pa.string()),
        ("seed", pa.int64()),
        ("trained_at", pa.string()),
        ("evalset", pa.string()),
        ("evalset_version", pa.int64()),
        ("evalset_sha256", pa.string()),
        ("n_examples", pa.int64()),
        ("device", pa.string()),
        ("device_name", pa.string()),
        ("torch_version", pa.string()),
        ("python_version", pa.string()),
        ("cuda_version", pa.string()),
        ("driver_version", pa.string()),
        ("evalsentry_version", pa.string()),
        ("precision", pa.string()),
        ("batch_size", pa.int64()),
        ("wall_s", pa.float64()),
        ("inference_s", pa.float64()),
        ("examples_per_s", pa.float64()),
        ("energy_kwh", pa.float64()),
        ("co2_kg", pa.float64()),
        ("cost", pa.float64()),
        ("currency", pa.string()),
        ("energy_method", pa.string()),
        ("validation_json", pa.string()),
        # Schema 2: the ids of the rows this row's run found outdated (see the module's docstring).
        ("supersedes", pa.list_(pa.string())),
        # Schema 2, with imported harness results: the tokens the harness recorded (else null).
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
    ]
)


METRICS_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("evaluation_id", pa.string()),
        ("week", pa.string()),
        ("model", pa.string()),
        ("evalset", pa.string()),
        ("metric", pa.string()),
        ("slice", pa.string()),
        ("value", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("n", pa.int64()),
        ("higher_is_better", pa.bool_()),
        # Schema 2: copied from the evaluation row, so a metric row says whose it is on its own.
        ("version", pa.int64()),
        ("stage", pa.string()),
        ("kind", pa.string()),
    ]
)


COMPARISONS_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("run_id", pa.string()),
        ("created_at", _TS),
        ("evaluation_id", pa.string()),
        ("week", pa.string()),
        ("model", pa.string()),
        ("version", pa.int64()),
        ("evalset", pa.string()),
        ("reference", pa.string()),
        ("reference_evaluation_id", pa.string()),
        ("reference_week", pa.string()),
        ("reference_version", pa.int64()),
        ("metric", pa.string()),
        ("slice", pa.string()),
        ("gating", pa.bool_()),
        ("reference_value", pa.float64()),
        ("value", pa.float64()),
        ("delta", pa.float64()),
        ("drop", pa.float64()),
        ("tolerance", pa.float64()),
        ("p_value", pa.float64()),
        ("p_adjusted", pa.float64()),
        ("method", pa.string()),
        ("newly_wrong", pa.int64()),
        ("newly_right", pa.int64()),
        ("n", pa.int64()),
        ("verdict", pa.string()),
        ("reason", pa.string()),
        # Added with INCONCLUSIVE; files written before read them as null.
        ("drop_bound", pa.float64()),
        ("detectable_drop", pa.float64()),
        ("flip_delta", pa.float64()),
        # Schema 2: whose verdict it is, so "what did CI say about this file" is one query.
        ("kind", pa.string()),
        ("stage", pa.string()),
        ("checkpoint_sha256", pa.string()),
        # Schema 2, with the margin test: "unresolved" or "possible-regression" (INCONCLUSIVE).
        ("inconclusive_kind", pa.string()),
    ]
)


DRIFT = "drift"


DRIFT_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("run_id", pa.string()),
        ("week", pa.string()),
        ("evalset", pa.string()),
        ("feature", pa.string()),
        ("kind", pa.string()),
        ("model", pa.string()),
        ("psi", pa.float64()),
        ("statistic", pa.float64()),
        ("p_value", pa.float64()),
        ("p_adjusted", pa.float64()),
        ("n_reference", pa.int64()),
        ("n_live", pa.int64()),
        ("verdict", pa.string()),
        # Schema 2: why a model's prediction drift was not measured (it hung on live data).
        ("reason", pa.string()),
    ]
)


SCHEMAS = {
    EVALUATIONS: EVALUATIONS_SCHEMA,
    METRICS: METRICS_SCHEMA,
    COMPARISONS: COMPARISONS_SCHEMA,
    DRIFT: DRIFT_SCHEMA,
}


def _table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows as a table of exactly ``schema``; missing fields are null, extra ones refused."""
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise HistoryError(f"unknown history columns {sorted(extra)}")
    data = {
        field.name: [
            SCHEMA_VERSION if field.name == "schema_version" else row.get(field.name)
            for row in rows
        ]
        for field in schema
    }
    return pa.table(data, schema=schema)


def _reason(exc: BaseException) -> str:
    """The first sentence of a reader's error, without arrow's echo of the file's name."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^Could not open Parquet input source '[^']*': ", "", text)
    return text.split(". ")[0].rstrip(".")


def _all(conditions: list[Any]) -> Any:
    if not conditions:
        return None
    combined = conditions[0]
    for condition in conditions[1:]:
        combined = combined & condition
    return combined
