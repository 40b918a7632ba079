"""Reading a checkpoint's bytes: bounded, hashed once, and never run.

One read of the file fills a buffer that is both hashed and loaded (``snapshot``); a
``torch.save`` archive's declared sizes are checked before anything is inflated
(``check_archive``); the payload is read with ``torch.load(weights_only=True)``, or with the
``safetensors`` library for such a file (``read_payload``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle  # nosec B403 - only to recognise UnpicklingError; nothing is unpickled here
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from evalsentry.checkpoints.safetensors_file import (
    is_safetensors,
    read_safetensors,
)
from evalsentry.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointTooLarge,
    UnknownLayout,
    UnsafeCheckpoint,
)
from evalsentry.storage import HASH_CHUNK
from evalsentry.trust import DEFAULT_MAX_CHECKPOINT_BYTES

STATE_KEY = "model_state_dict"


def check_archive(
    path: str | os.PathLike[str], max_bytes: int, source: IO[bytes] | None = None
) -> None:
    """Refuse a checkpoint larger than ``max_bytes``, on disk or once inflated, before reading it.

    ``torch.save`` writes a zip archive; the uncompressed sizes its central directory declares
    are added up without inflating anything (torch reads each entry into a buffer of its
    declared size, so they bound what reading allocates). Other files are refused: the legacy
    format declares its tensors' sizes inside the pickle, where they cannot be checked first.

    Args:
        path: the file, named in refusals (and read, unless ``source`` is given).
        max_bytes: the limit.
        source: the file's bytes already read (``snapshot``): what is checked is what loads.

    Raises:
        CheckpointTooLarge: the file or its inflated entries exceed ``max_bytes``.
        CheckpointCorrupt: not a readable zip archive.

    """
    file = Path(path)
    size = file.stat().st_size if source is None else source.seek(0, io.SEEK_END)
    if size > max_bytes:
        raise CheckpointTooLarge(file, "the file is", size, max_bytes)
    try:
        with zipfile.ZipFile(source if source is not None else file) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise CheckpointCorrupt(
            file, f"not the zip archive torch.save writes: {_first_line(exc)}"
        ) from None
    if any(_is_export_member(info.filename) for info in infos):
        raise UnsafeCheckpoint(
            file,
            "a torch.export program (.pt2): torch.export.load runs code from such files, "
            "see README, Security",
        )
    inflated = sum(info.file_size for info in infos)
    if inflated > max_bytes:
        raise CheckpointTooLarge(file, "its archive inflates to", inflated, max_bytes)


#: Checkpoints up to this size are read into memory once; larger ones are copied, once, to a
#: private file: either way the bytes hashed are the bytes loaded.
IN_MEMORY_BYTES = 256 * 2**20


@contextlib.contextmanager
def snapshot(path: str | os.PathLike[str], max_bytes: int) -> Iterator[tuple[IO[bytes], str]]:
    """The checkpoint's bytes, read once, and their sha256: what is verified is what loads.

    Hashing a file and then opening it again to load it leaves a gap in which the file can be
    swapped; here one read fills a buffer (or, past ``IN_MEMORY_BYTES``, a private copy no
    other user can write) that is both hashed and handed to ``torch.load``.

    Raises:
        CheckpointNotFound: no such file.
        CheckpointTooLarge: it is, or grows while read past, ``max_bytes``.
    """
    file = Path(path)
    digest = hashlib.sha256()
    try:
        handle = file.open("rb")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise CheckpointNotFound(file) from None
    with handle, contextlib.ExitStack() as cleanup:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise CheckpointTooLarge(file, "the file is", size, max_bytes)
        if size <= IN_MEMORY_BYTES:
            target: IO[bytes] = io.BytesIO()
        else:
            folder = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="evalsentry-"))
            target = cleanup.enter_context(Path(folder, "checkpoint.pt").open("w+b"))
        copied = 0
        while chunk := handle.read(HASH_CHUNK):
            copied += len(chunk)
            if copied > max_bytes:
                raise CheckpointTooLarge(file, "the file is", copied, max_bytes)
            digest.update(chunk)
            target.write(chunk)
        target.seek(0)
        yield target, digest.hexdigest()


def _is_export_member(name: str) -> bool:
    """Whether a zip member belongs to a ``torch.export`` archive (never to a torch.save one)."""
    inner = name.split("/", 1)[-1]
    return inner == "archive_format" or inner.startswith(("models/", "data/aotinductor/"))


def _first_line(exc: BaseException) -> str:
    """An exception's first line, cut to 200 characters, or its type's name."""
    return str(exc).splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def read_payload(
    path: str | os.PathLike[str],
    map_location: str = "cpu",
    *,
    max_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    source: IO[bytes] | None = None,
) -> dict[str, Any]:
    """Read a checkpoint's payload with ``weights_only=True``; nothing in it can run.

    Its size is checked first (``check_archive``). A bare state dict comes back as
    ``{"model_state_dict": ...}``, without ``lineage``; so does a checkpoint that has none.
    ``source`` is the file's bytes already read (``snapshot``), else the file is read.

    Raises:
        CheckpointNotFound, CheckpointTooLarge, UnsafeCheckpoint, CheckpointCorrupt,
        UnknownLayout.

    """
    if source is None:
        with snapshot(path, max_bytes) as (bytes_, _):
            return read_payload(path, map_location, max_bytes=max_bytes, source=bytes_)
    import torch

    file = Path(path)
    if is_safetensors(source):
        return read_safetensors(file, source, map_location)
    check_archive(file, max_bytes, source)
    source.seek(0)
    try:
        payload = torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        # torch names a refused import "Unsupported global: GLOBAL x" or "unsupported GLOBAL x".
        unsafe = [ln.strip() for ln in text.splitlines() if "GLOBAL" in ln]
        if unsafe:
            raise UnsafeCheckpoint(file, unsafe[0][:200]) from None
        reason = next((ln.strip() for ln in text.splitlines() if "Unsupported" in ln), text)
        raise CheckpointCorrupt(file, reason.splitlines()[0][:200]) from None
    except Exception as exc:  # noqa: BLE001 - damaged bytes surface as many exception types
        raise CheckpointCorrupt(file, _first_line(exc)) from None
    if isinstance(payload, Mapping) and STATE_KEY in payload:
        return dict(payload)
    if _is_state_dict(payload):
        return {STATE_KEY: payload}
    found = (
        f"keys {sorted(map(str, payload))[:10]}"
        if isinstance(payload, Mapping)
        else f"a {type(payload).__name__}"
    )
    raise UnknownLayout(file, found)


def _is_state_dict(payload: Any) -> bool:
    """Whether ``payload`` is a bare ``model.state_dict()``: names mapped to tensors only."""
    import torch

    return (
        isinstance(payload, Mapping)
        and bool(payload)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in payload.items())
    )
