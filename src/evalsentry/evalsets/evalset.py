"""Frozen, hash-pinned evaluation sets.

An evalset is a folder: ``data/*.parquet`` (zstd), ``evalset.yaml`` (the manifest: spec, Arrow
schema, each file's sha256 and size) and ``expectations.json`` (a Great Expectations suite).

Identity: ``evalset_sha256`` hashes the data files and every manifest field that changes
results, under a versioned scheme (``identity_version``); see ``evalsentry.evalsets.identity``. Frozen
means every use re-verifies the files and those fields against the manifest first.

The model contract, the input side (``InputsSpec.contract`` states it in one line): a model
receives one tensor per batch, ``[N, ...]``, in the manifest's ``inputs.dtype`` (``float32``
unless frozen otherwise):

- feature ``columns``: ``[N, F]``, one column per feature, in the order the manifest lists them
  (the order given at freeze, not the source file's);
- a list ``column`` with a ``shape``: each row's values reshaped, row-major, to that shape, so
  ``shape: [1, 8, 8]`` gives ``[N, 1, 8, 8]`` images, channels first.

Token ids are not an input kind of their own: there is no integer ``dtype``, so a text model's
evalset carries its token ids as a float list column (exact below 2**24) and its ``forward``
casts them (``x.long()``) before its embedding.
Targets: class labels become indices into ``classes`` (the order the logits' columns follow,
stated at freeze); regression targets are float32. The output side is ``evalsentry.evaluation.inference``'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from evalsentry.documents import config_error
from evalsentry.errors import EvalsetError, EvalsetTampered, did_you_mean
from evalsentry.evalsets.identity import check_fields, evalset_identity
from evalsentry.evalsets.inputs import (
    InputsSpec,
    TokenInputs,
    inputs_array,
    shared_tensor,
    token_inputs,
)
from evalsentry.evalsets.suite_shape import SUITE_FIX, SuiteDocument
from evalsentry.evalsets.targets import targets_array
from evalsentry.names import check_name
from evalsentry.storage import filesystem, join, sha256_file

if TYPE_CHECKING:
    import torch


log = logging.getLogger(__name__)

MANIFEST, SUITE, DATA_DIR = "evalset.yaml", "expectations.json", "data"
#: yaml's safe loader in C (libyaml, in PyYAML's wheels), the same documents ten times faster;
#: the Python one where PyYAML was built without it.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DATA_FILE = "part-000.parquet"


Task = Literal["classification", "regression", "multilabel", "language_modeling", "multiple_choice"]
TASKS: tuple[Task, ...] = (
    "classification",
    "regression",
    "multilabel",
    "language_modeling",
    "multiple_choice",
)


class DataFile(BaseModel):
    """A data file pinned by hash and size."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    path: str
    sha256: str = Field(min_length=64, max_length=64)
    size: int = Field(ge=0)


class EvalsetSpec(BaseModel):
    """``evalset.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    name: str
    version: int = Field(1, ge=1)
    description: str = ""
    provenance: str = ""
    license: str = ""
    task: Task
    id_column: str
    target: str
    inputs: InputsSpec
    slices: list[str] = Field(default_factory=list)
    classes: list[int] | list[str] | None = None
    metrics: list[str] | None = None
    #: What a classifier returns: ``logits`` (the default), or ``probabilities`` declared at
    #: freeze for models ending in a softmax; output that looks like probabilities where logits
    #: are expected is the model's ERROR, so nll and ECE are never silently wrong.
    outputs: Literal["logits", "probabilities"] = "logits"
    #: Multiple choice: a continuation's score is the ``sum`` of its tokens' log-probabilities,
    #: or their ``mean`` (length-normalised). Stated at freeze (None elsewhere).
    scoring: Literal["sum", "mean"] | None = None
    num_rows: int = Field(ge=0)
    schema_: dict[str, str] = Field(alias="schema")
    files: list[DataFile]
    identity_version: Literal[1, 2] = 1
    evalset_sha256: str
    field_sha256: dict[str, str] | None = None
    frozen_at: str

    @field_validator("classes")
    @classmethod
    def _distinct_classes(cls, classes: list[int] | list[str] | None) -> Any:
        if classes is not None and len(set(classes)) != len(classes):
            raise ValueError("each class may appear once; remove the repeated ones")
        return classes

    def result_fields(self) -> dict[str, Any]:
        """The fields that change results, as canonical JSON values.

        Every one of ``RESULT_FIELDS``, and each of ``OPTIONAL_RESULT_FIELDS`` set to other than
        its default (an evalset frozen before such a field existed keeps its identity).
        """
        fields = {
            "task": self.task,
            "inputs": self.inputs.model_dump(mode="json", exclude_none=True),
            "target": self.target,
            "id_column": self.id_column,
            "classes": self.classes,
            "metrics": self.metrics,
            "slices": self.slices,
        }
        if self.outputs != "logits":
            fields["outputs"] = self.outputs
        if self.scoring is not None:
            fields["scoring"] = self.scoring
        return fields

    def identity(self) -> str:
        """Recompute ``evalset_sha256`` under this manifest's ``identity_version``."""
        return evalset_identity(self.files, self.result_fields(), self.identity_version)

    @property
    def num_classes(self) -> int | None:
        """Number of classes for classification."""
        return len(self.classes) if self.classes is not None else None


@dataclass(frozen=True)
class Evalset:
    """A verified evalset in memory: inputs as one array, plus targets, ids and slices.

    Arrays, not tensors: the caller verifies and validates without importing torch (a second
    or more of the CI path); the process that runs the model takes :meth:`tensors`.
    """

    spec: EvalsetSpec
    folder: str
    inputs: np.ndarray | TokenInputs
    targets: np.ndarray
    ids: np.ndarray
    slices: dict[str, np.ndarray]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets as tensors sharing the arrays' memory.

        Never handed to a model as they are: inference gives each forward a copy of its batch
        (a model may write its input), so these stay the frozen values.
        """
        if isinstance(self.inputs, TokenInputs):
            raise TypeError(f"evalset {self.spec.name!r} holds token sequences, not one tensor")
        return shared_tensor(self.inputs), shared_tensor(self.targets)

    def token_inputs(self) -> TokenInputs:
        """A token evalset's sequences (``TypeError`` for one of fixed tensors)."""
        if not isinstance(self.inputs, TokenInputs):
            raise TypeError(f"evalset {self.spec.name!r} holds fixed tensors, not token sequences")
        return self.inputs

    @property
    def sha256(self) -> str:
        """The evalset's identity hash."""
        return self.spec.evalset_sha256

    def __len__(self) -> int:
        return int(self.spec.num_rows)


# --- reading the manifest ---------------------------------------------------------------------


def _locate(folder: str | Path) -> tuple[Any, str]:
    """The filesystem holding ``folder`` (a local path or an fsspec URL) and its path there."""
    return filesystem(str(folder))


def evalset_folder(name_or_path: str | Path, evalsets_dir: str | Path | None = None) -> str:
    """Resolve an evalset name (a ``str``, under ``evalsets_dir``) or folder (a ``Path``).

    ``evalsets_dir`` may be a local folder or an fsspec URL (``s3://bucket/evalsets``). Names come
    from users, configs and flow parameters, so they are checked to be one plain path segment:
    ``../x``, absolute paths and odd characters are refused.

    Raises:
        InvalidName: a name that tries to address another folder.
        EvalsetError: no such evalset (with a did-you-mean among the known ones).
    """
    if isinstance(name_or_path, Path):
        if (name_or_path / MANIFEST).is_file():
            return str(name_or_path)
        raise EvalsetError(f"{name_or_path}: no {MANIFEST} here; not a frozen evalset folder")
    root = str(evalsets_dir or "evalsets")
    fs, base = _locate(root)
    if fs.exists(join(base, check_name("evalset", name_or_path), MANIFEST)):
        return join(root, name_or_path)
    known = list_evalsets(root)
    raise EvalsetError(
        f"evalset {name_or_path!r} not found in {root}.{did_you_mean(name_or_path, known)}"
    )


def list_evalsets(root: str | Path) -> list[str]:
    """Names of the evalset folders under ``root`` (a local folder or an fsspec URL)."""
    fs, base = _locate(root)
    if not fs.exists(base):
        return []
    return sorted(path.rstrip("/").split("/")[-2] for path in fs.glob(join(base, "*", MANIFEST)))


def _read_text(folder: str | Path, name: str) -> tuple[str, str]:
    fs, base = _locate(folder)
    path = join(base, name)
    where = join(str(folder), name)
    try:
        return path, fs.cat_file(path).decode("utf-8")
    except FileNotFoundError:
        raise EvalsetError(f"{where}: file missing; {SUITE_FIX}") from None
    except UnicodeDecodeError as exc:
        raise EvalsetError(f"{where}: not UTF-8 text (byte {exc.start}); {SUITE_FIX}") from None
    except OSError as exc:
        raise EvalsetError(f"{where}: cannot read it ({exc.strerror or exc})") from None


def read_spec(folder: str | Path) -> EvalsetSpec:
    """Parse ``evalset.yaml``; errors name the file and field."""
    path, text = _read_text(folder, MANIFEST)
    try:
        return EvalsetSpec.model_validate(yaml.load(text, Loader=SAFE_LOADER))  # noqa: S506
    except yaml.YAMLError as exc:
        raise EvalsetError(
            f"{path}: not valid YAML ({type(exc).__name__}); fix the syntax"
        ) from None
    except ValidationError as exc:
        raise config_error(path, exc) from None


def read_manifest_text(folder: str | Path) -> str:
    """The manifest as written, after checking that it parses."""
    read_spec(folder)
    return _read_text(folder, MANIFEST)[1]


def read_suite(folder: str | Path) -> dict[str, Any]:
    """The stored expectation suite, its shape checked; errors name the file and field."""
    text = _read_text(folder, SUITE)[1]
    where = join(str(folder), SUITE)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalsetError(
            f"{where}: not valid JSON ({exc.msg}, line {exc.lineno}); {SUITE_FIX}"
        ) from None
    if not isinstance(document, dict):
        raise EvalsetError(
            f"{where}: expected a JSON object (a Great Expectations suite), got "
            f"{type(document).__name__}; {SUITE_FIX}"
        )
    try:
        SuiteDocument.model_validate(document)
    except ValidationError as exc:
        error = config_error(where, exc)
        fix = "" if error.problem.startswith("unknown field") else f"; {SUITE_FIX}"
        raise EvalsetError(f"{error}{fix}") from None
    return document


def fingerprint(folder: str | Path) -> str:
    """A cheap digest of the folder's manifest and every file's size and version (no hashing)."""
    fs, base = _locate(folder)
    files = sorted(fs.find(base, detail=True).items())
    listing = repr([(path, info.get("size"), _version(info)) for path, info in files])
    return hashlib.sha256(fs.cat_file(join(base, MANIFEST)) + listing.encode()).hexdigest()


# --- hashing ----------------------------------------------------------------------------------

_HASH_CACHE: dict[str, tuple[int, object, str]] = {}
_HASH_LOCK = threading.Lock()


def _version(info: dict[str, Any]) -> object:
    """What changes when a file is rewritten: mtime locally, the ETag on an object store."""
    return info.get("mtime") or info.get("ETag") or info.get("LastModified")


def cached_sha256(fs: Any, path: str) -> str:
    """sha256 of a file (streamed), hashed once per process while its size and version stay the same."""
    info = fs.info(path)
    key = fs.unstrip_protocol(path)
    size, version = info.get("size"), _version(info)
    with _HASH_LOCK:
        hit = _HASH_CACHE.get(key)
    if hit and hit[0] == size and hit[1] == version:
        return hit[2]
    digest, _ = sha256_file(path, fs)
    with _HASH_LOCK:
        _HASH_CACHE[key] = (size, version, digest)
    return digest


def verify_files(folder: str | Path, spec: EvalsetSpec) -> None:
    """Check the data files (none missing, extra or changed) and the manifest's fields.

    The fields are checked by ``check_manifest``.

    Raises:
        EvalsetTampered: naming the file, the expected and the actual hash.
        EvalsetFieldChanged: naming the manifest field that changed since freeze.
    """
    verify_data_files(folder, spec)
    check_manifest(folder, spec)


def verify_data_files(folder: str | Path, spec: EvalsetSpec) -> None:
    """Check every data file against the manifest: none missing, none extra, none changed."""
    fs, base = _locate(folder)
    listed = {f.path for f in spec.files}
    data = join(base, DATA_DIR)
    present = {p[len(base) + 1 :] for p in fs.find(data)} if fs.exists(data) else set()
    for extra in sorted(present - listed):
        raise EvalsetTampered(
            join(str(folder), extra), "(not in the manifest)", "an unexpected extra file"
        )
    for pinned in spec.files:
        path = join(base, pinned.path)
        if not fs.exists(path):
            raise EvalsetTampered(join(str(folder), pinned.path), pinned.sha256, "(file missing)")
        actual = cached_sha256(fs, path)
        if actual != pinned.sha256:
            raise EvalsetTampered(join(str(folder), pinned.path), pinned.sha256, actual)


def check_manifest(folder: str | Path, spec: EvalsetSpec) -> None:
    """Check the manifest's results-changing fields against what freeze pinned (reads no data).

    Raises:
        EvalsetFieldChanged: naming the field(s) that changed since freeze.
        EvalsetTampered: ``evalset_sha256`` does not match the files and fields it covers.
    """
    check_fields(spec, join(str(folder), MANIFEST), lambda: read_suite(folder))


def read_table(folder: str | Path, spec: EvalsetSpec) -> pa.Table:
    """The evalset's rows as one Arrow table, its schema checked against the manifest."""
    fs, base = _locate(folder)
    tables = []
    for pinned in spec.files:
        with fs.open(join(base, pinned.path), "rb") as handle:
            tables.append(pq.read_table(handle))
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if table.num_rows != spec.num_rows:
        raise EvalsetError(
            f"{join(str(folder), MANIFEST)}: num_rows: {spec.num_rows}, but the data holds "
            f"{table.num_rows} rows; restore the frozen manifest"
        )
    actual = {f.name: str(f.type) for f in table.schema}
    if actual != spec.schema_:
        changed = sorted(set(actual.items()) ^ set(spec.schema_.items()))
        raise EvalsetError(
            f"{join(str(folder), MANIFEST)}: schema: data does not match the pinned schema {changed}"
        )
    return table


# --- loading ----------------------------------------------------------------------------------


def load_evalset(
    name_or_path: str | Path,
    *,
    evalsets_dir: str | Path | None = None,
    verify: bool = True,
) -> Evalset:
    """Verify an evalset's files and load it for inference.

    Args:
        name_or_path: an evalset name under ``evalsets_dir``, or its folder.
        evalsets_dir: where names are looked up (default ``./evalsets``).
        verify: re-hash the files against the manifest. Only benchmarks turn this off.

    Raises:
        EvalsetError: unknown evalset, malformed manifest, data not matching the inputs spec.
        EvalsetTampered: a file is missing, extra or changed since freeze.
    """
    folder = evalset_folder(name_or_path, evalsets_dir)
    spec = read_spec(folder)
    if verify:
        verify_files(folder, spec)
    table = read_table(folder, spec)
    where = join(folder, MANIFEST)
    inputs = (
        token_inputs(table, spec.inputs, where)
        if spec.inputs.is_tokens
        else inputs_array(table, spec.inputs, where)
    )
    targets = targets_array(table, spec, where)
    ids = table.column(spec.id_column).to_numpy(zero_copy_only=False).astype(str)
    slices = {s: table.column(s).to_numpy(zero_copy_only=False) for s in spec.slices}
    return Evalset(spec, folder, inputs, targets, ids, slices)
