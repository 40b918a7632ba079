"""Freezing data into a hash-pinned evalset folder (the write side of ``evalsets``)."""

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

from evalsentry.errors import EvalsetError, did_you_mean
from evalsentry.evalsets import (
    DATA_DIR,
    DATA_FILE,
    MANIFEST,
    SUITE,
    DataFile,
    EvalsetSpec,
    InputsSpec,
    evalset_identity,
)
from evalsentry.names import check_name
from evalsentry.storage import sha256_file

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

_TENSOR_DTYPES = {"float32": pa.float32(), "float64": pa.float64(), "float16": pa.float16()}


def freeze_evalset(
    data: pa.Table | pd.DataFrame,
    dest: str | Path,
    *,
    name: str,
    task: Literal["classification", "regression"],
    target: str,
    inputs: InputsSpec,
    id_column: str | None = None,
    slices: Sequence[str] = (),
    classes: Sequence[Any] | None = None,
    metrics: Sequence[str] | None = None,
    version: int = 1,
    description: str = "",
    provenance: str = "",
    license: str = "",
) -> EvalsetSpec:
    """Freeze data into ``dest``: Parquet, manifest with hashes, generated expectation suite.

    The folder appears whole or not at all (written aside, then renamed into place), and an
    existing evalset is never overwritten: a new version is a new folder.

    Raises:
        EvalsetError: ``dest`` exists, or the data does not match the inputs spec, target, id
            or slice columns.
    """
    from evalsentry.validation import build_suite, validation_frame

    check_name("evalset", name)
    dest = Path(dest)
    if dest.exists():
        raise EvalsetError(
            f"{dest}: an evalset is already frozen here; frozen data is never overwritten. "
            f"Freeze the new data as a new version, e.g. --name {name}-v{version + 1} --version {version + 1}"
        )
    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
    table, id_column = _with_ids(table, id_column, name)
    table = _normalise_inputs(table, inputs, dest)
    for column, role in [(target, "target"), *((s, "slices") for s in slices)]:
        if column not in table.column_names:
            raise EvalsetError(
                f"{role}: column {column!r} not in the data{did_you_mean(column, table.column_names)}"
            )
    if table.column(id_column).null_count or len(pc.unique(table.column(id_column))) != len(table):
        raise EvalsetError(f"id_column: {id_column!r} must be unique and non-null")
    if task == "classification" and classes is None:
        classes = sorted(pc.unique(table.column(target)).to_pylist())
    tmp = Path(
        tempfile.mkdtemp(dir=dest.parent if dest.parent.exists() else None, prefix=f".{name}.")
    )
    try:
        (tmp / DATA_DIR).mkdir()
        pq.write_table(table, tmp / DATA_DIR / DATA_FILE, compression="zstd")
        digest, size = sha256_file(tmp / DATA_DIR / DATA_FILE)
        files = [DataFile(path=f"{DATA_DIR}/{DATA_FILE}", sha256=digest, size=size)]
        spec = EvalsetSpec(
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
            num_rows=len(table),
            # Pinned as read back: Parquet renames list items, so this is what loads will see.
            schema={f.name: str(f.type) for f in pq.read_schema(tmp / DATA_DIR / DATA_FILE)},
            files=files,
            evalset_sha256=evalset_identity(files, task, inputs, target, id_column),
            frozen_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        frame = validation_frame(table, inputs.column)
        suite = build_suite(
            frame,
            name=f"{name}-v{version}",
            id_column=id_column,
            target=target,
            task=task,
            classes=spec.classes,
            tensor_column=inputs.column,
            tensor_size=inputs.size if inputs.column else None,
            feature_columns=inputs.columns or [],
        )
        (tmp / SUITE).write_text(json.dumps(suite, indent=2, sort_keys=True) + "\n")
        manifest = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        (tmp / MANIFEST).write_text(
            yaml.safe_dump(manifest, sort_keys=False, width=100, default_flow_style=None)
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("froze evalset %s v%d (%d rows) in %s", name, version, len(table), dest)
    return spec


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


def _with_ids(table: pa.Table, id_column: str | None, name: str) -> tuple[pa.Table, str]:
    if id_column is not None:
        if id_column not in table.column_names:
            raise EvalsetError(
                f"id_column: {id_column!r} not in the data{did_you_mean(id_column, table.column_names)}"
            )
        return table, id_column
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
