"""Self-describing checkpoints: weights plus the lineage needed to rebuild and trust them.

A checkpoint is data, never code: it is read with ``torch.load(weights_only=True)`` only, and
the architecture is rebuilt by calling the importable factory its lineage names.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle  # nosec B403 - only to recognise UnpicklingError; nothing is unpickled here
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalsentry.errors import (
    CheckpointChanged,
    CheckpointCorrupt,
    CheckpointNotFound,
    FactoryError,
    LineageMissing,
    StateDictMismatch,
    UnsafeCheckpoint,
    did_you_mean,
)
from evalsentry.lineage import DataSource, build_lineage, missing_fields
from evalsentry.storage import filesystem, sha256_file, write_atomic

if TYPE_CHECKING:
    import torch

#: Top-level packages a factory may never come from: calling into them with checkpoint-supplied
#: keyword arguments could run commands or fetch code (``subprocess:run``, ``torch.hub:load``).
_FORBIDDEN_FACTORY_ROOTS = frozenset(sys.stdlib_module_names) | {"torch", "builtins"}
_PAYLOAD_KEYS = ("model_state_dict", "lineage")


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint rebuilt into a model, with what it says about itself."""

    model: torch.nn.Module
    lineage: dict[str, Any]
    metrics: dict[str, float]
    sha256: str
    path: str


def import_factory(spec: str) -> Callable[..., Any]:
    """Import ``package.module:callable``.

    Raises:
        FactoryError: malformed, forbidden, unimportable, or missing attribute (did-you-mean).

    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise FactoryError(spec, "use the form 'package.module:callable'")
    if module_name.split(".")[0] in _FORBIDDEN_FACTORY_ROOTS:
        raise FactoryError(spec, "factories from the standard library or torch are not allowed")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise FactoryError(spec, f"cannot import module {module_name!r} ({exc})") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            public = [n for n in dir(target) if not n.startswith("_")]
            raise FactoryError(spec, f"no attribute {part!r}.{did_you_mean(part, public)}")
        target = getattr(target, part)
    if not callable(target):
        raise FactoryError(spec, "is not callable")
    return target  # type: ignore[no-any-return]


def build_model(factory: str, kwargs: Mapping[str, Any] | None = None) -> torch.nn.Module:
    """Call the factory and check that it built a ``torch.nn.Module``."""
    import torch

    try:
        model = import_factory(factory)(**dict(kwargs or {}))
    except TypeError as exc:
        raise FactoryError(factory, f"cannot be called with the recorded kwargs ({exc})") from None
    if not isinstance(model, torch.nn.Module):
        raise FactoryError(factory, f"returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _infer_factory(model: torch.nn.Module) -> str:
    cls = type(model)
    if cls.__module__ == "__main__":
        raise FactoryError(
            f"__main__:{cls.__qualname__}",
            "a class defined in a script cannot be imported later; move it into a module "
            "or pass factory='package.module:callable'",
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def save_checkpoint(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    *,
    metrics: Mapping[str, float],
    config: Mapping[str, Any],
    seed: int,
    data: DataSource,
    optimizer: torch.optim.Optimizer | None = None,
    factory: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
    git_sha: str | None = None,
    repo: str | os.PathLike[str] | None = None,
) -> Path:
    """Write ``{model_state_dict, optimizer_state_dict?, metrics, lineage}`` atomically.

    The factory (default: the model's own class) is called with ``factory_kwargs`` and must
    accept the weights strictly, so a checkpoint that could not be rebuilt fails now, not at
    next week's evaluation.

    Args:
        model: the trained model.
        path: where to write; the folder is created.
        metrics: training/validation metrics worth keeping with the weights.
        config: hyperparameters (JSON-safe).
        seed: the random seed of the run.
        data: training data (manifest file, list of files, or folder) to hash.
        optimizer: its state is saved when given.
        factory: ``package.module:callable`` that rebuilds the architecture.
        factory_kwargs: keyword arguments for the factory.
        git_sha: the code commit; by default read from git in ``repo`` (or the cwd).
        repo: the repository the training code runs in.

    Returns:
        The path written.

    """
    import torch

    factory = factory or _infer_factory(model)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    rebuilt = build_model(factory, factory_kwargs)
    _load_strict(rebuilt, state, path)
    lineage = build_lineage(
        config=config,
        seed=seed,
        data=data,
        factory=factory,
        factory_kwargs=factory_kwargs,
        torch_version=str(torch.__version__),
        git_sha=git_sha,
        git_dirty=False if git_sha else None,
        repo=repo,
    )
    payload: dict[str, Any] = {
        "model_state_dict": state,
        "metrics": {str(k): float(v) for k, v in metrics.items()},
        "lineage": lineage,
    }
    if optimizer is not None:
        payload["optimizer_state_dict"] = optimizer.state_dict()
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    target = Path(path)
    fs, fs_path = filesystem(str(target.resolve()))
    write_atomic(fs, fs_path, buffer.getvalue())
    return target


def read_payload(path: str | os.PathLike[str], map_location: str = "cpu") -> dict[str, Any]:
    """Read a checkpoint's payload with ``weights_only=True``; nothing in it can run.

    Raises:
        CheckpointNotFound, UnsafeCheckpoint, CheckpointCorrupt.

    """
    import torch

    file = Path(path)
    if not file.is_file():
        raise CheckpointNotFound(file)
    try:
        payload = torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        # torch names a refused import "Unsupported global: GLOBAL x" or "unsupported GLOBAL x".
        unsafe = [ln.strip() for ln in text.splitlines() if "GLOBAL" in ln]
        if unsafe:
            raise UnsafeCheckpoint(file, unsafe[0][:200]) from None
        reason = next((ln.strip() for ln in text.splitlines() if "Unsupported" in ln), text)
        raise CheckpointCorrupt(file, reason.splitlines()[0][:200]) from None
    except Exception as exc:  # noqa: BLE001 - damaged bytes surface as many exception types
        raise CheckpointCorrupt(
            file, str(exc).splitlines()[0][:200] or type(exc).__name__
        ) from None
    if not isinstance(payload, dict) or any(k not in payload for k in _PAYLOAD_KEYS):
        keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointCorrupt(file, f"not an evalsentry checkpoint (found {keys})")
    return payload


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    expected_sha256: str | None = None,
    map_location: str = "cpu",
    factory: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
) -> LoadedCheckpoint:
    """Verify, read and rebuild a checkpoint.

    Args:
        path: the checkpoint file.
        expected_sha256: the hash pinned at registration; a different file is refused.
        map_location: where tensors are loaded.
        factory: overrides a missing factory (checkpoints written by the plain recipe).
        factory_kwargs: kwargs for that factory.

    Raises:
        CheckpointNotFound, CheckpointChanged, CheckpointCorrupt, UnsafeCheckpoint,
        LineageMissing, FactoryError, StateDictMismatch.

    """
    file = Path(path)
    if not file.is_file():
        raise CheckpointNotFound(file)
    sha, _ = sha256_file(file)
    if expected_sha256 is not None and sha != expected_sha256:
        raise CheckpointChanged(file, expected_sha256, sha)
    payload = read_payload(file, map_location)
    lineage = complete_lineage(file, payload["lineage"], factory, factory_kwargs)
    model = build_model(lineage["model"]["factory"], lineage["model"].get("kwargs"))
    _load_strict(model, payload["model_state_dict"], file)
    model.eval()
    return LoadedCheckpoint(model, lineage, dict(payload.get("metrics") or {}), sha, str(file))


def complete_lineage(
    path: object,
    recorded: Any,
    factory: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The lineage with a supplied factory filled in; raises listing every missing field."""
    lineage: dict[str, Any] = dict(recorded) if isinstance(recorded, Mapping) else {}
    if factory is not None:
        lineage["model"] = {"factory": factory, "kwargs": dict(factory_kwargs or {})}
    missing = missing_fields(lineage)
    if missing:
        raise LineageMissing(path, missing)
    return lineage


def _load_strict(model: torch.nn.Module, state: Mapping[str, Any], path: object) -> None:
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise StateDictMismatch(path, missing, unexpected)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # same keys, different shapes
        raise StateDictMismatch(path, [], [], str(exc).strip().splitlines()[-1].strip()) from None
