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
from evalsentry.weeks import is_aware_timestamp

GIT_SHA_ENV = "EVALSENTRY_GIT_SHA"
GIT_DIRTY_ENV = "EVALSENTRY_GIT_DIRTY"

#: Fields a checkpoint must carry to be registered. ``model.factory`` may be supplied at
#: registration instead (checkpoints written by the plain recipe have none).
REQUIRED_FIELDS = ("git_sha", "data_sha", "config", "timestamp_utc", "model.factory")
#: Fields ``save_checkpoint`` always records in addition.
RECORDED_FIELDS = ("git_dirty", "seed", "model.kwargs", "torch_version", "python_version")

#: The fields of a ``--lineage`` file: required ones first, then the optional ones.
LINEAGE_FILE_REQUIRED = ("git_sha", "data_sha", "config", "timestamp_utc")
LINEAGE_FILE_OPTIONAL = ("seed", "git_dirty", "torch_version", "python_version")

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


class BadTrainingData(UsageError):
    """``data=`` names no training data that can be hashed; says what to pass."""

    def __init__(self, where: str, problem: str) -> None:
        self.where, self.problem = where, problem
        super().__init__(
            f"{where}: {problem}; pass data= the training data: a file (or a manifest), "
            "a list of files, or a folder, that exist and are not empty"
        )


def training_files(data: object) -> list[tuple[str, Path]]:
    """The training-data files ``data`` names, each with the name it is hashed under.

    Checks only that they exist (nothing is read), so ``save_checkpoint`` refuses bad data
    before it builds or writes anything.

    Raises:
        BadTrainingData: ``data`` is None, empty, of another type, or names a path that does
            not exist, an empty folder, or (inside a list) a folder.

    """
    if data is None or isinstance(data, bytes | bytearray):
        raise BadTrainingData(f"data={data!r}", "no training data given")
    if isinstance(data, str | os.PathLike):
        if not str(data):
            raise BadTrainingData("data=''", "an empty path")
        root = Path(data)
        if root.is_dir():
            files = [(p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file()]
            if not files:
                raise BadTrainingData(f"data={str(data)!r}", "the folder holds no files")
            return files
        if not root.is_file():
            raise BadTrainingData(f"data={str(data)!r}", "no such file or folder")
        return [(root.name, root)]
    if not isinstance(data, Sequence):
        raise BadTrainingData(f"data={data!r}"[:80], f"{type(data).__name__} is not a path")
    if not data:
        raise BadTrainingData(f"data={data!r}", "an empty list")
    files = []
    for i, item in enumerate(data):
        if not isinstance(item, str | os.PathLike) or not str(item):
            raise BadTrainingData(f"data[{i}]={item!r}", "not a file path")
        path = Path(item)
        if path.is_dir():
            raise BadTrainingData(
                f"data[{i}]={str(item)!r}", "a folder; pass the folder itself, not in a list"
            )
        if not path.is_file():
            raise BadTrainingData(f"data[{i}]={str(item)!r}", "no such file")
        files.append((path.name, path))
    return files


def data_sha256(data: DataSource) -> str:
    """Hash training data given as a manifest file, a list of files, or a directory.

    See the module docstring for the exact definition.

    Raises:
        BadTrainingData: see ``training_files``.

    """
    lines = [f"{sha256_file(path)[0]}  {name}\n" for name, path in training_files(data)]
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
    if "timestamp_utc" not in missing and not (
        isinstance(stamp, str) and is_aware_timestamp(stamp)
    ):
        missing.append("timestamp_utc (timezone-aware)")
    return missing


#: Bounds on what a checkpoint's lineage may hold (its ``config`` and model kwargs): far above
#: any real set of hyperparameters, far below what would stall a registration.
MAX_LINEAGE_DEPTH = 32
MAX_LINEAGE_NODES = 100_000
MAX_LINEAGE_CHARS = 1_000_000
_HEX = frozenset("0123456789abcdefABCDEF")
_INT64 = (-(2**63), 2**63 - 1)


class LineageInvalid(UsageError):
    """A lineage field holds a value of the wrong type or size; names the file and the field."""

    def __init__(self, where: object, field: str, problem: str) -> None:
        self.where, self.field, self.problem = str(where), field, problem
        super().__init__(f"{self.where}: lineage.{field}: {problem}")


def check_lineage_values(where: object, lineage: Mapping[str, Any]) -> None:
    """Check each lineage field's type and size, so what is recorded can always be stored.

    ``git_sha`` and ``data_sha`` are hex text; ``teacher`` (a distilled student's) names a
    sha256; ``git_dirty`` true, false or null; ``seed`` an
    integer within int64, or null; ``config`` and ``model.kwargs`` JSON-safe mappings with text
    keys and finite numbers, at most ``MAX_LINEAGE_DEPTH`` deep and ``MAX_LINEAGE_NODES``
    values (``MAX_LINEAGE_CHARS`` characters) when written out: counted on the structure as
    loaded, without expanding a value referenced many times (a list of shared references
    would expand to billions), so the check is as cheap as the file is small.

    Raises:
        LineageInvalid: naming the first field that breaks one of these.
    """
    for field in ("git_sha", "data_sha"):
        value = lineage.get(field)
        if not isinstance(value, str) or not value or len(value) > 128 or set(value) - _HEX:
            raise LineageInvalid(
                where, field, f"expected a hex digest as text, got {_shown(value)}"
            )
    if lineage.get("git_dirty") is not None and not isinstance(lineage.get("git_dirty"), bool):
        raise LineageInvalid(
            where, "git_dirty", f"expected true, false or null, got {_shown(lineage['git_dirty'])}"
        )
    seed = lineage.get("seed")
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not _INT64[0] <= seed <= _INT64[1]
    ):
        raise LineageInvalid(
            where, "seed", f"expected an integer within int64, or null, got {_shown(seed)}"
        )
    for field in ("torch_version", "python_version", "timestamp_utc"):
        value = lineage.get(field)
        if value is not None and (not isinstance(value, str) or len(value) > 200):
            raise LineageInvalid(where, field, f"expected short text, got {_shown(value)}")
    teacher = lineage.get("teacher")
    if teacher is not None and not (
        isinstance(teacher, Mapping) and _is_sha256(teacher.get("sha256"))
    ):
        raise LineageInvalid(
            where, "teacher", f"expected {{sha256: <64 hex digits>}}, got {_shown(teacher)}"
        )
    _check_tree(where, "config", lineage.get("config"))
    model = lineage.get("model")
    if isinstance(model, Mapping) and model.get("kwargs") is not None:
        _check_tree(where, "model.kwargs", model["kwargs"])


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and not set(value) - _HEX


def _shown(value: Any) -> str:
    """A value as an error names it: its type, and its text cut short."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _check_tree(where: object, field: str, root: Any) -> None:
    """A JSON-safe mapping within the bounds, measured once per distinct object (see above)."""
    if not isinstance(root, Mapping):
        raise LineageInvalid(where, field, f"expected a mapping, got {_shown(root)}")
    # Post-order over distinct objects: each one's depth, written-out size and value count,
    # computed from its children's, so a value referenced a million times is measured once.
    measured: dict[int, tuple[int, int, int]] = {}  # id -> (depth, nodes, chars)
    stack: list[tuple[Any, str, bool]] = [(root, field, False)]
    entered: set[int] = set()
    while stack:
        value, path, done = stack.pop()
        key = id(value)
        if key in measured:
            continue
        children = _children(where, value, path)
        if children is None:  # a leaf
            measured[key] = (1, 1, _leaf_chars(where, value, path))
            continue
        if not done:
            if key in entered:
                raise LineageInvalid(where, path, "refers to itself (a cycle)")
            entered.add(key)  # the containers on the path to here: its depth so far
            if len(entered) > MAX_LINEAGE_DEPTH:
                raise LineageInvalid(where, field, f"nested more than {MAX_LINEAGE_DEPTH} deep")
            stack.append((value, path, True))
            stack.extend((child, sub, False) for sub, child in children)
            continue
        parts = [measured[id(child)] for _, child in children]
        depth = 1 + max((d for d, _, _ in parts), default=0)
        nodes = 1 + sum(n for _, n, _ in parts)
        chars = 2 + sum(c + 2 for _, _, c in parts) + sum(len(sub) for sub, _ in children)
        entered.discard(key)
        if depth > MAX_LINEAGE_DEPTH:
            raise LineageInvalid(where, field, f"nested more than {MAX_LINEAGE_DEPTH} deep")
        if nodes > MAX_LINEAGE_NODES or chars > MAX_LINEAGE_CHARS:
            raise LineageInvalid(
                where,
                field,
                f"too large written out (more than {MAX_LINEAGE_NODES:,} values or "
                f"{MAX_LINEAGE_CHARS:,} characters); keep hyperparameters, not data, in it",
            )
        measured[key] = (depth, nodes, chars)


def _children(where: object, value: Any, path: str) -> list[tuple[str, Any]] | None:
    """A container's (name, child) pairs; None for a leaf."""
    if isinstance(value, Mapping):
        for k in value:
            if not isinstance(k, str):
                raise LineageInvalid(where, path, f"a key must be text, got {_shown(k)}")
        return [(f"{path}.{k}", v) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    return None


def _leaf_chars(where: object, value: Any, path: str) -> int:
    """How many characters a JSON leaf writes out; refuses what JSON cannot hold."""
    if value is None or isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return len(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LineageInvalid(where, path, f"{value} is not a reproducible setting")
        return len(repr(value))
    if isinstance(value, str):
        return len(value) + 2
    raise LineageInvalid(where, path, f"{type(value).__name__} is not JSON-safe; use a plain value")


def read_lineage_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The lineage of a checkpoint that records none, from a JSON or YAML file (``--lineage``).

    Required: ``git_sha``, ``data_sha``, ``config`` (a mapping) and ``timestamp_utc``
    (ISO 8601, timezone-aware). Optional: ``seed`` (null when absent), ``git_dirty``,
    ``torch_version``, ``python_version``. The model factory is not part of it: it is given
    with ``--factory``, and pinned in the registry entry.

    Raises:
        ConfigError: naming the file and the field that is missing, unknown or malformed.

    """
    file = Path(path)
    doc = _lineage_document(file)
    lineage: dict[str, Any] = {}
    for field in ("git_sha", "data_sha"):
        if not isinstance(doc[field], str):
            raise ConfigError(file, field, f"expected text, got {doc[field]!r}; quote it in YAML")
        lineage[field] = doc[field]
    if "git_dirty" in doc:
        if not isinstance(doc["git_dirty"], bool | None):
            raise ConfigError(file, "git_dirty", "expected true, false or null")
        lineage["git_dirty"] = doc["git_dirty"]
    if not isinstance(doc["config"], Mapping):
        raise ConfigError(file, "config", "expected a mapping of hyperparameters")
    lineage["config"] = check_json_config(doc["config"], str(file))
    seed = doc.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(file, "seed", f"expected an integer or null, got {seed!r}")
    lineage["seed"] = seed
    lineage["timestamp_utc"] = _timestamp(file, doc["timestamp_utc"])
    for field in ("torch_version", "python_version"):
        if doc.get(field) is not None:
            lineage[field] = str(doc[field])
    return lineage


def _timestamp(file: Path, value: Any) -> str:
    """An ISO 8601, timezone-aware timestamp as text (YAML reads an unquoted one as a datetime)."""
    if isinstance(value, datetime):
        stamp = value.isoformat()
    elif isinstance(value, str):
        stamp = value
    else:
        stamp = ""
    if not is_aware_timestamp(stamp):
        raise ConfigError(
            file,
            "timestamp_utc",
            f"{value!r} is not an ISO 8601 timestamp with a timezone; "
            "e.g. 2026-11-30T06:00:00+00:00",
        )
    return stamp


def _lineage_document(file: Path) -> Mapping[str, Any]:
    """A ``--lineage`` file read, with no unknown field and every required one present."""
    import yaml

    if not file.is_file():
        raise ConfigError(file, "", "lineage file not found; check the --lineage path")
    try:
        text = file.read_text(encoding="utf-8")
        doc = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(file, "", f"not a readable JSON or YAML document ({line})") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(file, "", "expected a mapping of lineage fields")
    known = LINEAGE_FILE_REQUIRED + LINEAGE_FILE_OPTIONAL
    for field in doc:
        if field == "model":
            raise ConfigError(
                file, "model", "the factory is given with --factory (and --factory-kwargs)"
            )
        if field not in known:
            raise ConfigError(file, str(field), f"unknown field; the fields are {', '.join(known)}")
    missing = [f for f in LINEAGE_FILE_REQUIRED if doc.get(f) in (None, "")]
    if missing:
        raise ConfigError(
            file, missing[0], f"required (missing: {', '.join(missing)}); seed is optional"
        )
    return doc
