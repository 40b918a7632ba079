"""The local disk, through the part of fsspec's filesystem interface evalsentry reads it with.

Importing fsspec costs a CI command 30-50 ms (it scans every installed package's entry points,
and imports asyncio and its compression codecs) for files the standard library reads as well.
:class:`LocalFiles` answers a local path as fsspec's ``LocalFileSystem`` does, the same names,
shapes and errors; anything it does not define (``glob``, ``find``, ...) goes to a real
``LocalFileSystem``, made when first asked for.
"""

from __future__ import annotations

import os
import stat
from functools import cached_property
from pathlib import Path
from typing import IO, Any

_PREFIXES = ("file://", "local://", "file:", "local:")


def strip(path: str | os.PathLike[str]) -> str:
    """``path`` as fsspec's local filesystem names it: absolute, ``/``-separated, no trailing ``/``."""
    text = os.fspath(path)
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text.removeprefix(prefix)
            break
    if text.startswith("~"):
        text = str(Path(text).expanduser())
    elif not text.startswith("/"):
        text = text.removeprefix("./") if text != "." else ""
        text = f"{Path.cwd()}/{text}"
    return text.rstrip("/") or "/"


def _kind(folder: bool, file: bool) -> str:
    return "directory" if folder else "file" if file else "other"


class LocalFiles:
    """A local filesystem with fsspec's ``LocalFileSystem`` interface, without importing fsspec."""

    protocol = ("file", "local")
    local_file = True

    def info(self, path: str | os.DirEntry[str]) -> dict[str, Any]:
        """Name, size, type, times and mode of ``path``, as fsspec gives them.

        A link's size (and, named by a path, its type and mode) are its target's; a listed
        entry that is a link is of type "other".
        """
        if isinstance(path, os.DirEntry):
            found = path.stat(follow_symlinks=False)
            link = path.is_symlink()
            kind = _kind(path.is_dir(follow_symlinks=False), path.is_file(follow_symlinks=False))
            size = found.st_size
            if link:
                try:
                    size = path.stat(follow_symlinks=True).st_size
                except OSError:  # a dangling link
                    size = 0
            name = strip(path.path)
        else:
            name = strip(path)
            found = Path(name).stat(follow_symlinks=False)
            link = stat.S_ISLNK(found.st_mode)
            if link:
                found = Path(name).stat()
            size = found.st_size
            kind = _kind(stat.S_ISDIR(found.st_mode), stat.S_ISREG(found.st_mode))
        result: dict[str, Any] = {
            "name": name,
            "size": size,
            "type": kind,
            "created": getattr(found, "st_birthtime", found.st_ctime),
            "islink": link,
        }
        for field in ("mode", "uid", "gid", "mtime", "ino", "nlink"):
            result[field] = getattr(found, f"st_{field}")
        if link:
            result["destination"] = str(Path(name).readlink())
        return result

    def exists(self, path: str) -> bool:
        """Whether ``path`` names something (a dangling link does not)."""
        try:
            self.info(path)
        except Exception:  # noqa: BLE001 - fsspec's answer to any failure to look
            return False
        return True

    def isfile(self, path: str) -> bool:
        """Whether ``path`` is a file (or a link to one)."""
        return Path(strip(path)).is_file()

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a folder (or a link to one)."""
        return Path(strip(path)).is_dir()

    def ls(self, path: str, detail: bool = False) -> list[Any]:
        """The entries of a folder (a file: itself), as names or, with ``detail``, infos."""
        found = self.info(path)
        if found["type"] != "directory":
            return [found if detail else found["name"]]
        entries: list[Any] = []
        with os.scandir(found["name"]) as listing:
            for entry in listing:
                try:
                    entries.append(self.info(entry) if detail else strip(entry.path))
                except FileNotFoundError:  # removed while listed
                    continue
        return entries

    def open(self, path: str, mode: str = "rb", **_options: Any) -> IO[Any]:
        """The file, opened as Python opens it (fsspec's block sizes mean nothing on a disk)."""
        return Path(strip(path)).open(mode)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The file's bytes, or those from ``start`` to ``end`` (negative: from the end)."""
        with Path(strip(path)).open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if start is not None:
                handle.seek(start if start >= 0 else max(0, size + start))
            if end is None:
                return handle.read()
            return handle.read((end if end >= 0 else size + end) - handle.tell())

    def rm_file(self, path: str) -> None:
        """Remove the file ``path``."""
        Path(strip(path)).unlink()

    def unstrip_protocol(self, name: str) -> str:
        """``name`` as a URL: ``file://`` and its absolute path."""
        return f"file://{strip(name)}"

    @cached_property
    def _fsspec(self) -> Any:
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem()

    def __getattr__(self, name: str) -> Any:
        """What is not defined here, from fsspec's own local filesystem."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._fsspec, name)
