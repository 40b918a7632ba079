"""Self-describing checkpoints: weights plus the lineage needed to rebuild and trust them.

A checkpoint is data, never code: its size is bounded before it is read, it is read with
``torch.load(weights_only=True)`` only, and the architecture is rebuilt by the factory its
lineage names, only when ``trusted_factories`` admits it (``evalsentry.trust``). A registered
checkpoint is rebuilt with the factory pinned in its registry entry; a file naming another is
refused.

Two layouts are read: ``{model_state_dict, optimizer_state_dict?, metrics?, lineage}`` (what
``save_checkpoint`` writes, and what many teams write by hand with ``torch.save``), and a bare
``model.state_dict()``; and ``safetensors`` files, which hold tensors and text only
(``evalsentry.checkpoints.safetensors_file``). A bare state dict records no lineage: it is registered with the lineage
given beside it (``--lineage FILE``), the registry entry keeps that lineage, and evaluation,
which loads the file by its pinned sha256 and factory, records the entry's.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalsentry.checkpoints.lineage import (
    DataSource,
    build_lineage,
    check_lineage_values,
    missing_fields,
    training_files,
)
from evalsentry.checkpoints.payload import (
    STATE_KEY,
    read_payload,
    snapshot,
)
from evalsentry.checkpoints.safetensors_file import (
    SUFFIX,
    safetensors_bytes,
)
from evalsentry.errors import (
    CheckpointChanged,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    FactoryError,
    LineageMissing,
    ModelMismatch,
    NoLineage,
    StateDictMismatch,
    exception_line,
)
from evalsentry.storage import filesystem, sha256_file, write_atomic
from evalsentry.trust import Trust, import_factory

if TYPE_CHECKING:
    import torch

    from evalsentry.checkpoints.training import TrainingRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint rebuilt into a model, with what it says about itself."""

    model: torch.nn.Module
    lineage: dict[str, Any]
    metrics: dict[str, float]
    sha256: str
    path: str


def build_model(
    factory: str, kwargs: Mapping[str, Any] | None = None, *, trust: Trust
) -> torch.nn.Module:
    """Build a model with a factory ``trust`` admits, and check that it is a ``torch.nn.Module``.

    Raises:
        UntrustedFactory: ``trusted_factories`` does not admit it (nothing was imported).
        FactoryError: it cannot be imported, is not a model class, or raised when called.

    """
    return _call_factory(trust.resolve(factory), factory, kwargs)


def _call_factory(
    target: Callable[..., Any], factory: str, kwargs: Mapping[str, Any] | None
) -> torch.nn.Module:
    """Call a factory; whatever it raises becomes one line naming the factory."""
    import torch

    try:
        model = target(**dict(kwargs or {}))
    except TypeError as exc:
        raise FactoryError(factory, f"cannot be called with the recorded kwargs ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - bad kwargs surface as any error the model raises
        raise FactoryError(
            factory, f"raised {exception_line(exc)} when called with kwargs {dict(kwargs or {})}"
        ) from None
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
    training: TrainingRun | Mapping[str, Any] | None = None,
    transform: str | None = None,
    teacher: str | os.PathLike[str] | None = None,
) -> Path:
    """Write ``{model_state_dict, optimizer_state_dict?, metrics, lineage}`` atomically; its path.

    The factory (default: the model's own class) must take the weights strictly with
    ``factory_kwargs``: a checkpoint that could not be rebuilt fails now, not next week. It is
    the training code's choice, so ``trusted_factories`` is consulted at registration, not here.

    Args:
        path: where to write; the folder is created. A ``.safetensors`` path gets that format
            (no code at all; lineage and metrics in its metadata; no optimizer state).
        metrics: training/validation metrics worth keeping with the weights.
        config: hyperparameters (JSON-safe).
        data: training data (manifest file, list of files, or folder) to hash.
        optimizer: its state is saved when given.
        factory: ``package.module:callable`` that rebuilds the architecture.
        git_sha: the code commit; by default read from git in ``repo`` (default: the cwd).
        training: what training cost (a closed ``track_training`` run, or its fields' mapping).
        transform: the ``apply_transform`` that ``model`` went through; kept in lineage.model.
        teacher: the checkpoint ``model`` was distilled from: ``lineage["teacher"]`` records
            its sha256 (:func:`evalsentry.evaluation.serving.weighed_against`).

    Raises:
        BadTrainingData, BadTrainingCost, CheckpointNotFound (no ``teacher`` file).
    """
    import torch

    training_files(data)  # refuse missing or empty training data before building anything
    cost = _training_cost(training)
    factory = factory or _infer_factory(model)
    state = _rebuildable_state(model, factory, factory_kwargs, transform, path)
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
    pinned = lineage["model"] | ({} if transform is None else {"transform": transform})
    lineage |= {"model": pinned} | _cost_field(cost) | _teacher_field(teacher)
    return _write_payload(path, state, metrics, lineage, optimizer)


def _cost_field(cost: dict[str, Any] | None) -> dict[str, Any]:
    """``{"training_cost": cost}``, or nothing when training cost was not given."""
    return {} if cost is None else {"training_cost": cost}


def _teacher_field(teacher: str | os.PathLike[str] | None) -> dict[str, Any]:
    """``{"teacher": {"sha256": ...}}`` naming the file a student was distilled from."""
    if teacher is None:
        return {}
    if not Path(teacher).is_file():
        raise CheckpointNotFound(Path(teacher))
    return {"teacher": {"sha256": sha256_file(Path(teacher))[0]}}


def _training_cost(training: TrainingRun | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What training cost, checked, to record in the lineage; None when not given."""
    if training is None:
        return None
    from evalsentry.checkpoints.training import training_cost

    return training_cost(training)


def _rebuildable_state(
    model: torch.nn.Module,
    factory: str,
    factory_kwargs: Mapping[str, Any] | None,
    transform: str | None,
    path: str | os.PathLike[str],
) -> dict[str, torch.Tensor]:
    """The model's weights on the CPU, once the factory's model (transformed) took them strictly."""
    from evalsentry.checkpoints.variants import portable_state

    state = portable_state(model)
    rebuilt = _call_factory(import_factory(factory), factory, factory_kwargs)
    load_weights(rebuilt, state, path, transform)
    return state


def _write_payload(
    path: str | os.PathLike[str],
    state: dict[str, torch.Tensor],
    metrics: Mapping[str, float],
    lineage: dict[str, Any],
    optimizer: torch.optim.Optimizer | None,
) -> Path:
    """Save the checkpoint's payload to ``path`` in one atomic write; return the path."""
    import torch

    payload: dict[str, Any] = {
        "model_state_dict": state,
        "metrics": {str(k): float(v) for k, v in metrics.items()},
        "lineage": lineage,
    }
    target = Path(path)
    if target.suffix == SUFFIX:
        written = safetensors_bytes(
            state, lineage=lineage, metrics=payload["metrics"], optimizer=optimizer
        )
    else:
        if optimizer is not None:
            payload["optimizer_state_dict"] = optimizer.state_dict()
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        written = buffer.getvalue()
    fs, fs_path = filesystem(str(target.resolve()))
    write_atomic(fs, fs_path, written)
    return target


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    trust: Trust,
    expected_sha256: str | None = None,
    map_location: str = "cpu",
    factory: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
    lineage: Mapping[str, Any] | None = None,
    transform: str | None = None,
) -> LoadedCheckpoint:
    """Verify, read and rebuild a checkpoint.

    Args:
        path: the checkpoint file.
        trust: the factories that may build it and the size it may have (``Config.trust``);
            there is no default, and ``Trust()`` trusts nothing.
        expected_sha256: the hash pinned at registration; a different file is refused.
        map_location: where tensors are loaded.
        factory: the pinned factory (a registry entry's); a file naming another factory or
            other kwargs is refused, a file naming none (the plain recipe) takes this one.
            ``None``: the file's own factory.
        factory_kwargs: kwargs for that factory.
        lineage: the lineage of a file that records none (a bare state dict), given beside it
            at registration (``--lineage``); a file that records its own is refused with it.
        transform: the serving transform pinned with the factory (a variant's); a file naming
            another is refused.

    A file that records no lineage is otherwise accepted only as a registered one, with both
    ``expected_sha256`` and ``factory`` pinned: its lineage is its registry entry's, and
    ``LoadedCheckpoint.lineage`` is empty, so what is recorded is the entry's.

    Raises:
        CheckpointNotFound, CheckpointChanged, CheckpointTooLarge, CheckpointCorrupt,
        UnsafeCheckpoint, UnknownLayout, NoLineage, LineageMissing, ModelMismatch,
        UntrustedFactory, FactoryError, StateDictMismatch, UnknownTransform.

    """
    file = Path(path)
    if not file.is_file():
        raise CheckpointNotFound(file)
    if factory is not None:
        trust.check(factory)  # a pinned factory that is not trusted is refused before any read
    with snapshot(file, trust.max_checkpoint_bytes) as (source, sha):
        if expected_sha256 is not None and sha != expected_sha256:
            raise CheckpointChanged(file, expected_sha256, sha)
        payload = read_payload(
            file, map_location, max_bytes=trust.max_checkpoint_bytes, source=source
        )
    pinned = None if factory is None else _pinned(factory, factory_kwargs, transform)
    model, completed = _built_model(
        file, payload, trust=trust, expected_sha256=expected_sha256, pinned=pinned, lineage=lineage
    )
    spec = completed.get("model") or pinned or {}
    load_weights(model, payload[STATE_KEY], file, spec.get("transform"))
    model.eval()
    return LoadedCheckpoint(
        model, completed, _metrics(file, payload.get("metrics")), sha, str(file)
    )


def _built_model(
    file: Path,
    payload: Mapping[str, Any],
    *,
    trust: Trust,
    expected_sha256: str | None,
    pinned: dict[str, Any] | None,
    lineage: Mapping[str, Any] | None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model the checkpoint's lineage (or the one given beside it) builds, and the lineage.

    A file without either builds the ``pinned`` model (``_pinned``) if ``expected_sha256`` is
    pinned too, with an empty lineage (the registry entry's is recorded); see
    :func:`load_checkpoint`. The model comes back untransformed: ``load_weights`` transforms it.
    """
    recorded = payload.get("lineage")
    if recorded is not None and lineage is not None:
        raise CheckpointError(
            file,
            "the checkpoint records its own lineage; register it without --lineage "
            "(one file, one lineage)",
        )
    if recorded is None and lineage is None:
        if pinned is None or expected_sha256 is None:
            raise NoLineage(file, _layout(payload))
        # A registered file (sha256 and factory pinned): its lineage is the registry entry's.
        return build_model(pinned["factory"], pinned["kwargs"], trust=trust), {}
    completed = complete_lineage(file, recorded or lineage, pinned)
    spec = completed["model"]
    return build_model(spec["factory"], spec["kwargs"], trust=trust), completed


def _layout(payload: Mapping[str, Any]) -> str:
    """How a payload without lineage is described in the error that refuses it."""
    if len(payload) == 1:
        return "a bare state dict (torch.save(model.state_dict(), path))"
    return f"the checkpoint (keys {sorted(map(str, payload))[:10]})"


def _metrics(path: object, recorded: Any) -> dict[str, float]:
    """The recorded metrics that are numbers; others (text, lists, a history) are left out."""
    import torch

    if not isinstance(recorded, Mapping):
        return {}
    metrics: dict[str, float] = {}
    for name, value in recorded.items():
        number = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
        if isinstance(number, int | float) and not isinstance(number, bool):
            metrics[str(name)] = float(number)
        else:
            log.info("%s: metric %r is not a number; not kept", path, name)
    return metrics


def _pinned(
    factory: str, factory_kwargs: Mapping[str, Any] | None, transform: str | None
) -> dict[str, Any]:
    """A pinned model as a lineage records it: ``{"factory", "kwargs"[, "transform"]}``."""
    pinned: dict[str, Any] = {"factory": factory, "kwargs": dict(factory_kwargs or {})}
    if transform is not None:
        pinned["transform"] = transform
    return pinned


def complete_lineage(
    path: object, recorded: Any, pinned: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The lineage with its model pinned: ``{"factory": ..., "kwargs": {...}[, "transform"]}``.

    ``pinned`` (``{"factory", "kwargs"[, "transform"]}``) fills in a missing model; a recorded
    model that differs from it is refused.

    Raises:
        LineageMissing: listing every missing field.
        ModelMismatch: the recorded factory, kwargs or transform differ from the pinned ones.
        FactoryError: the recorded kwargs are not a mapping.
        UnknownTransform: the recorded transform is not one evalsentry applies.

    """
    lineage: dict[str, Any] = dict(recorded) if isinstance(recorded, Mapping) else {}
    own = _model_spec(lineage.get("model"))
    if pinned is not None:
        if own is not None and own != dict(pinned):
            raise ModelMismatch(path, own, dict(pinned))
        own = dict(pinned)
    if own is not None:
        lineage["model"] = own
    missing = missing_fields(lineage)
    if missing:
        raise LineageMissing(path, missing)
    check_lineage_values(path, lineage)
    return lineage


def _model_spec(model: Any) -> dict[str, Any] | None:
    """A recorded ``model`` as ``{"factory", "kwargs"}``, or None when it names no factory."""
    if not isinstance(model, Mapping) or model.get("factory") in (None, ""):
        return None
    kwargs = model.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise FactoryError(str(model["factory"]), "its kwargs are not a mapping of names to values")
    spec = {"factory": model["factory"], "kwargs": dict(kwargs)}
    if model.get("transform") is not None:
        from evalsentry.checkpoints.variants import check_transform

        spec["transform"] = check_transform(model["transform"], "lineage.model.transform")
    return spec


def load_weights(model: torch.nn.Module, state: Any, path: object, transform: str | None) -> None:
    """Load ``state`` strictly into ``model``, transformed first when a transform is pinned."""
    if transform is None:
        _load_strict(model, state, path)
        return
    from evalsentry.checkpoints.variants import apply_transform, load_portable_state

    if not isinstance(state, Mapping):
        _load_strict(model, state, path)  # refuses it, naming what it is
    load_portable_state(apply_transform(model, transform), state, path)


def _load_strict(model: torch.nn.Module, state: Any, path: object) -> None:
    """Load ``state`` into ``model`` with every key and shape matching; one line when not."""
    if not isinstance(state, Mapping):
        raise CheckpointCorrupt(
            path, f"model_state_dict is a {type(state).__name__}, not a mapping of names to tensors"
        )
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [str(k) for k in state if k not in expected]
    if missing or unexpected:
        raise StateDictMismatch(path, missing, unexpected)
    for name, own in expected.items():  # in the model's order: the first one is named
        wanted = getattr(own, "dtype", None)
        found = getattr(state[name], "dtype", None)
        if wanted is not None and found is not None and found != wanted:
            # load_state_dict would cast it silently: int32 weights into float32 are another model
            raise StateDictMismatch(
                path,
                [],
                [],
                f"tensor {name!r} is {str(found).removeprefix('torch.')} where the model's is "
                f"{str(wanted).removeprefix('torch.')}; save the weights in the model's dtype, "
                "or have the factory build the model in theirs",
            )
    try:
        model.load_state_dict(state, strict=True)
    except Exception as exc:  # noqa: BLE001 - same keys, other shapes, or values that are no tensors
        detail = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else ""
        raise StateDictMismatch(path, [], [], detail or type(exc).__name__) from None
