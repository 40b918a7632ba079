"""The model contract's input side: what an evalset hands a model, stated at freeze.

Three forms (``InputsSpec.contract`` states each in one line):

- feature ``columns``: one tensor ``[N, F]``, one column per feature, in the order the manifest
  lists them (the order given at freeze, not the source file's);
- a fixed-size list ``column`` with a ``shape``: each row's values reshaped, row-major, to that
  shape, so ``shape: [1, 8, 8]`` gives ``[N, 1, 8, 8]`` images, channels first;
- token ``tokens``: int64 token-id sequences of varying length (a list column), passed as
  keyword arguments the way sequence models take them: ``model(input_ids=[N, T],
  attention_mask=[N, T], **named)``. Each batch is padded with ``pad_id`` to its longest row
  (``T``), the mask is 1 on real tokens and 0 on padding, and rows are batched by length so
  padding stays small. ``max_length`` and ``truncation`` say what happens to a longer row: its
  tokens are cut from that side, or (``error``) freeze refuses it. ``named`` adds float32
  ``[N, F]`` keyword inputs from feature columns (``{"price": ["open", "close"]}``), and a
  multiple-choice evalset's ``choices`` column holds each row's candidate continuations.

The first two forms pass one positional tensor in ``dtype`` (``float32`` unless frozen
otherwise); token ids are ``int64`` (or ``int32``). All of it is part of the evalset's identity.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsentry.errors import EvalsetError

if TYPE_CHECKING:
    import torch

TOKEN_DTYPES = ("int64", "int32")
#: Keyword names a token evalset passes unless frozen otherwise.
DEFAULT_KEYWORD, DEFAULT_MASK = "input_ids", "attention_mask"


class InputsSpec(BaseModel):
    """Model inputs: feature ``columns``, one list ``column`` + ``shape``, or ``tokens``."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    columns: list[str] | None = None
    column: str | None = None
    shape: list[int] | None = None
    dtype: Literal["float32", "float64", "float16", "int64", "int32"] = "float32"
    #: The token-sequence form (every field below is None in the other two, so their
    #: manifests, and identities, are what they were before it existed).
    tokens: str | None = None
    keyword: str | None = None
    mask: str | None = None
    pad_id: int | None = Field(None, ge=0)
    max_length: int | None = Field(None, ge=1)
    truncation: Literal["left", "right", "error"] | None = None
    named: dict[str, list[str]] | None = None
    choices: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _token_defaults(cls, data: Any) -> Any:
        """A token spec states its keywords and dtype in the manifest, defaults filled in."""
        if isinstance(data, dict) and data.get("tokens") is not None:
            data = {"keyword": DEFAULT_KEYWORD, "mask": DEFAULT_MASK, "dtype": "int64"} | {
                k: v for k, v in data.items() if v is not None
            }
            data.setdefault("truncation", "error")
        return data

    @model_validator(mode="after")
    def _one_form(self) -> InputsSpec:
        forms = [self.columns is not None, self.column is not None, self.tokens is not None]
        if sum(forms) != 1:
            raise ValueError(
                "give one of 'columns' (feature columns), 'column' with 'shape', or 'tokens'"
            )
        if self.column is not None and (not self.shape or any(d < 1 for d in self.shape)):
            raise ValueError("a tensor 'column' needs a 'shape' of positive sizes, e.g. [1, 8, 8]")
        if self.tokens is None:
            extra = [k for k in ("pad_id", "max_length", "named", "choices") if getattr(self, k)]
            if extra or self.dtype in TOKEN_DTYPES:
                what = ", ".join(extra) or f"dtype {self.dtype}"
                raise ValueError(f"{what}: only a 'tokens' input takes it")
            return self
        if self.dtype not in TOKEN_DTYPES:
            raise ValueError(f"token ids are int64 or int32, not {self.dtype}")
        if self.pad_id is None or self.max_length is None:
            raise ValueError("a 'tokens' input needs 'pad_id' and 'max_length'")
        clash = {self.keyword, self.mask} & set(self.named or {})
        if self.keyword == self.mask or clash:
            raise ValueError(f"keyword inputs must have distinct names: {sorted(map(str, clash))}")
        return self

    @property
    def is_tokens(self) -> bool:
        """Whether the model takes token sequences as keyword inputs."""
        return self.tokens is not None

    @property
    def size(self) -> int:
        """Values per example (fixed forms; a token row's length varies)."""
        return math.prod(self.shape) if self.shape else len(self.columns or [])

    @property
    def example_shape(self) -> tuple[int, ...]:
        """Shape of one example's input tensor (fixed forms)."""
        return tuple(self.shape) if self.shape else (len(self.columns or []),)

    @property
    def keywords(self) -> list[str]:
        """The keyword arguments a token model is called with, in order."""
        return [str(self.keyword), str(self.mask), *(self.named or {})]

    def columns_read(self) -> list[str]:
        """Every data column the inputs come from."""
        if self.tokens is None:
            return list(self.columns) if self.columns is not None else [str(self.column)]
        named = [c for cols in (self.named or {}).values() for c in cols]
        return [self.tokens, *([self.choices] if self.choices else []), *named]

    def contract(self) -> str:
        """What a model receives, in one line: ``float32 [N, 30] (30 feature columns)``."""
        if self.tokens is not None:
            return self._token_contract()
        dims = ", ".join(["N", *map(str, self.example_shape)])
        if self.column is not None:
            what = f"list column {self.column!r} reshaped to {list(self.example_shape)}"
        else:
            count = len(self.columns or [])
            what = f"{count} feature column{'s' if count != 1 else ''}"
        return f"{self.dtype} [{dims}] ({what})"

    def _token_contract(self) -> str:
        longer = (
            "longer rows refused"
            if self.truncation == "error"
            else f"longer rows cut on the {self.truncation}"
        )
        named = "".join(f", {k}=float32 [N, {len(v)}]" for k, v in (self.named or {}).items())
        rows = "N x choices" if self.choices else "N"
        return (
            f"model({self.keyword}={self.dtype} [{rows}, T], {self.mask}=[{rows}, T]{named}): "
            f"token ids of list column {self.tokens!r}"
            + (f" followed by each of {self.choices!r}" if self.choices else "")
            + f", padded with {self.pad_id} to the batch's longest row "
            f"(T <= {self.max_length}, {longer})"
        )


def shared_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (zero-copy), without torch's not-writable warning.

    Arrow's buffers are read-only, and so is an array unpickled in the evaluation child (a live
    sample sent to it): torch warns on every such wrap, once per process, and each weekly run's
    child is a new process. The tensor is never written: inference gives each forward a copy of
    its batch.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="The given NumPy array is not writable", category=UserWarning
        )
        return torch.from_numpy(array)


@dataclass(frozen=True)
class Ragged:
    """Variable-length rows as one flat array and offsets: row ``i`` is ``values[o[i]:o[i+1]]``."""

    values: np.ndarray
    offsets: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """Each row's length."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows_holding(self, value: int) -> np.ndarray:
        """The rows in which ``value`` occurs, each once, in order."""
        positions = np.flatnonzero(self.values == value)
        return np.unique(np.searchsorted(self.offsets, positions, side="right") - 1)


@dataclass(frozen=True)
class TokenInputs:
    """A token evalset's inputs in memory, already truncated as frozen.

    ``tokens``: each row's ids. ``choices`` (multiple choice): every continuation in one ragged
    array, row ``i``'s being ``choice_rows.offsets[i]`` to ``choice_rows.offsets[i + 1]``.
    ``named``: the float32 ``[N, F]`` keyword inputs.
    """

    tokens: Ragged
    named: dict[str, np.ndarray]
    choices: Ragged | None = None
    choice_rows: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held (for the GPU residency budget)."""
        return int(self.tokens.values.nbytes + sum(a.nbytes for a in self.named.values()))

    def __len__(self) -> int:
        return len(self.tokens)


def ragged(array: pa.Array | pa.ChunkedArray, dtype: str = "int64") -> Ragged:
    """A list column as flat values and offsets (nulls refused by freeze, so none here)."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    values = array.flatten().to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    return Ragged(values, list_offsets(array))


def list_offsets(array: pa.Array) -> np.ndarray:
    """Where each row of a list array starts in its flattened values, and where the last ends."""
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def truncate(rows: Ragged, max_length: int | np.ndarray, side: str) -> Ragged:
    """Rows longer than ``max_length`` (one for all, or each row's) cut on ``side``.

    ``left`` keeps a row's last tokens, ``right`` its first.
    """
    lengths = rows.lengths
    if not len(lengths) or (lengths <= max_length).all():
        return rows
    kept = np.minimum(lengths, max_length)
    start = rows.offsets[:-1] + (lengths - kept if side == "left" else 0)
    offsets = np.zeros(len(kept) + 1, np.int64)
    np.cumsum(kept, out=offsets[1:])
    return Ragged(rows.values[spans(start, kept)], offsets)


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + lengths[i]`` of every row, concatenated."""
    total = int(lengths.sum())
    row_start = np.repeat(np.cumsum(lengths) - lengths, lengths)
    indices: np.ndarray = np.repeat(starts, lengths) + (np.arange(total) - row_start)
    return indices


def token_inputs(table: pa.Table, inputs: InputsSpec, where: str) -> TokenInputs:
    """A token evalset's inputs as ``inputs`` declares them (``where``: the file errors name)."""
    tokens = _token_column(table, str(inputs.tokens), where)
    choices = choice_rows = None
    if inputs.choices is not None:
        outer = table.column(inputs.choices).combine_chunks()
        choice_rows = list_offsets(outer)  # each row's continuations, as index ranges
        choices = _token_column(table, inputs.choices, where, outer.flatten())
    named = {
        keyword: np.stack([table.column(c).to_numpy() for c in columns], axis=1).astype(np.float32)
        for keyword, columns in (inputs.named or {}).items()
    }
    budget: int | np.ndarray = int(inputs.max_length or 0)
    if choices is not None and choice_rows is not None:  # room for the longest continuation
        owner = np.repeat(np.arange(len(tokens)), np.diff(choice_rows))
        longest = np.zeros(len(tokens), np.int64)
        np.maximum.at(longest, owner, choices.lengths)
        budget = budget - longest
    if inputs.truncation != "error":
        tokens = truncate(tokens, budget, str(inputs.truncation))
    return TokenInputs(tokens, named, choices, choice_rows)


def _token_column(table: pa.Table, name: str, where: str, array: pa.Array | None = None) -> Ragged:
    array = table.column(name).combine_chunks() if array is None else array
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) or not (
        pa.types.is_integer(array.type.value_type)
    ):
        raise EvalsetError(
            f"{where}: inputs: column {name!r} is {array.type}, but token ids need "
            "list<int64>; restore the frozen data"
        )
    return ragged(array)


def inputs_array(table: pa.Table, inputs: InputsSpec, where: str) -> np.ndarray:
    """The model inputs of ``table`` as one array, as ``inputs`` declares them (fixed forms).

    The one decoder, of evalsets and of live drift samples alike; ``where`` is the file errors name.
    """
    if inputs.tokens is not None:
        raise EvalsetError(f"{where}: inputs: token sequences are not one array")
    if inputs.column is not None:
        array = table.column(inputs.column).combine_chunks()
        if not pa.types.is_fixed_size_list(array.type) or array.type.list_size != inputs.size:
            raise EvalsetError(
                f"{where}: inputs: column {inputs.column!r} is {array.type}, but the "
                f"shape {inputs.shape} needs fixed_size_list<{inputs.dtype}>[{inputs.size}]"
            )
        flat: np.ndarray = array.flatten().to_numpy(zero_copy_only=array.null_count == 0)
        return flat.reshape(len(array), *inputs.example_shape)
    columns = [table.column(c).to_numpy() for c in inputs.columns or []]
    return np.stack(columns, axis=1).astype(inputs.dtype)
