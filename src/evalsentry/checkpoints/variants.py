"""Serving variants: a registered version made cheaper by a transform evalsentry names and owns.

A variant is a checkpoint like any other, built in three steps, none of them named by the file:
the trusted factory builds the float model, evalsentry applies the transform its registry entry
pins (``lineage.model.transform``), and the variant's own weights are loaded strictly into it.

- ``dynamic-int8``: every ``nn.Linear`` gets int8 weights (one scale per output row) and
  quantizes its input to int8 at each call (torchao's ``quantize_`` with
  ``Int8DynamicActivationInt8WeightConfig``; CPU and CUDA). Convolutions, recurrent layers and
  embeddings stay float.
- ``fp16`` / ``bf16``: every floating parameter and buffer in half precision; floating inputs
  are cast to it on the way in and outputs back to float32 on the way out, so every metric is
  computed as for the float model. float16 has no fast kernels on a CPU: use it on CUDA.

A quantized weight is a tensor subclass holding tensors of its own (int8 data, scales); the file
holds those as plain tensors (``<key>:<part>``), so a variant is a plain state dict, in a torch
file or in safetensors, read with ``weights_only=True`` like every checkpoint.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from evalsentry.errors import StateDictMismatch, UsageError

if TYPE_CHECKING:
    import torch

#: Each transform evalsentry applies, and what it does (shown by ``register --help``, the README).
TRANSFORMS: dict[str, str] = {
    "dynamic-int8": "int8 weights and int8 activations quantized per call in every nn.Linear",
    "fp16": "float16 weights; inputs cast in, outputs cast back to float32 (CUDA; slow on a CPU)",
    "bf16": "bfloat16 weights; inputs cast in, outputs cast back to float32",
}
#: Separates a quantized weight's key from the name of one of its parts in a variant's file.
PART = ":"
_HALF = {"fp16": "float16", "bf16": "bfloat16"}


class UnknownTransform(UsageError):
    """A transform evalsentry does not have (exit 2)."""

    def __init__(self, name: object, where: str = "--transform") -> None:
        super().__init__(
            f"{where}: {name!r} is not a transform evalsentry applies; use one of "
            f"{', '.join(TRANSFORMS)}"
        )


def check_transform(name: object, where: str = "--transform") -> str:
    """``name`` when it is one of :data:`TRANSFORMS`; else :class:`UnknownTransform`."""
    if not isinstance(name, str) or name not in TRANSFORMS:
        raise UnknownTransform(name, where)
    return name


def apply_transform(model: torch.nn.Module, name: str) -> torch.nn.Module:
    """``model`` with the transform ``name`` applied in place (and returned), in eval mode."""
    check_transform(name)
    model.eval()
    if name == "dynamic-int8":
        quantize_, config = _torchao()
        quantize_(model, config())
        if not any(_parts(value) for value in model.state_dict().values()):
            raise UsageError(
                f"dynamic-int8: {type(model).__name__} has no nn.Linear to quantize "
                "(convolutions, recurrent layers and embeddings stay float); try bf16"
            )
        return model
    import torch

    dtype = getattr(torch, _HALF[name])
    model.to(dtype)
    model.register_forward_pre_hook(_inputs_to(dtype), with_kwargs=True)
    model.register_forward_hook(_outputs_to_float32)
    return model


def _torchao() -> tuple[Any, Any]:
    """Torchao's ``quantize_`` and its int8 dynamic configuration, imported without its noise.

    torchao logs a warning for each CUDA kernel library it cannot load on a machine without
    CUDA; none of them is used here.
    """
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
    return quantize_, Int8DynamicActivationInt8WeightConfig


def _inputs_to(dtype: torch.dtype) -> Any:
    """A forward pre-hook casting floating tensor arguments to ``dtype`` (ids and masks kept)."""

    def hook(
        _module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (
            tuple(_cast(a, dtype) for a in args),
            {k: _cast(v, dtype) for k, v in kwargs.items()},
        )

    return hook


def _outputs_to_float32(_module: torch.nn.Module, _args: Any, output: Any) -> Any:
    import torch

    return _cast(output, torch.float32)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """``value`` with its floating tensors (in tuples, lists and dicts too) cast to ``dtype``."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_cast(v, dtype) for v in value))
    if isinstance(value, tuple | list):
        return type(value)(_cast(v, dtype) for v in value)
    if isinstance(value, dict):  # a dict subclass (an output class) keeps its class
        cast = copy.copy(value)
        for key, item in value.items():
            cast[key] = _cast(item, dtype)
        return cast
    return value


def _parts(tensor: Any) -> list[str] | None:
    """The names of the plain tensors a tensor subclass is made of; None for a plain tensor."""
    flatten = getattr(type(tensor), "__tensor_flatten__", None)
    if flatten is None:
        return None
    names, _ = tensor.__tensor_flatten__()
    return list(names)


def _flat(model: torch.nn.Module, *, keep_vars: bool = False) -> Iterator[tuple[str, Any]]:
    """The model's state as (key, value) pairs, a quantized weight as its parts (``key:part``)."""
    for key, value in model.state_dict(keep_vars=keep_vars).items():
        parts = _parts(value)
        if parts is None:
            yield key, value
        else:
            yield from ((f"{key}{PART}{part}", getattr(value, part)) for part in parts)


def portable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights as plain CPU tensors, a quantized weight as its parts.

    Raises:
        StateDictMismatch: a value that is not a tensor (PyTorch's deprecated
            ``torch.ao.quantization`` modules keep packed parameters and dtypes there).

    """
    import torch

    state: dict[str, torch.Tensor] = {}
    for key, value in _flat(model):
        if not isinstance(value, torch.Tensor):
            raise StateDictMismatch(
                type(model).__name__,
                [],
                [],
                f"{key!r} is a {type(value).__name__}, not a tensor: a model quantized with "
                "torch.ao.quantization cannot be saved; save the float model and register a "
                "variant (evalsentry register --variant-of MODEL@vN --transform dynamic-int8)",
            )
        state[key] = value.detach().cpu()
    return state


def load_portable_state(model: torch.nn.Module, state: Mapping[str, Any], path: object) -> None:
    """Copy ``state`` (see :func:`portable_state`) into the transformed ``model``, strictly.

    Every key, shape and dtype must match the transformed model's own.

    Raises:
        StateDictMismatch: naming the missing, unexpected or mismatched tensors.

    """
    import torch

    targets = dict(_flat(model, keep_vars=True))
    missing = [k for k in targets if k not in state]
    unexpected = [str(k) for k in state if k not in targets]
    if missing or unexpected:
        raise StateDictMismatch(path, missing, unexpected)
    for key, target in targets.items():
        given = state[key]
        if not isinstance(given, torch.Tensor):
            raise StateDictMismatch(
                path, [], [], f"{key!r} is a {type(given).__name__}, not a tensor"
            )
        if given.shape != target.shape or given.dtype != target.dtype:
            raise StateDictMismatch(
                path,
                [],
                [],
                f"tensor {key!r} is {_described(given)} where the variant's is {_described(target)}",
            )
    with torch.no_grad():
        for key, target in targets.items():
            target.copy_(state[key])


def _described(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"


_REF = re.compile(r"(?P<model>[^@\s]+)@v(?P<version>[1-9]\d*)")


def parse_ref(ref: object, where: str = "--variant-of") -> tuple[str, int]:
    """``("digits", 2)`` from ``digits@v2``; a one-line refusal for anything else."""
    match = _REF.fullmatch(ref.strip()) if isinstance(ref, str) else None
    if match is None:
        raise UsageError(f"{where}: {ref!r} names no version; write MODEL@vN (e.g. digits@v2)")
    return match["model"], int(match["version"])
