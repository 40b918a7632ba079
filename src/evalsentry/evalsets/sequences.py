"""Freezing token sequences and the newer tasks' targets: what freeze checks before it writes.

Token ids are stored as ``list<int64>`` (exact at any vocabulary size; float ids are exact only
below 2**24), continuations as ``list<list<int64>>``. Every row must be usable as stated: at
least one token (a language-modelling row two, one to read and one to predict), no negative
id, none longer than ``max_length`` unless a truncation side is stated, a multiple-choice
answer among the row's choices. A row that is not is named by its id, with the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from evalsentry.errors import EvalsetError, did_you_mean
from evalsentry.evalsets.inputs import InputsSpec, ragged
from evalsentry.evalsets.targets import MAX_LABELS, natural_key


def normalise_tokens(table: pa.Table, inputs: InputsSpec, task: str, where: str) -> pa.Table:
    """Check a token evalset's input columns and store them as int64 lists.

    Raises:
        EvalsetError: a missing column, a non-integer list, a null or empty row, a negative
            id, a row too long to keep, a continuation that truncation would cut.
    """
    for column in inputs.columns_read():
        if column not in table.column_names:
            raise EvalsetError(
                f"{where}: inputs: column {column!r} not in the data"
                f"{did_you_mean(column, table.column_names)}"
            )
    tokens = str(inputs.tokens)
    minimum = 2 if task == "language_modeling" else 1
    table = _as_int64_lists(table, tokens, where, minimum=minimum)
    lengths = pc.list_value_length(table.column(tokens)).to_numpy(zero_copy_only=False)
    if inputs.choices is not None:
        table = _as_int64_lists(table, inputs.choices, where, minimum=2, nested=True)
        longest = _longest_choice(table.column(inputs.choices))
        if len(longest) and longest.max() >= int(inputs.max_length or 0):
            row = int(np.argmax(longest >= int(inputs.max_length or 0)))
            raise EvalsetError(
                f"{where}: inputs: row {row} has a continuation of {longest[row]} tokens, "
                f"leaving no room for its context within max_length {inputs.max_length}"
            )
        lengths = lengths + longest
        if inputs.truncation == "right":
            raise EvalsetError(
                f"{where}: truncation: right would cut the continuations being scored; "
                "use --truncation left (the context loses its first tokens) or error"
            )
    elif task == "multiple_choice":
        raise EvalsetError(f"{where}: inputs: a multiple-choice evalset needs a choices column")
    if (
        inputs.truncation == "error"
        and len(lengths)
        and lengths.max() > int(inputs.max_length or 0)
    ):
        row = int(np.argmax(lengths > int(inputs.max_length or 0)))
        raise EvalsetError(
            f"{where}: inputs: row {row} has {lengths[row]} tokens, more than max_length "
            f"{inputs.max_length}; raise --max-length, or state which side to cut with "
            "--truncation left|right"
        )
    for columns in (inputs.named or {}).values():
        for column in columns:
            kind = table.column(column).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                raise EvalsetError(f"{where}: inputs: named column {column!r} is not numeric")
    return table


def _as_int64_lists(
    table: pa.Table, name: str, where: str, *, minimum: int, nested: bool = False
) -> pa.Table:
    """``name`` as ``list<int64>`` (or ``list<list<int64>>``), every row at least ``minimum`` long."""
    array = table.column(name).combine_chunks()
    inner = array.type.value_type if _is_list(array.type) else None
    leaf = inner.value_type if nested and inner is not None and _is_list(inner) else inner
    if leaf is None or (nested and not _is_list(inner)) or not pa.types.is_integer(leaf):
        wanted = "lists of token-id lists" if nested else "lists of integer token ids"
        raise EvalsetError(f"{where}: inputs: column {name!r} is {array.type}, not {wanted}")
    if array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise EvalsetError(f"{where}: inputs: column {name!r} is null at row {row}; drop it")
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
    if len(lengths) and lengths.min() < minimum:
        row = int(np.argmax(lengths < minimum))
        what = "choices" if nested else "tokens"
        raise EvalsetError(
            f"{where}: inputs: row {row} of {name!r} has {lengths[row]} {what}; each needs at "
            f"least {minimum}: drop the row or fix it, then freeze again"
        )
    target_type = pa.list_(pa.list_(pa.int64())) if nested else pa.list_(pa.int64())
    cast = array.cast(target_type)
    values = ragged(cast.flatten() if nested else cast).values
    if nested:
        empty = pc.list_value_length(cast.flatten()).to_numpy(zero_copy_only=False) < 1
        if empty.any():
            row = int(pc.list_parent_indices(cast).to_numpy()[int(np.argmax(empty))])
            raise EvalsetError(
                f"{where}: inputs: row {row} of {name!r} has an empty continuation; drop it"
            )
    if values.size and values.min() < 0:
        raise EvalsetError(f"{where}: inputs: column {name!r} holds a negative token id")
    return table.set_column(table.column_names.index(name), name, cast)


def _is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _longest_choice(column: pa.ChunkedArray) -> np.ndarray:
    """Each row's longest continuation, in tokens."""
    array = column.combine_chunks()
    inner = pc.list_value_length(array.flatten()).to_numpy(zero_copy_only=False)
    rows = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
    longest = np.zeros(len(array), np.int64)
    np.maximum.at(longest, rows, inner)
    return longest


def check_task_target(
    table: pa.Table, task: str, target: str, inputs: InputsSpec, where: str
) -> None:
    """A multiple-choice answer indexes the row's choices; a language-modelling target scores.

    Raises:
        EvalsetError: naming the first bad row and the fix.
    """
    if task == "language_modeling" and inputs.tokens is None:
        raise EvalsetError(f"{where}: inputs: a language-modelling evalset needs --tokens")
    if task == "multiple_choice":
        kind = table.column(target).type
        if not pa.types.is_integer(kind):
            raise EvalsetError(
                f"{where}: target column {target!r} is {kind}; a multiple-choice answer is the "
                "index of the true continuation among the row's choices (0, 1, ...)"
            )
        answers = table.column(target).to_numpy()
        counts = pc.list_value_length(table.column(str(inputs.choices))).to_numpy(
            zero_copy_only=False
        )
        bad = np.flatnonzero((answers < 0) | (answers >= counts))
        if bad.size:
            raise EvalsetError(
                f"{where}: target column {target!r}: row {bad[0]}'s answer {answers[bad[0]]} is "
                f"not among its {counts[bad[0]]} choices (0 to {counts[bad[0]] - 1})"
            )
    elif task == "language_modeling" and target != inputs.tokens:
        _check_prompt_lengths(table, target, inputs, where)


def _check_prompt_lengths(table: pa.Table, target: str, inputs: InputsSpec, where: str) -> None:
    kind = table.column(target).type
    if not pa.types.is_integer(kind):
        raise EvalsetError(
            f"{where}: target column {target!r} is {kind}; a language-modelling target is the "
            f"token column itself ({inputs.tokens!r}: every token scored) or an integer column: "
            "the length of each row's prompt, whose tokens are not scored"
        )
    prompt = table.column(target).to_numpy()
    lengths = pc.list_value_length(table.column(str(inputs.tokens))).to_numpy(zero_copy_only=False)
    if inputs.truncation == "right":
        lengths = np.minimum(lengths, int(inputs.max_length or 0))
    bad = np.flatnonzero((prompt < 0) | (prompt >= lengths))
    if bad.size:
        raise EvalsetError(
            f"{where}: target column {target!r}: row {bad[0]}'s prompt of {prompt[bad[0]]} "
            f"tokens leaves none of its {lengths[bad[0]]} to score; drop the row or shorten it"
        )


def multilabel_classes(
    table: pa.Table, target: str, classes: Sequence[Any] | None, where: str
) -> list[Any]:
    """A multi-label target's label list: as given, or every label seen in natural order."""
    column = table.column(target).combine_chunks()
    if not _is_list(column.type):
        raise EvalsetError(
            f"{where}: target column {target!r} is {column.type}; a multi-label target is a "
            "list of labels per row (an empty list: none applies)"
        )
    seen = set(column.flatten().to_pylist())
    labels = list(classes) if classes is not None else sorted(seen, key=natural_key)
    unknown = sorted(seen - set(labels), key=str)
    if unknown:
        raise EvalsetError(
            f"{where}: target column {target!r} has label(s) {unknown[:5]} not among the "
            "classes; add them to --classes or drop them"
        )
    if len(labels) > MAX_LABELS:
        raise EvalsetError(
            f"{where}: {len(labels)} labels; a multi-label evalset holds at most {MAX_LABELS}"
        )
    return labels
