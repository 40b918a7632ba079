"""The history's files: where they live, how one is written and published, how a table is read.

``HistoryFiles`` is the part of ``History`` that knows files, not rows: the store's root (local
or fsspec), atomic writes published through the ledger (``evalsentry.history.ledger``), and
reading a table's published files with a damaged one refused by name.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.errors import HistoryError
from evalsentry.history.ledger import Ledger, Published
from evalsentry.history.schema import (
    _FIX_STORE,
    _MOVE_ASIDE,
    _UNREADABLE,
    PREDICTIONS,
    SCHEMAS,
    _reason,
)
from evalsentry.storage import (
    blocking_file,
    filesystem,
    for_arrow,
    is_local,
    join,
    probe_writable,
    unique_name,
    write_atomic,
)

if TYPE_CHECKING:
    pass


class HistoryFiles:
    """The store's files: root checks, atomic writes published through the ledger, reads."""

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
            dataset = ds.dataset(
                source, format="parquet", filesystem=for_arrow(self.fs), schema=schema
            )
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
                ds.dataset(
                    [file], format="parquet", filesystem=for_arrow(self.fs), schema=schema
                ).to_table()
            except _UNREADABLE as exc:
                return file, _reason(exc)
        return None
