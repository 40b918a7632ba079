"""The history's ledger: an append-only record of every file the history published, and its hash.

Under the store root, ``ledger/`` holds one small Parquet file per commit: each row names a
history file (``metrics/...parquet``, ``predictions/<id>.parquet``), what happened to it
(``publish``, or ``remove`` when a compaction merged it away; ``adopt`` for the files of a
history written before the ledger existed), its sha256, its size, and on an object store its
ETag. A write commits by its ledger file, written last: a data file no ledger row publishes was
never committed, and no reader looks at it.

So the history knows what it published. A published file that is missing, or whose bytes are
not those published (a flipped byte, a file replaced by another), is refused by name on the read
that needs it, instead of shifting the gate's numbers or the week it calls the latest. Local
files are checked by their sha256 (once per process while their size and modification time
stay the same); objects in a store that gives ETags by theirs, without downloading them.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.errors import HistoryError
from evalsentry.storage import HASH_CHUNK, is_local, join, unique_name, write_atomic
from evalsentry.weeks import now_utc

LEDGER = "ledger"
PUBLISH, REMOVE, ADOPT = "publish", "remove", "adopt"
SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("run_id", pa.string()),
        ("action", pa.string()),
        ("file", pa.string()),  # relative to the store root: "<table>/<name>"
        ("sha256", pa.string()),
        ("size", pa.int64()),
        ("etag", pa.string()),
    ]
)


def _restore(path: str) -> str:
    return (
        f"restore it from a backup, or drop it from the history (`evalsentry history forget "
        f"{path}`: its rows leave the history) and run its week again"
    )


@dataclass(frozen=True)
class Published:
    """One file as the ledger records it."""

    file: str  # relative to the store root
    sha256: str
    size: int
    etag: str | None = None


def digest(data: bytes) -> str:
    """The sha256 the ledger records for ``data``."""
    return hashlib.sha256(data).hexdigest()


#: Local files already checked by this process: (path, size, mtime_ns) -> sha256 found.
_CHECKED: dict[tuple[str, int, int], str] = {}
_CHECKED_LOCK = threading.Lock()


class Ledger:
    """The ledger of the history at ``path`` in ``fs`` (``where`` names files in messages)."""

    def __init__(self, fs: Any, path: str, where: Any) -> None:
        self.fs, self.path, self._where = fs, path, where
        self._rows: dict[str, list[dict[str, Any]]] = {}  # each ledger file read: its rows
        self._live: dict[str, Published] = {}

    @property
    def folder(self) -> str:
        """The ledger's own folder."""
        return join(self.path, LEDGER)

    def exists(self) -> bool:
        """Whether this history keeps a ledger (any history written by this version does)."""
        return bool(self._ledger_files())

    def _ledger_files(self) -> list[str]:
        if not self.fs.exists(self.folder):
            return []
        return sorted(
            f
            for f in self.fs.ls(self.folder, detail=False)
            if not f.rsplit("/", 1)[-1].startswith((".", "_"))
        )

    def live(self) -> dict[str, Published]:
        """Every file published and not removed since, by its name relative to the store root.

        As of every ledger file there now: another process may have committed since the last
        look, so the folder is listed each time, new files are read, and the whole record is
        replayed in time order.
        """
        files = self._ledger_files()
        if set(files) == set(self._rows):
            return self._live
        self._rows = {f: self._rows[f] for f in files if f in self._rows}
        for file in files:
            if file not in self._rows:
                self._rows[file] = self._read(file)
        rows = sorted(
            (row for group in self._rows.values() for row in group),
            key=lambda row: row["recorded_at"],
        )
        live: dict[str, Published] = {}
        for row in rows:
            if row["action"] == REMOVE:
                live.pop(row["file"], None)
            else:
                live[row["file"]] = Published(row["file"], row["sha256"], row["size"], row["etag"])
        self._live = live
        return live

    def _read(self, file: str) -> list[dict[str, Any]]:
        try:
            with self.fs.open(file, "rb") as handle:
                # A few rows: read as one file, on this thread (a dataset's scan costs twice).
                table = pq.ParquetFile(handle).read(use_threads=False)
                if table.schema != SCHEMA:  # written by another version: read as it is now
                    handle.seek(0)
                    table = pq.read_table(handle, schema=SCHEMA)
                rows: list[dict[str, Any]] = table.to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise HistoryError(
                f"{self._where(file)}: damaged ledger file ({str(exc).splitlines()[0]}); "
                "restore it from a backup"
            ) from None
        return rows

    def files(self, table: str) -> list[str]:
        """The live files of ``table`` (full paths), sorted."""
        prefix = f"{table}/"
        return sorted(join(self.path, name) for name in self.live() if name.startswith(prefix))

    def entry(self, path: str) -> Published | None:
        """The ledger's row for a full ``path``, or None when it never published it."""
        return self.live().get(self._name(path))

    def _name(self, path: str) -> str:
        return path[len(self.path) :].lstrip("/")

    def published(self, path: str, data: bytes) -> Published:
        """What the ledger will record for ``data`` just written at ``path``."""
        etag = None
        if not is_local(self.fs):
            try:
                etag = self.fs.info(path).get("ETag")
            except OSError:
                etag = None
        return Published(self._name(path), digest(data), len(data), etag)

    def record(
        self,
        published: Sequence[Published],
        run_id: str,
        *,
        removed: Iterable[str] = (),
        adopted: Sequence[Published] = (),
    ) -> None:
        """Append one ledger file: the commit of ``published`` (and of ``removed`` paths).

        Raises:
            HistoryError: the ledger file cannot be written (the commit did not happen).
        """
        now = now_utc()
        rows = [
            {"action": action, "file": p.file, "sha256": p.sha256, "size": p.size, "etag": p.etag}
            for action, group in ((ADOPT, adopted), (PUBLISH, published))
            for p in group
        ]
        rows += [{"action": REMOVE, "file": self._name(path)} for path in removed]
        table = pa.table(
            {
                "schema_version": [1] * len(rows),
                "recorded_at": [now] * len(rows),
                "run_id": [run_id] * len(rows),
                **{name: [r.get(name) for r in rows] for name in SCHEMA.names[3:]},
            },
            schema=SCHEMA,
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        path = join(self.folder, unique_name(run_id or "ledger", ".parquet"))
        try:
            write_atomic(self.fs, path, buffer.getvalue(), exclusive=True)
        except OSError as exc:
            raise HistoryError(
                f"{self._where(path)}: cannot write the history's ledger "
                f"({exc.strerror or exc}); this run was not committed, earlier rows are intact"
            ) from None

    def verify(self, path: str) -> None:
        """Check that the published file at ``path`` is there and is what was published.

        Raises:
            HistoryError: naming the file: missing, or changed since it was published.
        """
        entry = self.entry(path)
        if entry is None:
            return
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            raise HistoryError(
                f"{self._where(path)}: missing: the history published it (sha256 "
                f"{entry.sha256[:12]}) and it is gone; {_restore(self._where(path))}"
            ) from None
        size = int(info.get("size") or 0)
        if entry.etag is not None and not is_local(self.fs):
            found = info.get("ETag")
            if found == entry.etag and size == entry.size:
                return
            self._changed(path, entry, f"ETag {found}")
        if size != entry.size:
            self._changed(path, entry, f"{size} bytes, published {entry.size}")
        found = self._sha256(path, info)
        if found != entry.sha256:
            self._changed(path, entry, f"sha256 {found[:12]}")

    def compact(self) -> int:
        """Merge the ledger's files into one (every row kept); the number merged.

        The merged file is written first and the small ones removed after, so a reader sees
        every row throughout (a row read twice changes nothing).
        """
        files = self._ledger_files()
        if len(files) < 2:
            return len(files)
        rows = [row for file in files for row in self._read(file)]
        table = pa.Table.from_pylist(rows, schema=SCHEMA).sort_by([("recorded_at", "ascending")])
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        target = join(self.folder, unique_name("compact", ".parquet"))
        write_atomic(self.fs, target, buffer.getvalue(), exclusive=True)
        for file in files:
            self.fs.rm_file(file)
        return len(files)

    def forget(self, path: str) -> Published:
        """Drop a published file from the history (its rows leave every view); the file stays.

        The way out when a file is damaged or lost and no backup has it; the ledger records it.

        Raises:
            HistoryError: the history never published ``path``.
        """
        entry = self.entry(path)
        if entry is None:
            raise HistoryError(
                f"{self._where(path)}: not a file the history published; nothing to forget"
            )
        self.record([], "forget", removed=[path])
        return entry

    def _changed(self, path: str, entry: Published, found: str) -> None:
        raise HistoryError(
            f"{self._where(path)}: changed since the history published it (sha256 "
            f"{entry.sha256[:12]} then, {found} now); {_restore(self._where(path))}"
        )

    def _sha256(self, path: str, info: dict[str, Any]) -> str:
        """The file's sha256, remembered by this process while its size and mtime hold."""
        mtime = info.get("mtime") or info.get("LastModified") or 0
        seconds = mtime.timestamp() if hasattr(mtime, "timestamp") else float(mtime)
        key = (path, int(info.get("size") or 0), int(seconds * 1e9))
        with _CHECKED_LOCK:
            known = _CHECKED.get(key)
        if known is not None:
            return known
        found = hashlib.sha256()
        with self.fs.open(path, "rb", block_size=HASH_CHUNK) as handle:
            while chunk := handle.read(HASH_CHUNK):
                found.update(chunk)
        value = found.hexdigest()
        with _CHECKED_LOCK:
            _CHECKED[key] = value
        return value
