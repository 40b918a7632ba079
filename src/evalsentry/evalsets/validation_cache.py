"""Reuse of a Great Expectations result while nothing it depends on has changed.

Importing GX alone takes seconds, which dominates the CI candidate path on a small evalset. A
passed validation is stored under the history's root, keyed by everything its result depends
on: the evalset's manifest (its identity and every data file's pinned sha256), the suite's
exact bytes and the GX version. The data files are re-hashed against the manifest on every run
before any reuse, so changed bytes still fail (``EvalsetTampered``); a changed manifest, suite
or GX version gives another key, hence a full validation. Only passed validations are stored.
The weekly flow always validates in full.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from evalsentry.storage import filesystem, join, write_atomic

log = logging.getLogger(__name__)

FOLDER = "validations"  # under the store root
KEY_VERSION = 1  # bump when what the key covers changes


def gx_version() -> str | None:
    """The installed Great Expectations version, read without importing it (None if absent)."""
    try:
        return metadata.version("great_expectations")
    except metadata.PackageNotFoundError:
        return None


def validation_key(name: str, manifest: bytes, suite: bytes, gx: str) -> str:
    """The key of a validation result: evalset name, manifest and suite bytes, GX version."""
    parts = {
        "key_version": KEY_VERSION,
        "evalset": name,
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "suite_sha256": hashlib.sha256(suite).hexdigest(),
        "great_expectations": gx,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ValidationCache:
    """Passed validation results under ``<store>/validations/<key>.json``."""

    store_url: str

    def _path(self, key: str) -> tuple[Any, str]:
        fs, root = filesystem(self.store_url)
        return fs, join(root, FOLDER, f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored passed result of ``key`` and where it came from; None if none usable."""
        fs, path = self._path(key)
        try:
            with fs.open(path, "rb") as handle:
                entry = json.loads(handle.read())
        except (OSError, ValueError):  # absent or unreadable: validate in full
            return None
        entry = entry if isinstance(entry, dict) else {}
        summary = entry.get("summary")
        passed = isinstance(summary, dict) and summary.get("success") is True
        if entry.get("key") != key or not passed or not entry.get("run_id"):
            log.warning("validation cache %s: not a passed result for its key; validating", path)
            return None
        return entry

    def put(self, key: str, summary: dict[str, Any], *, run_id: str, week: str) -> None:
        """Store a passed ``summary`` validated in full by ``run_id``; a failed one is not kept."""
        if summary.get("success") is not True:
            return
        fs, path = self._path(key)
        entry = {"key": key, "run_id": run_id, "week": week, "summary": summary}
        write_atomic(fs, path, json.dumps(entry, sort_keys=True).encode())


def reused_summary(entry: dict[str, Any]) -> dict[str, Any]:
    """The stored summary, marked as reused and naming the run that validated it in full."""
    return {
        **entry["summary"],
        "reused_from": {"run_id": entry["run_id"], "week": entry["week"], "key": entry["key"]},
    }


def check_evalset_reusing(
    name: str,
    evalsets_dir: str,
    cache: ValidationCache,
    *,
    run_id: str,
    week: str,
    revalidate: bool = False,
) -> dict[str, Any]:
    """``check_evalset``'s summary, reusing a stored passed result when nothing it covers changed.

    The data files are re-hashed against the manifest first, every time: changed bytes raise
    ``EvalsetTampered`` whatever is stored. A full validation that passes is stored for later
    runs; ``revalidate`` forces one.

    Raises:
        EvalsetTampered: a data file changed since freeze.
        EvalsetInvalid: a full validation found the data breaking its suite.

    """
    from evalsentry.evalsets.check import check_evalset
    from evalsentry.evalsets.evalset import MANIFEST, SUITE, evalset_folder, read_spec, verify_files

    folder = str(evalset_folder(name, evalsets_dir))
    fs, _ = filesystem(folder)
    manifest = fs.cat_file(join(folder, MANIFEST))
    suite = fs.cat_file(join(folder, SUITE))
    verify_files(folder, read_spec(folder))  # fail closed before anything is reused
    gx = gx_version()
    key = validation_key(name, manifest, suite, gx) if gx else None
    entry = cache.get(key) if key and not revalidate else None
    if entry is not None:
        log.info("evalset %s: expectation suite result reused from run %s", name, entry["run_id"])
        return reused_summary(entry)
    summary = check_evalset(name, evalsets_dir).to_dict()
    if key is not None:
        cache.put(key, summary, run_id=run_id, week=week)
    return summary
