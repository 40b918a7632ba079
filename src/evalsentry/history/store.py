"""The Parquet metric history under the store root (a local path or any fsspec URL).

Tables (each a folder of Parquet files, readable by pandas, pyarrow datasets and DuckDB):

- ``evaluations/``: one row per checkpoint x evalset x run (lineage, environment, cost, status).
- ``metrics/``: long format, one row per evaluation x metric x slice (value, CI, n).
- ``comparisons/``: the gate's verdicts, one row per evaluation x reference x metric x slice.
- ``drift/``: live-data drift, one row per week x evalset x feature (or model's predictions).
- ``predictions/<evaluation_id>.parquet``: per-example outputs, for paired comparisons.
- ``baselines/<model>.json``: a pinned baseline week, when one is set.

An evaluation row's ``kind`` says which run recorded it (``names.WEEKLY_RUN`` or
``names.CANDIDATE_CHECK``); its ``stage`` is the checkpoint's registry stage (``names.STAGES``).

Older files read as they are: a column they lack reads as null. Files of a newer schema are
refused with a message to upgrade.

Every write creates new files only, each published atomically, and an evaluation's rows are
committed by writing its ``evaluations`` file last: metrics or predictions without their
evaluation row are never read.

A re-run supersedes earlier results without touching their files (they stay for audit). The
current rows are what :func:`superseded` leaves, by a rule a raw reader applies as well (the
README gives it for DuckDB and pandas):

1. every row listed in some row's ``supersedes`` is outdated: each run lists, when it publishes,
   the rows it replaces (:meth:`History.supersedes`: a rollback's other version, a promoted
   line's stale candidate result, a line-level ERROR);
2. of the rest, the newest (``started_at``) of each ``LINE_KEY`` is current: the same line
   evaluated again (a re-run, two runs racing, rows written before schema 2 listed nothing).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.errors import HistoryError
from evalsentry.history.compaction import Compaction
from evalsentry.history.frames import (
    METRIC_OWNER,
    pd_timestamp,
    superseded,
)
from evalsentry.history.ledger import Published
from evalsentry.history.schema import (
    _UNREADABLE,
    BASELINES,
    COMPARISONS,
    COMPARISONS_SCHEMA,
    DRIFT,
    DRIFT_SCHEMA,
    EVALUATIONS,
    EVALUATIONS_SCHEMA,
    METRICS,
    METRICS_SCHEMA,
    PREDICTIONS,
    SCHEMA_VERSION,
    _all,
    _reason,
    _table,
)
from evalsentry.names import (
    CANDIDATE_CHECK,
    NO_EVALSET,
    WEEKLY_RUN,
    WEEKLY_STAGES,
    RunKind,
    check_name,
)
from evalsentry.storage import (
    join,
    write_atomic,
)
from evalsentry.weeks import check_week, now_utc, weeks_in_order

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


class History(Compaction):
    """Read and append the metric history under ``root``."""

    def append(
        self,
        evaluations: Sequence[Mapping[str, Any]],
        metrics: Sequence[Mapping[str, Any]] = (),
        predictions: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        *,
        stages: Collection[str] = WEEKLY_STAGES,
        retire: Sequence[str] = (),
    ) -> None:
        """Append one run's rows: predictions, metrics, evaluations, then the committing ledger file.

        Each evaluation row gets its ``supersedes`` (for a weekly run evaluating ``stages``) and
        each metric row its evaluation's version, stage and kind; ``retire`` (rows of lines the
        run's week no longer has) is listed by the first row. A crash before the ledger file
        leaves files no reader looks at; a crash during a write leaves only a hidden temporary
        file.
        """
        if not evaluations:
            return
        evaluations, metrics, predictions = _recordable(evaluations, metrics, predictions or {})
        run_id = str(evaluations[0]["run_id"])
        outdated = self.supersedes(evaluations, stages)
        outdated[0] = [*outdated[0], *(i for i in retire if i not in outdated[0])]
        rows = [{**row, "supersedes": ids} for row, ids in zip(evaluations, outdated, strict=True)]
        owner = {str(row["evaluation_id"]): row for row in evaluations}
        metrics = [
            {**{k: owner[str(m["evaluation_id"])].get(k) for k in METRIC_OWNER}, **m}
            for m in metrics
        ]
        published = [
            self.write_predictions(evaluation_id, columns)
            for evaluation_id, columns in (predictions or {}).items()
        ]
        if metrics:
            published.append(self._publish(METRICS, _table(metrics, METRICS_SCHEMA), run_id))
        published.append(self._publish(EVALUATIONS, _table(rows, EVALUATIONS_SCHEMA), run_id))
        self._commit(published, run_id)
        log.info(
            "history: appended %d evaluation(s), %d metric row(s)", len(evaluations), len(metrics)
        )

    def supersedes(
        self, rows: Sequence[Mapping[str, Any]], stages: Collection[str] = WEEKLY_STAGES
    ) -> list[list[str]]:
        """For each new evaluation row, the current rows of other runs it makes outdated.

        The rule, within one week and kind, for rows of other runs that started earlier:

        - a weekly run's result of a model on an evalset replaces that model's results on that
          evalset of every stage the run evaluates (``stages``): a rollback or a promotion
          leaves one current result per line, not one per version;
        - a model line's ERROR on no evalset (``NO_EVALSET``: it was bound to none) replaces
          every result of that model, and any result of it replaces such an ERROR;
        - a candidate check replaces an earlier check of the same file on the same evalset.

        A row that another run's newer row already replaces lists its own id: whichever of
        two racing runs publishes second settles it.
        """
        weeks = sorted({str(row["week"]) for row in rows})
        current = self.evaluations(weeks=weeks)
        out: list[list[str]] = []
        for row in rows:
            same = current[
                (current["week"] == row["week"])
                & (current["kind"] == row["kind"])
                & (current["model"] == row["model"])
                & (current["run_id"] != row["run_id"])
            ]
            if row["kind"] == CANDIDATE_CHECK:
                same = same[
                    (same["evalset"] == row["evalset"])
                    & (same["checkpoint_sha256"] == row["checkpoint_sha256"])
                ]
            else:
                line = same[
                    (same["evalset"] == row["evalset"])
                    | (same["evalset"] == NO_EVALSET)
                    | (row["evalset"] == NO_EVALSET)
                ]
                same = line[line["stage"].isin([*stages, row["stage"]])]
            started = pd_timestamp(row["started_at"])
            ids = same.loc[same["started_at"] < started, "evaluation_id"].tolist()
            newer = same[(same["started_at"] >= started) & (same["stage"] == row["stage"])]
            if not newer.empty:
                ids.append(str(row["evaluation_id"]))
            out.append([str(i) for i in ids])
        return out

    def write_predictions(self, evaluation_id: str, columns: Mapping[str, np.ndarray]) -> Published:
        """Write one evaluation's per-example outputs (committed by the caller's ledger file)."""
        check_name("evaluation id", evaluation_id)
        return self._write(
            join(self.path, PREDICTIONS, f"{evaluation_id}.parquet"),
            pa.table({name: _column(values) for name, values in columns.items()}),
        )

    def append_comparisons(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store the gate's verdicts for audit and reports."""
        if rows:
            run_id = str(rows[0]["run_id"])
            table = _table(rows, COMPARISONS_SCHEMA)
            self._commit([self._publish(COMPARISONS, table, run_id)], run_id)

    def append_drift(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store live-data drift results."""
        if rows:
            run_id = str(rows[0]["run_id"])
            self._commit([self._publish(DRIFT, _table(rows, DRIFT_SCHEMA), run_id)], run_id)

    def drift(self, weeks: Iterable[str] | None = None) -> pd.DataFrame:
        """Drift results, newest run per week."""
        import pyarrow.compute as pc

        filter_ = pc.field("week").isin(_strings(weeks)) if weeks is not None else None
        frame = self._read(DRIFT, filter_).to_pandas()
        if frame.empty:
            return frame
        latest = frame.groupby("week")["run_id"].transform("last")
        return frame[frame["run_id"] == latest].reset_index(drop=True)

    def set_baseline(self, model: str, week: str) -> None:
        """Pin ``week`` as the baseline of ``model``'s production line.

        Raises:
            HistoryError: the week holds no successful production result of ``model``.
        """
        check_name("model", model)
        check_week(week)
        rows = self.evaluations(model=model, weeks=[week], kind=WEEKLY_RUN)
        if rows[(rows["status"] == "ok") & (rows["stage"] == "production")].empty:
            held = (
                f"it holds only {', '.join(sorted({f'{r.stage} {r.status}' for r in rows.itertuples()}))} rows"
                if not rows.empty
                else "it holds no evaluation of it"
            )
            raise HistoryError(
                f"no production result of {model!r} recorded in week {week} ({held}); a "
                "baseline is a production result: pin a week that has one"
            )
        document = {"model": model, "week": week, "set_at": now_utc().isoformat(timespec="seconds")}
        path = join(self.path, BASELINES, f"{model}.json")
        try:
            write_atomic(self.fs, path, json.dumps(document).encode())
        except OSError as exc:
            raise HistoryError(
                f"{self._where(path)}: cannot write the baseline ({exc.strerror or exc}); "
                "the baseline is unchanged"
            ) from None

    # --- reading ------------------------------------------------------------------------------

    def evaluations(
        self,
        *,
        model: str | None = None,
        evalset: str | None = None,
        weeks: Iterable[str] | None = None,
        kind: RunKind | None = None,
        include_superseded: bool = False,
    ) -> pd.DataFrame:
        """Evaluation rows: the current ones (see the module's docstring) unless ``include_superseded``."""
        import pyarrow.compute as pc

        # A row and the rows that supersede it share week, kind and model (never always the
        # evalset: a line's ERROR on no evalset supersedes its rows on each), so the read is
        # filtered by those and the evalset chosen after the rule is applied.
        conditions = []
        if model is not None:
            conditions.append(pc.field("model") == model)
        if weeks is not None:
            conditions.append(pc.field("week").isin(_strings(weeks)))
        if kind is not None:
            conditions.append(pc.field("kind") == kind)
        filter_ = _all(conditions)
        frame = self._read(EVALUATIONS, filter_).to_pandas()
        newest = frame["schema_version"].max() if not frame.empty else SCHEMA_VERSION
        if newest > SCHEMA_VERSION:
            raise HistoryError(
                f"{join(self.path, EVALUATIONS)}: schema_version: written by a newer evalsentry "
                f"(schema {newest}, this one reads up to {SCHEMA_VERSION}); upgrade evalsentry"
            )
        frame = frame.drop_duplicates("evaluation_id")  # see `metrics`
        if not include_superseded and not frame.empty:
            frame = frame[~frame["evaluation_id"].isin(superseded(frame))]
        if evalset is not None:
            frame = frame[frame["evalset"] == evalset]
        return frame.sort_values(["week", "finished_at"]).reset_index(drop=True)

    def metrics(self, evaluation_ids: Iterable[str]) -> pd.DataFrame:
        """Metric rows of the given evaluations."""
        import pyarrow.compute as pc

        ids = list(evaluation_ids)
        frame = self._read(METRICS, pc.field("evaluation_id").isin(_strings(ids))).to_pandas()
        # A compaction caught half-way leaves rows in both the old and the new file.
        return frame.drop_duplicates(["evaluation_id", "metric", "slice"]).reset_index(drop=True)

    def comparisons(self, evaluation_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The gate's stored verdicts: of each evaluation, all those of its newest gate run.

        The newest run is that of the evaluation's newest row (``created_at``); a run records
        some verdicts before others (paired timing's as it measures, the rest when it gates).
        """
        import pyarrow.compute as pc

        filter_ = (
            pc.field("evaluation_id").isin(_strings(evaluation_ids))
            if evaluation_ids is not None
            else None
        )
        frame = self._read(COMPARISONS, filter_).to_pandas()
        if frame.empty:
            return frame
        newest = frame.sort_values("created_at").groupby("evaluation_id")["run_id"].last()
        return frame[frame["run_id"] == frame["evaluation_id"].map(newest)].reset_index(drop=True)

    def predictions(self, evaluation_id: str) -> dict[str, np.ndarray] | None:
        """Per-example outputs of one evaluation, or None when they were never stored."""
        check_name("evaluation id", evaluation_id)
        path = join(self.path, PREDICTIONS, f"{evaluation_id}.parquet")
        if self.ledger.exists():
            if self.ledger.entry(path) is None:
                return None  # never published (or its run never committed)
            self.ledger.verify(path)  # missing or changed since published: refused by name
        elif not self.fs.exists(path):
            return None
        try:
            with self.fs.open(path, "rb") as handle:
                table = pq.ParquetFile(handle).read()  # one file: no dataset scan (half the time)
        except _UNREADABLE as exc:
            raise HistoryError(
                f"{self._where(path)}: damaged predictions file ({_reason(exc)}); move the "
                "damaged file aside and re-run that evaluation's week (until then the gate "
                "calls it not comparable)"
            ) from None
        return {name: _array(table.column(name)) for name in table.column_names}

    def baseline(self, model: str, weeks: Iterable[object]) -> tuple[str | None, bool]:
        """The baseline week of ``model`` and whether it is pinned.

        The one rule: the pinned week (``evalsentry baseline set``), else the first of ``weeks``
        (the line's recorded weeks, compared as dates); None when there is neither.
        """
        pinned = self.baseline_week(model)
        if pinned is not None:
            return pinned, True
        ordered = weeks_in_order(weeks)
        return (ordered[0] if ordered else None), False

    def baseline_week(self, model: str) -> str | None:
        """The pinned baseline week of ``model``, or None."""
        path = join(self.path, BASELINES, f"{check_name('model', model)}.json")
        if not self.fs.exists(path):
            return None
        try:
            return check_week(json.loads(self.fs.cat_file(path))["week"])
        except (ValueError, KeyError, TypeError) as exc:
            raise HistoryError(
                f"{path}: week: malformed baseline document ({exc}); set it again"
            ) from None


#: What an evaluation row the history cannot hold keeps, as its pair's ERROR row.
_IDENTITY = (
    "evaluation_id",
    "run_id",
    "week",
    "kind",
    "started_at",
    "finished_at",
    "model",
    "version",
    "stage",
    "checkpoint_uri",
    "checkpoint_sha256",
    "evalset",
    "evalset_version",
    "evalset_sha256",
    "evalsentry_version",
)


def _recordable(
    rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, Mapping[str, np.ndarray]],
) -> tuple[list[dict[str, Any]], list[Mapping[str, Any]], dict[str, Mapping[str, np.ndarray]]]:
    """The run's rows as the history can hold them: one it cannot is its pair's ERROR row.

    A value of the wrong type (a lineage written by other code: a seed that is text, a git sha
    that is a number) would stop the whole run's write; it stops only its own pair, whose
    results are left out and whose row says which field could not be stored.
    """
    try:
        _table(rows, EVALUATIONS_SCHEMA)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass  # find the rows that cannot be held, below
    else:
        return [dict(row) for row in rows], list(metrics), dict(predictions)
    kept: list[dict[str, Any]] = []
    dropped: set[str] = set()
    for row in rows:
        problem = _unstorable(row, EVALUATIONS_SCHEMA)
        if problem is None:
            kept.append(dict(row))
            continue
        dropped.add(str(row["evaluation_id"]))
        log.warning(
            "%s %s: not recorded as it was: %s", row.get("model"), row.get("version"), problem
        )
        kept.append(
            {
                **{k: row.get(k) for k in _IDENTITY},
                "status": "error",
                "error": f"could not be recorded: {problem}",
            }
        )
    return (
        kept,
        [m for m in metrics if str(m["evaluation_id"]) not in dropped],
        {k: v for k, v in predictions.items() if k not in dropped},
    )


def _unstorable(row: Mapping[str, Any], schema: pa.Schema) -> str | None:
    """The first field of ``row`` the history's column cannot hold, and why; None when all fit."""
    for name, value in row.items():
        if name not in schema.names or value is None:
            continue
        try:
            pa.array([value], type=schema.field(name).type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            text = repr(value)
            text = text if len(text) <= 60 else text[:59] + "…"
            return f"{name}: {type(value).__name__} {text} is not {schema.field(name).type}"
    return None


def _strings(values: Iterable[str]) -> Any:
    """``values`` as an Arrow string array: an empty list is a string filter too, not null."""
    import pyarrow as pa

    return pa.array([str(v) for v in values], type=pa.string())


def _column(values: np.ndarray) -> pa.Array:
    """A predictions column: one value per example, or (a 2-D array) one fixed-size list each."""
    if values.ndim == 2:
        flat = pa.array(np.ascontiguousarray(values).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
    return pa.array(values)


def _array(column: pa.ChunkedArray) -> np.ndarray:
    """A stored predictions column as written: a fixed-size list column as a 2-D array."""
    if pa.types.is_fixed_size_list(column.type):
        flat = np.asarray(column.combine_chunks().flatten().to_numpy(zero_copy_only=False))
        return flat.reshape(len(column), column.type.list_size)
    return np.asarray(column.to_numpy(zero_copy_only=False))
