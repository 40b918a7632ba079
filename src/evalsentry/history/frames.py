"""The history's rows as pandas frames: which rows are current, and the results view.

A re-run supersedes the rows it replaces (``superseded``); ``results_view`` is the one table
of a week's current results that the CLI, the reports and a DuckDB query all read the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from evalsentry.history.schema import (
    LINE_KEY,
    SCHEMAS,
)
from evalsentry.names import (
    CANDIDATE_CHECK,
)

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.history.store import History


#: The evaluation row's fields each of its metric rows carries (schema 2).
METRIC_OWNER = ("version", "stage", "kind")


def superseded(frame: pd.DataFrame) -> set[str]:
    """The ids of the evaluation rows of ``frame`` that are not current (the rule in ``evalsentry.history.store``'s docstring).

    ``frame`` must hold every row of the weeks, kinds and models it holds any row of: a row and
    the rows that replace it share those three.
    """
    listed = {str(i) for ids in frame["supersedes"].dropna() for i in ids}
    rest = frame[~frame["evaluation_id"].isin(listed)]
    lines = rest.assign(
        checkpoint=rest["checkpoint_sha256"].where(rest["kind"] == CANDIDATE_CHECK, "")
    )
    newest = lines.sort_values(
        ["started_at", "finished_at", "evaluation_id"], na_position="first"
    ).drop_duplicates(list(LINE_KEY), keep="last")
    return listed | (set(rest["evaluation_id"]) - set(newest["evaluation_id"]))


#: Integer columns that pandas reads as floats when they hold a null.
INTEGER_COLUMNS = frozenset(
    f.name for schema in SCHEMAS.values() for f in schema if pa.types.is_integer(f.type)
)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a history frame as dicts of plain values: None for null, ints as ints.

    What reports, artifacts and run names print (``digits@v2``, never ``v2.0`` or ``nan``).
    """
    plain: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    for row in plain:
        for column in INTEGER_COLUMNS.intersection(row):
            if row[column] is not None:
                row[column] = int(row[column])
    return plain


#: ``evalsentry history``'s columns, in order; the README's DuckDB query returns the same.
RESULTS_COLUMNS = (
    "week",
    "kind",
    "model",
    "version",
    "stage",
    "evalset",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "status",
    "error",
)


RESULTS_ORDER = ["week", "model", "evalset", "kind", "stage", "version", "metric"]


def results_view(
    history: History, evaluations: pd.DataFrame, metric: str | None = None
) -> pd.DataFrame:
    """``evaluations``' overall metrics, one row each, and one row per evaluation without any.

    What ``evalsentry history`` prints: a failed evaluation stays in view (its metric empty, its
    error given). Versions and counts are integers (null for a candidate file).
    """
    import pandas as pd

    columns = list(RESULTS_COLUMNS)
    if evaluations.empty:
        return pd.DataFrame(columns=columns)
    metrics = history.metrics(evaluations["evaluation_id"])
    metrics = metrics[metrics["slice"] == ""]
    if metric is not None:
        metrics = metrics[metrics["metric"] == metric]
    kept = ["evaluation_id", "metric", "value", "ci_low", "ci_high", "n"]
    joined = evaluations.merge(metrics[kept], on="evaluation_id", how="left")
    if metric is not None:  # the evaluations without a result stay; others without it go
        joined = joined[joined["metric"].notna() | (joined["status"] != "ok")]
    joined = joined[columns].astype({"version": "Int64", "n": "Int64"})
    return joined.sort_values(RESULTS_ORDER, na_position="last").reset_index(drop=True)


def pd_timestamp(value: Any) -> Any:
    """``value`` (a datetime, a pandas Timestamp or an ISO string) as a UTC pandas Timestamp."""
    import pandas as pd

    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
