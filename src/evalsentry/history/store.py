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

import io
import json
import logging
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.errors import HistoryError
from evalsentry.history.ledger import Ledger, Published
from evalsentry.names import (
    CANDIDATE_CHECK,
    NO_EVALSET,
    WEEKLY_RUN,
    WEEKLY_STAGES,
    RunKind,
    check_name,
)
from evalsentry.storage import (
    blocking_file,
    filesystem,
    is_local,
    join,
    probe_writable,
    unique_name,
    write_atomic,
)
from evalsentry.weeks import check_week, now_utc, weeks_in_order

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

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


class History:
    """Read and append the metric history under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fs, self.path = filesystem(root)
        self.ledger = Ledger(self.fs, self.path, self._where)

    def check_root(self) -> None:
        """Refuse a store whose root is not a folder and cannot become one (a file in the way).

        Cheap and without side effects (it creates nothing, and checks nothing on an object
        store, which has no folders): call it before any inference, so that a ``store:`` naming
        a file fails in seconds, not after the week's evaluations.

        Raises:
            HistoryError: naming the store and the file in the way.

        """
        problem = self._root_problem()
        if problem:
            raise HistoryError(f"{self.root}: {problem}; {_FIX_STORE}")

    def check_writable(self) -> None:
        """Refuse a store that cannot be written, before any work is done.

        What ``check_root`` refuses, and a folder the process may not write in (a read-only
        mount, another user's folder). Writes and removes an empty hidden file (and makes the
        store's folder if needed).

        Raises:
            HistoryError: naming the store, why, and the fix.
        """
        self.check_root()
        problem = probe_writable(self.fs, self.path)
        if problem:
            raise HistoryError(
                f"{self.root}: cannot write to the store ({problem}); make it writable, or "
                f"point `store:` in evalsentry.yaml at a folder you can write to"
            )

    def _root_problem(self) -> str | None:
        blocker = blocking_file(self.fs, self.path)
        if blocker is None:
            return None
        if Path(blocker) == Path(self.path):
            return "the store is a file, not a folder"
        return f"the store cannot be a folder: {blocker} is a file"

    def _where(self, path: str) -> str:
        """``path`` as a person finds it: the URL on an object store, the path on a disk."""
        return path if is_local(self.fs) else str(self.fs.unstrip_protocol(path))

    # --- writing ------------------------------------------------------------------------------

    def _write(self, path: str, table: pa.Table) -> Published:
        """Publish ``table`` at the new name ``path``; what the ledger will record of it."""
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        data = buffer.getvalue()
        try:
            if write_atomic(self.fs, path, data, exclusive=True):
                return self.ledger.published(path, data)
            # The name is taken. A retry of this very write (a task retried after a later step
            # failed) finds its own file: the same bytes, already done. Anything else under
            # the name is refused, never replaced.
            if self.fs.cat_file(path) == data:
                return self.ledger.published(path, data)
            raise HistoryError(
                f"{self._where(path)}: already holds other content; this run was not committed, "
                "earlier rows are intact"
            )
        except OSError as exc:
            problem = self._root_problem()
            if problem:  # name the store, the thing to fix, not the file under it
                raise HistoryError(
                    f"{self.root}: cannot write the history: {problem}; {_FIX_STORE}; "
                    "this run was not committed"
                ) from None
            raise HistoryError(
                f"{self._where(path)}: cannot write the history ({exc.strerror or exc}); "
                "this run was not committed, earlier rows are intact"
            ) from None

    def _publish(self, table_name: str, table: pa.Table, stem: str) -> Published:
        return self._write(join(self.path, table_name, unique_name(stem, ".parquet")), table)

    def _commit(
        self, published: Sequence[Published], run_id: str, removed: Sequence[str] = ()
    ) -> None:
        """Commit written files with one ledger file; a history without a ledger adopts its files.

        Adoption records every file an earlier evalsentry published, as it is now, so that from
        then on a missing or changed one is found.
        """
        adopted = [] if self.ledger.exists() else self._adoptable()
        self.ledger.record(published, run_id, removed=removed, adopted=adopted)

    def _adoptable(self) -> list[Published]:
        """The files of a history written before the ledger existed (each one hashed)."""
        found = []
        for table in (*SCHEMAS, PREDICTIONS):
            folder = join(self.path, table)
            if not self.fs.exists(folder):
                continue
            for path in self._folder_files(folder):
                found.append(self.ledger.published(path, self.fs.cat_file(path)))
        return found

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
            join(self.path, PREDICTIONS, f"{evaluation_id}.parquet"), pa.table(dict(columns))
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

        filter_ = pc.field("week").isin(list(weeks)) if weeks is not None else None
        frame = self._read(DRIFT, filter_).to_pandas()
        if frame.empty:
            return frame
        latest = frame.groupby("week")["run_id"].transform("last")
        return frame[frame["run_id"] == latest].reset_index(drop=True)

    def compact(self, table_name: str) -> tuple[int, int]:
        """Merge a table's files into one, sorted for pruning; return (files merged, rows).

        Every file is read and checked first; a damaged one, or one written by a newer
        evalsentry (columns this one would drop), stops the compaction before anything is
        written. The merged file is published and its row count checked before the small ones
        are removed, so a reader sees every row throughout (duplicates in between are dropped
        when read). Rows are never dropped: superseded runs stay for audit. Run it from one
        place at a time (a maintenance job).

        Raises:
            HistoryError: naming the file that stops it; every file is then kept as it was.

        """
        if table_name not in SCHEMAS:
            raise HistoryError(
                f"cannot compact {table_name!r}: use {EVALUATIONS}, {METRICS}, {COMPARISONS} or {DRIFT}"
            )
        self.check_writable()
        folder = join(self.path, table_name)
        files = self._files(folder)
        if len(files) < 2:
            return len(files), 0
        for file in files:  # a file not as published is never merged into the new one
            try:
                self.ledger.verify(file)
            except HistoryError as exc:
                raise HistoryError(f"{exc}; the table was not compacted") from None
        schema = SCHEMAS[table_name]
        rows = self._rows_to_compact(files, schema)
        table = self._merged(files, folder, schema)
        target, data = self._write_merged(folder, table, rows)
        # The ledger says it first: the merged file is published, the small ones removed. A
        # crash after it leaves files no reader looks at; before it, the small ones stay live.
        self._commit([self.ledger.published(target, data)], "compact", removed=files)
        self._remove_merged(files)
        log.info("compacted %s: %d files, %d rows", table_name, len(files), len(table))
        return len(files), len(table)

    def _merged(self, files: Sequence[str], folder: str, schema: pa.Schema) -> pa.Table:
        """The rows of ``files`` as one table, sorted for pruning; none from a newer evalsentry."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        try:
            table = ds.dataset(
                files, format="parquet", filesystem=self.fs, schema=schema
            ).to_table()
        except _UNREADABLE as exc:
            file, reason = self._first_unreadable(files, schema) or (folder, _reason(exc))
            raise self._not_compacted(file, reason) from None
        newest = pc.max(table["schema_version"]).as_py()
        if newest is not None and newest > SCHEMA_VERSION:
            raise HistoryError(
                f"{self._where(folder)}: schema_version: written by a newer evalsentry (schema "
                f"{newest}); upgrade evalsentry to compact it (the table was not compacted)"
            )
        # Sorted by evaluation id, each row group covers a narrow id range, so the gate's
        # `evaluation_id in (...)` filter skips nearly every row group by its statistics.
        order = "evaluation_id" if "evaluation_id" in table.column_names else "week"
        return table.sort_by([(order, "ascending")])

    def _write_merged(self, folder: str, table: pa.Table, rows: int) -> tuple[str, bytes]:
        """Write the merged file beside the small ones; return its path and bytes.

        Its row count is checked against ``rows`` (the small files'): a merged file that lacks
        any is removed again, and the small ones are kept.
        """
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd", row_group_size=COMPACT_ROW_GROUP)
        target = join(folder, unique_name("compact", ".parquet"))
        data = buffer.getvalue()
        try:
            write_atomic(self.fs, target, data, exclusive=True)
            written = self._metadata(target).num_rows
        except _UNREADABLE as exc:
            raise HistoryError(
                f"{self._where(target)}: cannot write the compacted file ({_reason(exc)}); "
                "the table was not compacted, each of its files is kept"
            ) from None
        if written != rows or len(table) != rows:  # never remove what the merged file lacks
            self.fs.rm_file(target)
            raise HistoryError(
                f"{self._where(folder)}: the merged file holds {written} rows, the files {rows}; "
                "the table was not compacted, each of its files is kept"
            )
        return target, data

    def _rows_to_compact(self, files: Sequence[str], schema: pa.Schema) -> int:
        """The rows in ``files``, after checking each one's footer and columns."""
        rows = 0
        for file in files:
            try:
                metadata = self._metadata(file)
            except _UNREADABLE as exc:
                raise self._not_compacted(file, exc) from None
            unknown = sorted(set(metadata.schema.to_arrow_schema().names) - set(schema.names))
            if unknown:  # a merge into this schema would drop them
                raise HistoryError(
                    f"{self._where(file)}: columns {', '.join(unknown)} were written by a newer "
                    "evalsentry; upgrade evalsentry to compact them (the table was not compacted)"
                )
            rows += metadata.num_rows
        return rows

    def _remove_merged(self, files: Sequence[str]) -> None:
        for file in files:
            try:
                self.fs.rm_file(file)
            except FileNotFoundError:  # another compaction removed it first
                continue
            except OSError as exc:  # its rows are in the merged file too: say what is left
                raise HistoryError(
                    f"{self._where(file)}: merged, but cannot be removed ({exc.strerror or exc}); "
                    "remove it by hand"
                ) from None

    def _not_compacted(self, file: str, reason: BaseException | str) -> HistoryError:
        text = reason if isinstance(reason, str) else _reason(reason)
        return HistoryError(
            f"{self._where(file)}: damaged history file ({text}); the table was not compacted, "
            "each of its files is kept; move the damaged file aside, then compact again"
        )

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

    def _read(
        self, table_name: str, filter_: Any = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        import pyarrow.dataset as ds

        folder = join(self.path, table_name)
        schema = SCHEMAS[table_name]
        if self.ledger.exists():
            # What the history published, each file checked: a missing or changed one is
            # refused by name, never read around.
            source: Any = self.ledger.files(table_name)
            for file in source:
                self.ledger.verify(file)
            if not source:
                return schema.empty_table()
        elif not self.fs.exists(folder):
            self.check_root()  # a store that is a file reads as empty; say so instead
            return schema.empty_table()
        else:
            source = folder  # a history written before the ledger: every file in the folder
        try:
            dataset = ds.dataset(source, format="parquet", filesystem=self.fs, schema=schema)
            return dataset.to_table(filter=filter_, columns=list(columns) if columns else None)
        except _UNREADABLE as exc:
            if self.fs.isfile(folder):
                raise HistoryError(
                    f"{self._where(folder)}: a file stands where the history's {table_name}/ "
                    "folder should be; move it aside"
                ) from None
            file, reason = self._first_unreadable(self._files(folder), schema) or (
                folder,
                _reason(exc),
            )
            raise HistoryError(
                f"{self._where(file)}: damaged history file ({reason}); {_MOVE_ASIDE}, then re-run"
            ) from None

    def _files(self, folder: str) -> list[str]:
        """The table's data files: the ledger's live ones, else every file of its folder."""
        if self.ledger.exists():
            return self.ledger.files(folder.rsplit("/", 1)[-1])
        if not self.fs.exists(folder):
            return []
        return self._folder_files(folder)

    def _folder_files(self, folder: str) -> list[str]:
        """Every data file in ``folder``: what a dataset reads (hidden and ``_`` names are not)."""
        return sorted(
            f
            for f in self.fs.ls(folder, detail=False)
            if not f.rsplit("/", 1)[-1].startswith((".", "_"))
        )

    def _metadata(self, file: str) -> pq.FileMetaData:
        with self.fs.open(file, "rb") as handle:
            return pq.read_metadata(handle)

    def _first_unreadable(self, files: Sequence[str], schema: pa.Schema) -> tuple[str, str] | None:
        """The first file that cannot be read as ``schema``, and why; None when all can.

        Only after a read failed: footers first (a truncated file), then each file in full.
        """
        import pyarrow.dataset as ds

        for file in files:
            try:
                self._metadata(file)
            except _UNREADABLE as exc:
                return file, _reason(exc)
        for file in files:
            try:
                ds.dataset([file], format="parquet", filesystem=self.fs, schema=schema).to_table()
            except _UNREADABLE as exc:
                return file, _reason(exc)
        return None

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
            conditions.append(pc.field("week").isin(list(weeks)))
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
        frame = self._read(METRICS, pc.field("evaluation_id").isin(ids)).to_pandas()
        # A compaction caught half-way leaves rows in both the old and the new file.
        return frame.drop_duplicates(["evaluation_id", "metric", "slice"]).reset_index(drop=True)

    def comparisons(self, evaluation_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The gate's stored verdicts (newest gate run per evaluation)."""
        import pyarrow.compute as pc

        filter_ = (
            pc.field("evaluation_id").isin(list(evaluation_ids))
            if evaluation_ids is not None
            else None
        )
        frame = self._read(COMPARISONS, filter_).to_pandas()
        if frame.empty:
            return frame
        latest = frame.groupby("evaluation_id")["created_at"].transform("max")
        return frame[frame["created_at"] == latest].reset_index(drop=True)

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
                table = pq.read_table(handle)
        except _UNREADABLE as exc:
            raise HistoryError(
                f"{self._where(path)}: damaged predictions file ({_reason(exc)}); move the "
                "damaged file aside and re-run that evaluation's week (until then the gate "
                "calls it not comparable)"
            ) from None
        return {
            name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names
        }

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


#: The evaluation row's fields each of its metric rows carries (schema 2).
METRIC_OWNER = ("version", "stage", "kind")


def superseded(frame: pd.DataFrame) -> set[str]:
    """The ids of the evaluation rows of ``frame`` that are not current (the module's rule).

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
