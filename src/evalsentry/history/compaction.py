"""Compaction: a table's many small files merged into one, published through the ledger.

Each week's writes add small files; ``History.compact`` (``evalsentry history compact``) checks
every file of a table first, merges them into one sorted for pruning, publishes the merge
through the ledger, then removes the merged files: a reader never sees a row twice or not at all.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.errors import HistoryError
from evalsentry.history.files import HistoryFiles
from evalsentry.history.schema import (
    _UNREADABLE,
    COMPACT_ROW_GROUP,
    COMPARISONS,
    DRIFT,
    EVALUATIONS,
    METRICS,
    SCHEMA_VERSION,
    SCHEMAS,
    _reason,
)
from evalsentry.storage import (
    for_arrow,
    join,
    unique_name,
    write_atomic,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


class Compaction(HistoryFiles):
    """``History``'s compaction of a table's files."""

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
                files, format="parquet", filesystem=for_arrow(self.fs), schema=schema
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
