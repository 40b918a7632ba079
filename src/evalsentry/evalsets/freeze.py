"""Freezing data into a hash-pinned evalset folder (the write side of ``evalsets``).

Freeze states the model contract in the manifest: ``inputs`` (feature columns in the order
given, or one list column with its ``shape`` and ``dtype``) and, for classification,
``classes``: the label of each logit column, in order. Label encoding: a label's target is its
index in ``classes``. By default the classes are the distinct labels in natural order: integers
numerically, strings with the numbers inside them compared as numbers (``class_2`` before
``class_10``; otherwise case-sensitive code-point order). ``classes=`` (``--classes`` on the
command line) sets the order explicitly; it must list every label once and no class without an
example, since the generated suite pins the label set (a class the data never shows could not
be measured, and a label it does not list would have no logit column).

A frozen folder appears whole or not at all (written aside, then renamed into place), and an
existing evalset is never overwritten: a new version is a new folder. The manifest pins the
identity under ``IDENTITY_VERSION`` (every field that changes results) and each such field.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from evalsentry.errors import EvalsetError, EvalsetTampered, did_you_mean
from evalsentry.evalsets.evalset import (
    DATA_DIR,
    DATA_FILE,
    MANIFEST,
    SUITE,
    DataFile,
    EvalsetSpec,
    Task,
    evalset_folder,
    read_manifest_text,
    read_spec,
    read_suite,
    verify_data_files,
)
from evalsentry.evalsets.identity import (
    IDENTITY_VERSION,
    RESULT_FIELDS,
    check_v1_classes,
    evalset_identity,
    field_digests,
)
from evalsentry.evalsets.inputs import InputsSpec
from evalsentry.evalsets.sequences import (
    check_task_target,
    multilabel_classes,
    normalise_tokens,
)
from evalsentry.evalsets.targets import natural_key
from evalsentry.names import check_name
from evalsentry.storage import filesystem, join, sha256_file, shared_mode, write_atomic

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

_TENSOR_DTYPES = {"float32": pa.float32(), "float64": pa.float64(), "float16": pa.float16()}


def freeze_evalset(
    data: pa.Table | pd.DataFrame,
    dest: str | Path,
    *,
    name: str,
    task: Task,
    target: str,
    inputs: InputsSpec,
    id_column: str | None = None,
    slices: Sequence[str] = (),
    classes: Sequence[Any] | None = None,
    metrics: Sequence[str] | None = None,
    outputs: Literal["logits", "probabilities"] = "logits",
    scoring: Literal["sum", "mean"] | None = None,
    version: int = 1,
    description: str = "",
    provenance: str = "",
    license: str = "",
    source: str | None = None,
) -> EvalsetSpec:
    """Freeze data into ``dest``: Parquet, manifest with hashes, generated expectation suite.

    Written whole or not at all, never over an existing evalset (see the module docstring).

    Args:
        outputs: what a classifier returns: ``logits``, or ``probabilities`` (a softmax).
        scoring: multiple choice: score a continuation by the ``sum`` or ``mean`` log-prob.
        source: where the rows came from (a file), named in errors about them.

    Raises:
        EvalsetError: ``dest`` exists; no rows; an unusable label, or data that does not match
            the inputs spec, target, id, slice columns or the given classes.
    """
    dest = Path(dest)
    _refuse_existing(dest, check_name("evalset", name), version)
    table, id_column = _rows(data, dest, name, inputs, id_column, source, task)
    _check_rows(table, target, slices, id_column, task, inputs, source or "the data")
    classes = _task_classes(table, target, task, classes, outputs, source or "the data")
    described = EvalsetSpec(
        name=name,
        version=version,
        description=description,
        provenance=provenance,
        license=license,
        task=task,
        id_column=id_column,
        target=target,
        inputs=inputs,
        slices=list(slices),
        classes=list(classes) if classes is not None else None,
        metrics=list(metrics) if metrics else None,
        outputs=outputs,
        scoring=_scoring(task, scoring),
        num_rows=len(table),
        schema={},
        files=[],
        evalset_sha256="",
        frozen_at="",
    )
    return _write_folder(table, dest, described)


def _scoring(task: str, scoring: str | None) -> Any:
    """How a multiple-choice evalset scores continuations (``sum`` unless stated); None elsewhere."""
    if task == "multiple_choice":
        return scoring or "sum"
    if scoring is not None:
        raise EvalsetError("scoring: only a multiple-choice evalset scores continuations")
    return None


def _refuse_existing(dest: Path, name: str, version: int) -> None:
    """Frozen data is never overwritten: a new version is a new folder."""
    if dest.exists():
        raise EvalsetError(
            f"{dest}: an evalset is already frozen here; frozen data is never overwritten. "
            f"Freeze the new data as a new version, e.g. --name {name}-v{version + 1} --version {version + 1}"
        )


def _rows(
    data: pa.Table | pd.DataFrame,
    dest: Path,
    name: str,
    inputs: InputsSpec,
    id_column: str | None,
    source: str | None,
    task: str,
) -> tuple[pa.Table, str]:
    """The rows as they will be stored (ids added, tensor inputs fixed-size) and the id column."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
    if len(table) == 0:
        raise EvalsetError(
            f"{source or 'the data'}: no rows to freeze; an evalset needs at least one example "
            "(check the query or export that wrote it)"
        )
    table, id_column = _with_ids(table, id_column, name, source or "the data")
    if inputs.is_tokens:
        return normalise_tokens(table, inputs, task, str(dest)), id_column
    if task in ("language_modeling", "multiple_choice"):
        raise EvalsetError(f"{dest}: inputs: a {task} evalset reads token ids: give --tokens")
    return _normalise_inputs(table, inputs, dest), id_column


def _check_rows(
    table: pa.Table,
    target: str,
    slices: Sequence[str],
    id_column: str,
    task: str,
    inputs: InputsSpec,
    source: str,
) -> None:
    """The named columns exist, ids are unique, and every label and value is usable."""
    for column, role in [(target, "target"), *((s, "slices") for s in slices)]:
        if column not in table.column_names:
            raise EvalsetError(
                f"{role}: column {column!r} not in the data{did_you_mean(column, table.column_names)}"
            )
    if table.column(id_column).null_count or len(pc.unique(table.column(id_column))) != len(table):
        raise EvalsetError(f"id_column: {id_column!r} must be unique and non-null")
    _check_labels(table, target, task, source)
    _check_values(table, inputs.column, source)
    check_task_target(table, task, target, inputs, source)


def _task_classes(
    table: pa.Table,
    target: str,
    task: str,
    classes: Sequence[Any] | None,
    outputs: str,
    source: str,
) -> Sequence[Any] | None:
    """A classifier's classes (see ``_classes``); no classes nor probabilities for regression."""
    if task == "classification":
        classes = _classes(table, target, classes, source)
    elif task == "multilabel":
        classes = multilabel_classes(table, target, classes, source)
    elif classes is not None:
        raise EvalsetError(
            f"classes: a {task} evalset has no classes; leave --classes out, or freeze with "
            "--task classification"
        )
    if task != "classification" and outputs != "logits":
        raise EvalsetError(
            "outputs: only a classifier returns probabilities; leave --outputs out of a "
            f"{task} evalset"
        )
    return classes


def _write_folder(table: pa.Table, dest: Path, described: EvalsetSpec) -> EvalsetSpec:
    """Write the evalset aside, then rename it into place: the folder appears whole or not at all.

    ``described`` is the manifest as the caller describes the data; the files, schema, identity
    (under ``IDENTITY_VERSION``) and time of freezing are filled in here, once the data is written.
    """
    tmp = Path(
        tempfile.mkdtemp(
            dir=dest.parent if dest.parent.exists() else None, prefix=f".{described.name}."
        )
    )
    try:
        tmp.chmod(shared_mode(folder=True))  # mkdtemp's folder is private; the evalset is shared
        (tmp / DATA_DIR).mkdir()
        pq.write_table(table, tmp / DATA_DIR / DATA_FILE, compression="zstd")
        digest, size = sha256_file(tmp / DATA_DIR / DATA_FILE)
        files = [DataFile(path=f"{DATA_DIR}/{DATA_FILE}", sha256=digest, size=size)]
        spec = described.model_copy(
            update={
                # Pinned as read back: Parquet renames list items, so this is what loads will see.
                "schema_": {
                    f.name: str(f.type) for f in pq.read_schema(tmp / DATA_DIR / DATA_FILE)
                },
                "files": files,
                "frozen_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        fields = spec.result_fields()
        spec = spec.model_copy(
            update={
                "identity_version": IDENTITY_VERSION,
                "evalset_sha256": evalset_identity(files, fields, IDENTITY_VERSION),
                "field_sha256": field_digests(fields),
            }
        )
        _write_suite(tmp, table, spec)
        manifest = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        (tmp / MANIFEST).write_text(
            yaml.safe_dump(manifest, sort_keys=False, width=100, default_flow_style=None)
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("froze evalset %s v%d (%d rows) in %s", spec.name, spec.version, len(table), dest)
    return spec


def _write_suite(folder: Path, table: pa.Table, spec: EvalsetSpec) -> None:
    """Generate the expectation suite the data must meet at every load, and write it."""
    from evalsentry.evalsets.validation import build_suite, list_columns, validation_frame

    inputs = spec.inputs
    suite = build_suite(
        validation_frame(table, list_columns(spec)),
        name=f"{spec.name}-v{spec.version}",
        id_column=spec.id_column,
        target=spec.target,
        task=spec.task,
        classes=spec.classes,
        tensor_column=inputs.column,
        tensor_size=inputs.size if inputs.column else None,
        feature_columns=inputs.columns or [],
        sequence_columns=[c for c in list_columns(spec) if c != inputs.column],
    )
    (folder / SUITE).write_text(json.dumps(suite, indent=2, sort_keys=True) + "\n")


def seal_evalset(name_or_path: str | Path, evalsets_dir: str | Path | None = None) -> EvalsetSpec:
    """Pin a version-1 evalset's results-changing fields as they are now, keeping its identity.

    Writes ``field_sha256`` into the manifest; ``evalset_sha256`` (what the history records)
    stays the same. Everything that can be checked is checked first (the data files, the
    classes against the suite, the identity); ``metrics`` and ``slices`` are taken as they are
    now, so look at them (``evalset show``) before sealing.

    Raises:
        EvalsetError: the evalset is not version 1 or is sealed already.
        EvalsetTampered: the files, classes or identity do not verify.
    """
    folder = evalset_folder(name_or_path, evalsets_dir)
    spec = read_spec(folder)
    fs, base = filesystem(folder)
    path, where = join(base, MANIFEST), join(folder, MANIFEST)
    if spec.identity_version != 1 or spec.field_sha256 is not None:
        raise EvalsetError(
            f"{where}: field_sha256: the fields are pinned already "
            f"(identity version {spec.identity_version}); nothing to seal"
        )
    verify_data_files(folder, spec)
    check_v1_classes(spec, where, lambda: read_suite(folder))
    if spec.identity() != spec.evalset_sha256:
        raise EvalsetTampered(where, spec.evalset_sha256, spec.identity())
    pins = yaml.safe_dump({"field_sha256": field_digests(spec.result_fields())}, sort_keys=False)
    # Appended, so the manifest's text (and its review diff) otherwise stays as it was.
    sealed = read_manifest_text(folder).rstrip("\n") + "\n" + pins
    write_atomic(fs, path, sealed.encode())  # the manifest keeps its mode
    log.info("sealed evalset %s: %s pinned", spec.name, ", ".join(RESULT_FIELDS))
    return read_spec(folder)


def read_source(path: str | Path) -> pa.Table:
    """Read the rows to freeze from a Parquet or CSV file."""
    source = Path(path)
    if not source.is_file():
        raise EvalsetError(f"{source}: source file not found")
    if source.suffix.lower() == ".csv":
        import pyarrow.csv as pcsv

        return pcsv.read_csv(source)
    if source.suffix.lower() in (".parquet", ".pq"):
        return pq.read_table(source)
    raise EvalsetError(f"{source}: unsupported source format; use a .parquet or .csv file")


def _with_ids(
    table: pa.Table, id_column: str | None, name: str, source: str
) -> tuple[pa.Table, str]:
    if id_column is not None:
        if id_column not in table.column_names:
            raise EvalsetError(
                f"id_column: {id_column!r} not in the data{did_you_mean(id_column, table.column_names)}"
            )
        return table, id_column
    if "id" in table.column_names:  # the generated ids would take its name
        raise EvalsetError(
            f"{source}: id_column: the data has a column 'id' but no id column is named; pass "
            "--id id "
            "(id_column='id') to key the rows by it, or rename it"
        )
    # A deterministic id from the row position: the same data frozen twice gets the same ids.
    ids = pa.array([f"{name}-{i:06d}" for i in range(len(table))])
    return table.add_column(0, "id", ids), "id"


def _normalise_inputs(table: pa.Table, inputs: InputsSpec, dest: Path) -> pa.Table:
    """Check the inputs spec against the data; store a tensor column as a fixed-size list."""
    wanted = inputs.columns if inputs.columns is not None else [inputs.column]
    for column in wanted:
        if column not in table.column_names:
            raise EvalsetError(
                f"{dest}: inputs: column {column!r} not in the data"
                f"{did_you_mean(str(column), table.column_names)}"
            )
    if inputs.columns is not None:
        for column in inputs.columns:
            if not pa.types.is_integer(table.column(column).type) and not pa.types.is_floating(
                table.column(column).type
            ):
                raise EvalsetError(f"{dest}: inputs: feature column {column!r} is not numeric")
        return table
    column = str(inputs.column)
    array = table.column(column).combine_chunks()
    if not (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or pa.types.is_fixed_size_list(array.type)
    ):
        raise EvalsetError(
            f"{dest}: inputs: column {column!r} is {array.type}, not a list of numbers"
        )
    if array.null_count:
        missing = np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))
        raise EvalsetError(
            f"{dest}: inputs: column {column!r} is null in {len(missing)} row(s), first at row "
            f"{missing[0]}; drop or fill those rows, then freeze again"
        )
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
    if len(lengths) and (np.nanmin(lengths) != inputs.size or np.nanmax(lengths) != inputs.size):
        bad = int(np.flatnonzero(lengths != inputs.size)[0])
        raise EvalsetError(
            f"{dest}: inputs: shape {inputs.shape} needs {inputs.size} values per row, "
            f"row {bad} of {column!r} has {lengths[bad]}"
        )
    values = array.flatten().cast(_TENSOR_DTYPES[inputs.dtype])
    fixed = pa.FixedSizeListArray.from_arrays(values, inputs.size)
    return table.set_column(table.column_names.index(column), column, fixed)


def _check_labels(table: pa.Table, target: str, task: str, source: str) -> None:
    """Every row needs a usable label: not null, not NaN (nor inf for regression)."""
    column = table.column(target)
    problem = ""
    bad = pc.is_null(column, nan_is_null=True)
    if pc.any(bad).as_py():
        problem = "null or NaN"
    elif task == "regression" and pa.types.is_floating(column.type):
        bad = pc.invert(pc.is_finite(column))
        problem = "infinite" if pc.any(bad).as_py() else ""
    if problem:
        rows = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
        raise EvalsetError(
            f"{source}: target column {target!r} has {len(rows)} {problem} label(s), first at row "
            f"{rows[0]}; drop those rows or fill in their labels, then freeze again"
        )


def _check_values(table: pa.Table, tensor_column: str | None, source: str) -> None:
    """No nulls, NaN in any column or non-finite tensor values: the generated suite refuses them."""
    for name in table.column_names:
        column = table.column(name)
        if name == tensor_column:
            values = column.combine_chunks()
            bad_values = pc.invert(pc.is_finite(values.flatten()))
            rows = pc.list_parent_indices(values).filter(bad_values).to_numpy()
            what = "NaN or infinite values"
        else:
            bad = pc.is_null(column, nan_is_null=True)
            rows = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
            what = "null or NaN values"
        if len(rows):
            raise EvalsetError(
                f"{source}: column {name!r} has {what} in {len(np.unique(rows))} row(s), first at "
                f"row {rows.min()}; the evalset's expectations allow none: drop or fix those "
                "rows, then freeze again"
            )


def _classes(table: pa.Table, target: str, classes: Sequence[Any] | None, source: str) -> list[Any]:
    """The class list: as given (the same set as the labels) or the labels in natural order."""
    column = table.column(target)
    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if not (
        pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
    ):
        raise EvalsetError(
            f"{source}: target column {target!r} is {column.type}; classification labels must be "
            "integers or strings: cast the column, then freeze again"
        )
    labels = set(pc.unique(column).to_pylist())
    if classes is None:
        return sorted(labels, key=natural_key)
    given = [_as_label(c, pa.types.is_integer(kind), target) for c in classes]
    repeated = sorted({str(c) for c in given if given.count(c) > 1})
    if repeated:
        raise EvalsetError(
            f"classes: {', '.join(repeated)} listed more than once; each class may appear once"
        )
    unknown = sorted(labels - set(given), key=natural_key)
    if unknown:
        raise EvalsetError(
            f"{source}: target column {target!r} has label(s) {_listed(unknown)} not among the "
            f"classes {_listed(given)}; add them to --classes (the order of the model's logit "
            "columns) or drop their rows, then freeze again"
        )
    missing = [c for c in given if c not in labels]
    if missing:
        raise EvalsetError(
            f"{source}: classes {_listed(missing)} have no example in target column {target!r}; "
            "a class the evalset never shows cannot be measured (and the suite pins the label "
            "set): remove them from --classes, or add rows of them, then freeze again"
        )
    return given


def _as_label(value: object, integer: bool, target: str) -> int | str:
    """A class as the label column holds it: ``'3'`` is the integer 3 for an integer column."""
    if not integer:
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise EvalsetError(
            f"classes: {value!r} is not an integer, and target column {target!r} holds integer "
            "labels; list the labels as they are in the data, e.g. --classes 0,1,2"
        ) from None


def _listed(values: Sequence[object], shown: int = 5) -> str:
    """``'a', 'b'`` (strings quoted, integers bare), the first ``shown`` and a count of the rest."""
    text = ", ".join(repr(v) for v in values[:shown])
    return text + (f" (and {len(values) - shown} more)" if len(values) > shown else "")
