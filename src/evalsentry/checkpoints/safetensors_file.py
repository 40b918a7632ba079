"""Checkpoints in the ``safetensors`` format: tensors and a text header, no code at all.

A ``.safetensors`` file is an 8-byte little-endian header length, a JSON header (each tensor's
dtype, shape and byte range, and an optional ``__metadata__`` of strings), then the raw tensor
bytes. Nothing in it is unpickled or run, which makes it the safest format evalsentry reads.

The lineage travels in the header's metadata as JSON under ``lineage`` (``save_checkpoint``
writes it there; a team writing with ``safetensors.torch.save_file(state, path,
metadata={"lineage": json.dumps(...)})`` does the same), and ``metrics`` likewise; a file
without it is a bare state dict, registered with ``--lineage FILE`` like a bare ``torch.save``.
The file is recognised by its bytes, not its name.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from evalsentry.errors import CheckpointCorrupt, UsageError

if TYPE_CHECKING:
    import torch

#: The metadata keys evalsentry reads and writes (JSON text each).
LINEAGE_KEY = "lineage"
METRICS_KEY = "metrics"
SUFFIX = ".safetensors"


def is_safetensors(source: IO[bytes]) -> bool:
    """Whether ``source`` starts as a safetensors file does: a header length, then ``{``."""
    source.seek(0)
    head = source.read(9)
    source.seek(0)
    if len(head) < 9 or head[8:9] != b"{":
        return False
    (length,) = struct.unpack("<Q", head[:8])
    # A torch.save zip has its first entry's compression method there (0: stored), never "{".
    return int(length) >= 2


def read_safetensors(file: Path, source: IO[bytes], map_location: str) -> dict[str, Any]:
    """The payload of a safetensors checkpoint: ``{model_state_dict, lineage?, metrics?}``.

    Raises:
        CheckpointCorrupt: the header or the tensors cannot be read, or its lineage or metrics
            metadata is not JSON.
    """
    from safetensors.torch import load

    data = source.read()
    try:
        state = load(data)
        metadata = _metadata(data)
    except Exception as exc:  # noqa: BLE001 - damaged bytes surface as several exception types
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise CheckpointCorrupt(
            file, f"not a readable safetensors file: {detail or type(exc).__name__}"
        ) from None
    if map_location != "cpu":
        state = {name: tensor.to(map_location) for name, tensor in state.items()}
    payload: dict[str, Any] = {"model_state_dict": state}
    for key in (LINEAGE_KEY, METRICS_KEY):
        if key in metadata:
            payload[key] = _json_field(file, key, metadata[key])
    return payload


def _metadata(data: bytes) -> dict[str, str]:
    """The header's ``__metadata__`` (strings to strings), empty when there is none."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise ValueError("__metadata__ is not a mapping")
    return {str(k): str(v) for k, v in metadata.items()}


def _json_field(file: Path, key: str, text: str) -> Any:
    """A metadata value decoded from JSON; one line naming the key when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointCorrupt(
            file,
            f"its metadata {key!r} is not JSON ({exc.msg} at character {exc.pos}); write it "
            f"with json.dumps(...)",
        ) from None


def safetensors_bytes(
    state: Mapping[str, torch.Tensor],
    *,
    lineage: Mapping[str, Any],
    metrics: Mapping[str, float],
    optimizer: object | None = None,
) -> bytes:
    """The weights, lineage and metrics as one safetensors file's bytes.

    A tensor sharing storage with an earlier one (tied weights) is written as a copy: the format
    holds no aliasing, and a strict load fills both names with the same values.

    Raises:
        UsageError: an optimizer was given (its state is no flat mapping of tensors).
    """
    from safetensors.torch import save

    if optimizer is not None:
        raise UsageError(
            "an optimizer's state cannot be kept in a .safetensors file; save it apart "
            "(torch.save(optimizer.state_dict(), ...)) or write a .pt checkpoint"
        )
    seen: set[int] = set()
    tensors = {}
    for name, tensor in state.items():
        storage = tensor.untyped_storage().data_ptr()
        shared = storage in seen or not tensor.is_contiguous()
        seen.add(storage)
        tensors[name] = tensor.clone().contiguous() if shared else tensor
    metadata = {
        "format": "pt",
        LINEAGE_KEY: json.dumps(lineage, sort_keys=True),
        METRICS_KEY: json.dumps(dict(metrics), sort_keys=True),
    }
    return bytes(save(tensors, metadata=metadata))
