"""Files on a local path or any fsspec URL, written so that a reader never sees half a file.

Local files are written to a temporary name in the same folder and then renamed (or hard-linked,
when the name must not exist yet), which POSIX makes atomic. Object stores (``s3://`` and the
like) publish an object only when its upload completes, so a plain write is already atomic
there, with no rename; a name that must not exist yet is claimed with a conditional write
(``If-None-Match: *`` on S3), so two writers never both get it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from evalsentry.local_files import LocalFiles, strip

HASH_CHUNK = 4 * 1024 * 1024  # large reads keep hashing near hashlib's own throughput


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for ``url`` and the path within it.

    A plain path on a POSIX system is the local disk (:class:`~evalsentry.local_files.LocalFiles`:
    fsspec is not imported for it); a URL, or a Windows path, is fsspec's, its listings not
    cached across calls (other processes write to the same store).
    """
    if os.sep == "/" and "://" not in url and "::" not in url:
        return LocalFiles(), strip(url)
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, use_listings_cache=False)
    return fs, path


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is the local filesystem (where rename and link are atomic)."""
    if isinstance(fs, LocalFiles):
        return True
    local = sys.modules.get("fsspec.implementations.local")  # not imported: fs is not one
    return local is not None and isinstance(fs, local.LocalFileSystem)


def for_arrow(fs: Any) -> Any:
    """The filesystem to hand pyarrow for ``fs``: None (its own native one) for the local disk."""
    return None if isinstance(fs, LocalFiles) else fs


def join(*parts: str) -> str:
    """Join path segments with ``/`` (fsspec paths use forward slashes everywhere)."""
    return "/".join(p.rstrip("/") for p in parts if p)


def blocking_file(fs: Any, path: str) -> str | None:
    """The file standing where ``path`` or one of its parent folders should be, else None.

    ``None`` means ``path`` is a folder or can be made one. Only local paths are checked: an
    object store has no folders, so no object there blocks a prefix. Nothing is created.
    """
    if not is_local(fs):
        return None
    try:
        for candidate in (Path(path), *Path(path).parents):
            # One stat says both whether it exists and what it is: another writer may create
            # the folder between two separate looks, which must not read as a file in the way.
            try:
                mode = candidate.stat().st_mode
            except (FileNotFoundError, NotADirectoryError):  # absent, or under a file
                if candidate.is_symlink():  # a dangling link
                    return str(candidate)
                continue
            return None if stat.S_ISDIR(mode) else str(candidate)
    except OSError:  # not allowed to look: the write itself will say why it fails
        return None
    return None


def process_umask() -> int:
    """The process's file-mode creation mask, read without changing it.

    Linux shows it in ``/proc/self/status``; elsewhere it is read by setting and restoring it,
    under a lock (the mask is process-wide: another thread must never create a file under 0).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def shared_mode(*, folder: bool = False) -> int:
    """The mode a plain ``open``/``mkdir`` would give a new file (folder) under the umask.

    ``tempfile`` creates private files (0600) and folders (0700); what evalsentry publishes is
    for the team (a shared store, a worker running as another user), so it gets this instead.
    """
    return (0o777 if folder else 0o666) & ~process_umask()


def write_atomic(fs: Any, path: str, data: bytes, *, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` so readers see the old file, or the whole new one.

    A new local file gets the mode the process umask gives a plain write (0644 under 0022); a
    replaced one keeps its own.

    Args:
        exclusive: fail (return ``False``) instead of replacing an existing file. Two writers
            racing for the same name: exactly one gets ``True``.

    Returns:
        ``True`` when written, ``False`` only when ``exclusive`` and the name was taken.

    """
    if not is_local(fs):
        if not exclusive:
            fs.pipe_file(path, data)
            return True
        try:
            # Object stores with conditional writes (S3's If-None-Match) create exclusively.
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        except TypeError:  # a backend without exclusive create: check, then write
            if fs.exists(path):
                return False
            fs.pipe_file(path, data)
        return True
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), _mode_for(target, exclusive=exclusive))
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            try:
                os.link(tmp, target)
            except FileExistsError:
                return False
        else:
            Path(tmp).replace(target)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def _mode_for(target: Path, *, exclusive: bool) -> int:
    """A replaced file keeps its mode; a new one gets the umask's (``shared_mode``)."""
    if not exclusive:
        try:
            return stat.S_IMODE(target.stat().st_mode)
        except OSError:  # absent (or unreadable): a new file
            pass
    return shared_mode()


def probe_writable(fs: Any, folder: str) -> str | None:
    """Why no file can be written in ``folder`` (made as needed), or None when one can.

    A write that would fail after the work (a week's evaluations, a rendered report) is found
    before it, by writing and removing an empty hidden file.
    """
    probe = f"{folder.rstrip('/')}/.evalsentry-probe-{uuid.uuid4().hex}"
    made = _missing_folders(fs, folder)
    try:
        write_atomic(fs, probe, b"")
        fs.rm_file(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        for path in made:  # leave no folder behind that did not exist: nothing half-made
            with contextlib.suppress(OSError):
                Path(path).rmdir()
    return None


def _missing_folders(fs: Any, folder: str) -> list[Path]:
    """The local folders a write into ``folder`` would create, deepest first."""
    if not is_local(fs):
        return []
    missing = []
    for candidate in (Path(folder), *Path(folder).parents):
        if candidate.exists():
            break
        missing.append(candidate)
    return missing


def check_path_text(path: str | Path) -> str:
    """``path`` as text every record can hold; a name that is not valid UTF-8 is refused.

    Such a name (bytes a UTF-8 filesystem cannot decode) would be written into the registry and
    the history, and break every later read of them.

    Raises:
        CheckpointError: naming the file (its undecodable bytes escaped) and the fix.
    """
    from evalsentry.errors import CheckpointError

    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")  # the bytes, \xNN
        raise CheckpointError(
            shown, "the file name is not valid UTF-8 text; rename the file (or its folder)"
        ) from None
    return text


def unique_name(prefix: str, suffix: str) -> str:
    """A file name no other writer will choose: ``prefix-<uuid4 hex>suffix``."""
    return f"{prefix}-{uuid.uuid4().hex}{suffix}"


def sha256_file(path: str | Path, fs: Any = None) -> tuple[str, int]:
    """Stream a file through sha256.

    Returns:
        The hex digest and the size in bytes.

    """
    digest = hashlib.sha256()
    size = 0
    if fs is None or is_local(fs):
        buffer = bytearray(HASH_CHUNK)
        view = memoryview(buffer)
        with open(path, "rb", buffering=0) as handle:
            while n := handle.readinto(buffer):
                digest.update(view[:n])
                size += n
        return digest.hexdigest(), size
    with fs.open(str(path), "rb", block_size=HASH_CHUNK) as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
