"""The margin test's critical values and results, kept on disk between runs: computed once.

The exact critical z of each grid point (:meth:`evalsentry.gate.margin.MarginTest`) is the
costly part of stating a detectable drop: about a second for an evalset of 10,000 examples, in
every process that gates it, for numbers that depend only on the evalset's size, the tolerance
in examples and the level. They are kept in a cache folder, one ``.npy`` file per (size,
tolerance, level), under a key of the code that computes them (the bytes of ``margin.py``,
``tail_tables.py`` and ``binomial.py``): a changed computation never reads an old answer.

The folder is ``$EVALSENTRY_CACHE_DIR``, else ``$XDG_CACHE_HOME/evalsentry``, else
``~/.cache/evalsentry``; ``EVALSENTRY_CACHE_DIR=`` (empty) turns the cache off. A file that is
missing, unreadable or not a row of finite values in range is computed again (and rewritten);
a folder that cannot be written leaves the values in memory only. Files are written whole, by
rename, so a reader never sees half of one.

The results built on them (a comparison's exact p-value, a detectable drop) are kept the same
way, one JSON line each in one file per code key (:func:`remembered`): a week's gate, run again
or by another command, reads them instead of summing tails. An entry that is not a number in
its range is computed again; the newest :data:`MAX_RESULTS` entries are kept.

So are the sign flips' values of a comparison (:func:`kept_swaps`): a file per set of paired
columns, masks and draws, under a key of the resampling and metric code.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import zipfile
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evalsentry.local_files import LocalFiles
from evalsentry.storage import write_atomic

CACHE_ENV = "EVALSENTRY_CACHE_DIR"
_SOURCES = ("margin.py", "tail_tables.py", "binomial.py")
_SWAP_SOURCES = ("resampling.py", "metrics.py", "task_metrics.py", "metric_base.py")


def cache_dir() -> Path | None:
    """Where the values are kept; None when the cache is off (or the code cannot be read)."""
    if not code_key():
        return None
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evalsentry"


@lru_cache(maxsize=1)
def code_key() -> str:
    """A hash of the code that computes the values: 16 hex digits ("" if it cannot be read)."""
    return _sources_key(_SOURCES)


@lru_cache(maxsize=1)
def swaps_key() -> str:
    """A hash of the code behind the sign flips' values (:func:`kept_swaps`), as :func:`code_key`."""
    return _sources_key(_SWAP_SOURCES)


def _sources_key(sources: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    try:
        for name in sources:
            digest.update((Path(__file__).parent / name).read_bytes())
    except OSError:  # installed without its sources: nothing can say which code wrote a file
        return ""
    return digest.hexdigest()[:16]


def _path(folder: Path, n: int, allowed: Fraction, level: float) -> Path:
    tolerance = f"{allowed.numerator}_{allowed.denominator}"
    return folder / f"margin-critical-{code_key()}-{n}-{tolerance}-{level!r}.npy"


def load(
    n: int, allowed: Fraction, level: float, low: float, high: float
) -> NDArray[np.float64] | None:
    """The values kept for this test and level, if any are and they are sound (in [low, high])."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        values = np.load(_path(folder, n, allowed, level), allow_pickle=False)
    except (OSError, ValueError):
        return None
    sound = (
        values.ndim == 1
        and values.dtype == np.float64
        and bool(np.isfinite(values).all())
        and bool(((values >= low) & (values <= high)).all())
    )
    return np.asarray(values, np.float64) if sound else None


def save(n: int, allowed: Fraction, level: float, values: NDArray[np.float64]) -> None:
    """Keep the values for later runs; a folder that cannot be written is no error."""
    folder = cache_dir()
    if folder is None:
        return
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(values, np.float64), allow_pickle=False)
    _write_whole(_path(folder, n, allowed, level), buffer.getvalue())


def _write_whole(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, written whole by rename (:func:`storage.write_atomic`).

    A folder that cannot be written (or made) is no error: the values stay in memory.
    """
    with contextlib.suppress(OSError):
        write_atomic(LocalFiles(), str(path), data)


#: Results kept per code key: the file is compacted to the newest this many when it holds twice
#: as many lines (a file of about a megabyte at most).
MAX_RESULTS = 20_000
#: Each cache folder's results, read once per process, and the lines its file holds.
_KEPT: dict[Path, dict[str, float | None]] = {}
_LINES: dict[Path, int] = {}


def remembered(
    key: str, compute: Callable[[], float | None], sound: Callable[[float | None], bool]
) -> float | None:
    """``compute()``, or the value kept under ``key`` when one is and ``sound`` accepts it.

    ``key`` names the function and every argument its value depends on; the code key is in the
    file's name. None (no answer) is kept as such, and read back only where ``sound`` accepts
    None. A new value is appended to the file as one
    JSON line ``[key, value]`` (a line cut short by a crash is skipped when read).
    """
    folder = cache_dir()
    if folder is None:
        return compute()
    kept = _KEPT.get(folder)
    if kept is None:
        kept, _LINES[folder] = _read_results(folder)
        _KEPT[folder] = kept
    if key in kept:
        value = kept[key]
        if (value is None or math.isfinite(value)) and sound(value):
            return value
    value = compute()
    kept.pop(key, None)  # the newest last
    kept[key] = value
    _LINES[folder] += 1
    if _LINES[folder] > 2 * MAX_RESULTS:
        _compact(folder, kept)
    else:
        _append(folder, key, value)
    return value


def _results_path(folder: Path) -> Path:
    return folder / f"margin-results-{code_key()}.jsonl"


def _read_results(folder: Path) -> tuple[dict[str, float | None], int]:
    """The kept results, a later line winning (text keys to numbers or null), and the lines."""
    try:
        lines = _results_path(folder).read_text().splitlines()
    except (OSError, ValueError):
        return {}, 0
    kept: dict[str, float | None] = {}
    for line in lines:
        try:
            key, value = json.loads(line)
        except (ValueError, TypeError):
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(key, str) and (value is None or number):
            kept.pop(key, None)
            kept[key] = None if value is None else float(value)
    return kept, len(lines)


def _append(folder: Path, key: str, value: float | None) -> None:
    """One result appended as a line; a folder that cannot be written is no error."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        with _results_path(folder).open("a") as handle:
            handle.write(json.dumps([key, value]) + "\n")


def _compact(folder: Path, kept: dict[str, float | None]) -> None:
    """The newest :data:`MAX_RESULTS` results, written whole by rename."""
    while len(kept) > MAX_RESULTS:
        del kept[next(iter(kept))]
    text = "".join(json.dumps([k, v]) + "\n" for k, v in kept.items())
    _write_whole(_results_path(folder), text.encode())
    _LINES[folder] = len(kept)


#: Sign-flip results kept (one file each): pruned to the newest this many at twice as many.
MAX_SWAP_FILES = 200


def kept_swaps(
    key_of: Callable[[], bytes | None],
    compute: Callable[[], dict[str, NDArray[Any]]],
    sound: Callable[[dict[str, NDArray[Any]]], bool],
) -> dict[str, NDArray[Any]]:
    """``compute()``, or the arrays kept under ``key_of()`` when ``sound`` accepts them.

    The key holds every input the arrays depend on (the paired columns' bytes among them; None:
    compute, keep nothing), asked for only while the cache is on; the file is named by its
    sha256 and the code key (:func:`swaps_key`). New arrays are written whole, by rename; the
    newest :data:`MAX_SWAP_FILES` files are kept.
    """
    folder, code = cache_dir(), swaps_key()
    key = key_of() if folder is not None and code else None
    if folder is None or key is None:
        return compute()
    path = folder / f"swaps-{code}-{hashlib.sha256(key).hexdigest()[:32]}.npz"
    try:
        with np.load(path, allow_pickle=False) as kept:
            found = {name: kept[name] for name in kept.files}
        if sound(found):
            return found
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        pass
    arrays = compute()
    buffer = io.BytesIO()
    save_arrays: Any = np.savez  # numpy's stubs take **arrays for its allow_pickle
    save_arrays(buffer, allow_pickle=False, **arrays)
    _write_whole(path, buffer.getvalue())
    _prune(folder)
    return arrays


def _prune(folder: Path) -> None:
    """Remove the oldest kept sign flips down to :data:`MAX_SWAP_FILES`, at twice as many."""
    files = list(folder.glob("swaps-*.npz"))
    if len(files) <= 2 * MAX_SWAP_FILES:
        return
    files.sort(key=_modified)
    for old in files[:-MAX_SWAP_FILES]:
        with contextlib.suppress(OSError):  # another process pruned it first
            old.unlink()


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # pruned by another process: first to go
        return 0.0
