r"""Lineage: where a checkpoint came from (code, data, configuration, seed, time).

``data_sha256`` defines the training-data hash. Each file is hashed by streaming its bytes; the
hash is then sha256 over the sorted lines ``"<file sha256>  <name>\n"``, where ``name`` is the
path relative to the folder for a directory, and the base name for a file or a list of files.
The result depends on content and names, never on listing order or on where the data lives.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess  # nosec B404 - runs git only, with fixed arguments
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalsentry.errors import ConfigError, UsageError
from evalsentry.storage import sha256_file

GIT_SHA_ENV = "EVALSENTRY_GIT_SHA"
GIT_DIRTY_ENV = "EVALSENTRY_GIT_DIRTY"

#: Fields a checkpoint must carry to be registered. ``model.factory`` may be supplied at
#: registration instead (checkpoints written by the plain recipe have none).
REQUIRED_FIELDS = ("git_sha", "data_sha", "config", "timestamp_utc", "model.factory")
#: Fields ``save_checkpoint`` always records in addition.
RECORDED_FIELDS = ("git_dirty", "seed", "model.kwargs", "torch_version", "python_version")

DataSource = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class NotInGitRepo(UsageError):
    """Training code runs outside a git repository and no sha was given."""

    def __init__(self, where: object) -> None:
        super().__init__(
            f"{where}: not inside a git repository, so the code commit is unknown; "
            f"run from a git checkout, pass git_sha=..., or set {GIT_SHA_ENV}"
        )


def git_state(repo: str | os.PathLike[str] | None = None) -> tuple[str, bool]:
    """The commit sha and whether the work tree has uncommitted changes.

    ``EVALSENTRY_GIT_SHA`` (and optionally ``EVALSENTRY_GIT_DIRTY=1``) override git, for CI
    builds that train from an exported tree.

    Raises:
        NotInGitRepo: outside a git repository and no override is set.

    """
    if sha := os.environ.get(GIT_SHA_ENV):
        return sha, os.environ.get(GIT_DIRTY_ENV, "0") not in ("0", "", "false")
    where = Path(repo) if repo is not None else Path.cwd()
    try:
        sha = _git(where, "rev-parse", "HEAD")
        dirty = bool(_git(where, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        raise NotInGitRepo(where) from None
    return sha, dirty


def _git(where: Path, *args: str) -> str:
    # Fixed git arguments, no shell; git is looked up on PATH like any developer tool.
    result = subprocess.run(  # noqa: S603
        ["git", *args],  # noqa: S607
        cwd=where,
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return result.stdout.strip()


def data_sha256(data: DataSource) -> str:
    """Hash training data given as a manifest file, a list of files, or a directory.

    See the module docstring for the exact definition.

    Raises:
        UsageError: a named file or folder does not exist, or the folder is empty.

    """
    if isinstance(data, str | os.PathLike):
        root = Path(data)
        if root.is_dir():
            files = [(p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file()]
            if not files:
                raise UsageError(f"{root}: training-data folder is empty; nothing to hash")
        else:
            files = [(root.name, root)]
    else:
        files = [(Path(p).name, Path(p)) for p in data]
    lines = []
    for name, path in files:
        if not path.is_file():
            raise UsageError(f"{path}: training-data file not found; check the data= argument")
        lines.append(f"{sha256_file(path)[0]}  {name}\n")
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


def check_json_config(config: Mapping[str, Any], where: str = "config") -> dict[str, Any]:
    """Return a JSON-safe copy of the hyperparameters, or raise naming the offending key.

    Keys must be strings; values are numbers (finite), strings, booleans, None, lists or
    mappings of those.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(where, "", "hyperparameters must be a mapping of name to value")

    def check(value: Any, path: str) -> Any:
        if isinstance(value, Mapping):
            return {str(k): check(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [check(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(where, path, "NaN/inf is not a reproducible setting")
        if value is None or isinstance(value, str | bool | int | float):
            return value
        raise ConfigError(
            where, path, f"{type(value).__name__} is not JSON-safe; use a plain value"
        )

    safe = check(config, "config")
    json.dumps(safe, allow_nan=False)
    return dict(safe)


def build_lineage(
    *,
    config: Mapping[str, Any],
    seed: int,
    data: DataSource,
    factory: str,
    factory_kwargs: Mapping[str, Any] | None,
    torch_version: str,
    git_sha: str | None = None,
    git_dirty: bool | None = None,
    repo: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Assemble the lineage record ``save_checkpoint`` stores."""
    if git_sha is None:
        git_sha, git_dirty = git_state(repo)
    return {
        "git_sha": git_sha,
        "git_dirty": bool(git_dirty),
        "data_sha": data_sha256(data),
        "config": check_json_config(config),
        "seed": int(seed),
        "model": {
            "factory": factory,
            "kwargs": check_json_config(factory_kwargs or {}, "factory_kwargs"),
        },
        "torch_version": torch_version,
        "python_version": platform.python_version(),
        "timestamp_utc": datetime.now(UTC).isoformat(),
    }


def missing_fields(lineage: Any) -> list[str]:
    """The names of required lineage fields that are absent or empty, in a fixed order."""
    if not isinstance(lineage, Mapping):
        return list(REQUIRED_FIELDS)
    missing = []
    for field in REQUIRED_FIELDS:
        value: Any = lineage
        for part in field.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value in (None, ""):
            missing.append(field)
    stamp = lineage.get("timestamp_utc")
    if isinstance(stamp, str) and "timestamp_utc" not in missing and not _is_aware(stamp):
        missing.append("timestamp_utc (timezone-aware)")
    return missing


def _is_aware(stamp: str) -> bool:
    try:
        return datetime.fromisoformat(stamp).tzinfo is not None
    except ValueError:
        return False
