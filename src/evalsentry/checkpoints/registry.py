"""The checkpoint registry: one JSON document per registered version, on any fsspec location.

Layout: ``<root>/<model>/v000001.json`` (and ``<root>/<model>/artifacts/`` for copied files).
A version number is claimed by creating its document exclusively, so two registrations racing
for the same model both succeed with distinct versions and neither overwrites the other.

An entry pins what evaluation runs: the file (uri, sha256, size) and the model (factory and
kwargs, in ``lineage.model``). Registration rebuilds the model as evaluation will (trusted
factory, weights loaded strictly), so what cannot run is refused now. An entry read back is
checked: a known stage, a pinned factory, and model and version matching its file's name.

A file already registered for a model (same sha256) is not registered again: its existing
version is returned. An archived version is retired: ``resolve`` (and so every scheduled run)
never returns it; its entry and its file are kept for audit.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from evalsentry.checkpoints.checkpoint import LoadedCheckpoint, load_checkpoint
from evalsentry.checkpoints.safetensors_file import SUFFIX
from evalsentry.checkpoints.variants import TRANSFORMS
from evalsentry.documents import config_error
from evalsentry.errors import (
    CheckpointChanged,
    CheckpointError,
    CheckpointNotFound,
    NotRegistered,
    RegistryEntryInvalid,
    RegistryError,
    VersionNotRegistered,
)
from evalsentry.names import STAGES, check_name, check_stage
from evalsentry.storage import (
    blocking_file,
    check_path_text,
    filesystem,
    join,
    sha256_file,
    write_atomic,
)
from evalsentry.trust import Trust

log = logging.getLogger(__name__)
_VERSION_FILE = re.compile(r"v(\d{6})\.json")
_MAX_CLAIM_ATTEMPTS = 1000


def _known_stage(stage: str) -> str:
    if stage not in STAGES:
        raise PydanticCustomError(
            "stage",
            "{stage} is not a stage; use one of {stages}",
            {"stage": repr(stage), "stages": ", ".join(STAGES)},
        )
    return stage


Stage = Annotated[str, AfterValidator(_known_stage)]


class StageChange(BaseModel):
    """One stage transition: to which stage, when, by whom."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    stage: Stage
    at: str
    by: str


class RegistryEntry(BaseModel):
    """A registered checkpoint version."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, protected_namespaces=(), defer_build=True
    )
    model: str
    version: int = Field(ge=1)
    uri: str
    sha256: str = Field(min_length=64, max_length=64)
    size: int = Field(ge=0)
    stage: Stage
    lineage: dict[str, Any]
    metrics: dict[str, float] = Field(default_factory=dict)
    registered_at: str
    stage_history: list[StageChange] = Field(default_factory=list)

    @field_validator("lineage")
    @classmethod
    def _pins_a_model(cls, lineage: dict[str, Any]) -> dict[str, Any]:
        model = lineage.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("factory"), str):
            raise PydanticCustomError(
                "model", "model.factory is missing: an entry pins the factory evaluation runs"
            )
        if not isinstance(model.get("kwargs", {}), dict):
            raise PydanticCustomError("model", "model.kwargs is not a mapping")
        if model.get("transform") is not None and model["transform"] not in TRANSFORMS:
            raise PydanticCustomError(
                "model",
                "model.transform {transform} is not a transform evalsentry applies",
                {"transform": repr(model["transform"])},
            )
        return lineage

    @property
    def ref(self) -> str:
        """``model@vN``, the way people name a version."""
        return f"{self.model}@v{self.version}"


@dataclass(frozen=True)
class Registration:
    """What ``Registry.add`` did: the entry, and whether it is new or the file's existing one."""

    entry: RegistryEntry
    new: bool


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "unknown"


class Registry:
    """Registered checkpoints under ``root`` (a path or fsspec URL)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fs, self.path = filesystem(root)

    def check_root(self) -> None:
        """Refuse a registry whose root is not a folder and cannot become one (a file in the way).

        Without it a registry that is a file reads as empty, and registering fails half-way.

        Raises:
            RegistryError: naming the registry and the file in the way.

        """
        blocker = blocking_file(self.fs, self.path)
        if blocker is None:
            return
        problem = (
            "the registry is a file, not a folder"
            if Path(blocker) == Path(self.path)
            else f"the registry cannot be a folder: {blocker} is a file"
        )
        raise RegistryError(
            f"{self.root}: {problem}; point `registry:` in evalsentry.yaml at a folder, "
            "or move the file aside"
        )

    def _write(self, path: str, data: bytes, *, exclusive: bool = False) -> bool:
        """``write_atomic``, its failure a one-line error naming the file."""
        try:
            return write_atomic(self.fs, path, data, exclusive=exclusive)
        except OSError as exc:
            self.check_root()
            raise RegistryError(
                f"{path}: cannot write the registry ({exc.strerror or exc}); "
                "the registry is unchanged"
            ) from None

    def _model_dir(self, model: str) -> str:
        return join(self.path, check_name("model", model))

    def _entry_path(self, model: str, version: int) -> str:
        return join(self._model_dir(model), f"v{version:06d}.json")

    def register(
        self,
        checkpoint: str | Path,
        model: str,
        *,
        trust: Trust,
        stage: str = "candidate",
        factory: str | None = None,
        factory_kwargs: Mapping[str, Any] | None = None,
        copy: bool = False,
        lineage: Mapping[str, Any] | None = None,
        allow_nonfinite: bool = False,
    ) -> RegistryEntry:
        """Pin a checkpoint's sha256, size and model, and record it as the model's next version.

        The same as ``add(...).entry``: a file already registered for ``model`` returns its
        existing entry, and nothing is registered.
        """
        return self.add(
            checkpoint,
            model,
            trust=trust,
            stage=stage,
            factory=factory,
            factory_kwargs=factory_kwargs,
            copy=copy,
            lineage=lineage,
            allow_nonfinite=allow_nonfinite,
        ).entry

    def add(
        self,
        checkpoint: str | Path,
        model: str,
        *,
        trust: Trust,
        stage: str = "candidate",
        factory: str | None = None,
        factory_kwargs: Mapping[str, Any] | None = None,
        copy: bool = False,
        lineage: Mapping[str, Any] | None = None,
        allow_nonfinite: bool = False,
    ) -> Registration:
        """Register a checkpoint as the model's next version, unless it already is one.

        A file whose sha256 a version of ``model`` already pins is not registered again (no new
        version, no copy, no stage change): that version comes back with ``new=False``.
        Otherwise the checkpoint is loaded as evaluation will load it: size bounded, read with
        ``weights_only=True``, its lineage checked, the model built by a factory ``trust``
        admits and the weights loaded strictly. ``factory`` (with ``factory_kwargs``) supplies
        a missing factory; it must agree with a recorded one. ``lineage`` is the lineage of a
        file that records none (a bare state dict; ``read_lineage_file``), kept in the entry.
        Weights holding NaN or infinity are refused unless ``allow_nonfinite``.

        Raises:
            CheckpointNotFound, CheckpointTooLarge, UnsafeCheckpoint, CheckpointCorrupt,
            UnknownLayout, NoLineage, LineageMissing, ModelMismatch, UntrustedFactory,
            FactoryError, StateDictMismatch, InvalidName.

        """
        check_name("model", model)
        check_stage(stage)
        self.check_root()
        file = Path(checkpoint).resolve()
        check_path_text(file)
        if not file.is_file():
            raise CheckpointNotFound(file)
        existing = self.find(model, sha256_file(file)[0])
        if existing is not None:
            log.info("%s is already %s; nothing registered", file, existing.ref)
            return Registration(existing, new=False)
        loaded = load_checkpoint(
            file, trust=trust, factory=factory, factory_kwargs=factory_kwargs, lineage=lineage
        )
        if not allow_nonfinite:
            check_finite_weights(file, loaded.model)
        return self._claim(file, model, loaded, stage=stage, copy=copy)

    def _claim(
        self, file: Path, model: str, loaded: LoadedCheckpoint, *, stage: str, copy: bool
    ) -> Registration:
        """Write the entry under the model's next free version (copying the file in if asked).

        Concurrent writers each claim their own version; a file registered twice at once keeps
        its lowest version only.
        """
        recorded, sha, size = loaded.lineage, loaded.sha256, file.stat().st_size
        for _ in range(_MAX_CLAIM_ATTEMPTS):
            version = self._next_version(model)
            uri = str(file)
            if copy:
                uri = self._copy_in(file, model, version, sha)
            entry = RegistryEntry(
                model=model,
                version=version,
                uri=uri,
                sha256=sha,
                size=size,
                stage=stage,
                lineage=recorded,
                metrics={k: float(v) for k, v in loaded.metrics.items()},
                registered_at=_now(),
                stage_history=[StageChange(stage=stage, at=_now(), by=_who())],
            )
            if self._write(self._entry_path(model, version), _dump(entry), exclusive=True):
                earlier = self.find(model, sha)
                if earlier is not None and earlier.version < version:
                    # Another registration of this file claimed a lower version meanwhile: the
                    # lowest one stands, this one is withdrawn (entry and copy), never half-kept.
                    self._withdraw(entry)
                    return Registration(earlier, new=False)
                log.info("registered %s (%s)", entry.ref, sha[:12])
                if stage == "production":
                    return Registration(self.promote(model, version, "production"), new=True)
                return Registration(entry, new=True)
        raise RegistryError(f"could not claim a version for {model!r}; too many concurrent writers")

    def _withdraw(self, entry: RegistryEntry) -> None:
        """Remove a version this process just claimed, and its copy, for a duplicate file."""
        for path in (self._entry_path(entry.model, entry.version), entry.uri):
            if path == entry.uri and not entry.uri.startswith(self._model_dir(entry.model)):
                continue  # the team's own file, not a copy in the registry
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                continue
        log.info("%s was the same file as an earlier version; withdrawn", entry.ref)

    def find(self, model: str, sha256: str) -> RegistryEntry | None:
        """The oldest version of ``model`` that pins the file ``sha256``, or None."""
        return next((e for e in self.list(model) if e.sha256 == sha256), None)

    def _copy_in(self, file: Path, model: str, version: int, sha: str) -> str:
        suffix = SUFFIX if file.suffix == SUFFIX else ".pt"
        target = join(self._model_dir(model), "artifacts", f"v{version:06d}-{sha[:12]}{suffix}")
        data = file.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:  # swapped since it was checked and loaded
            raise CheckpointChanged(file, sha, hashlib.sha256(data).hexdigest())
        self._write(target, data)
        return target if "://" not in self.root else self.fs.unstrip_protocol(target)

    def _versions(self, model: str) -> list[int]:
        folder = self._model_dir(model)
        if not self.fs.exists(folder):
            return []
        names = (p.rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False))
        return sorted(int(m.group(1)) for n in names if (m := _VERSION_FILE.fullmatch(n)))

    def _next_version(self, model: str) -> int:
        versions = self._versions(model)
        return versions[-1] + 1 if versions else 1

    def models(self) -> list[str]:
        """Names of every registered model.

        Raises:
            RegistryError: the registry is a file, not a folder (it is not simply empty).

        """
        self.check_root()
        if not self.fs.exists(self.path):
            return []
        return sorted(
            p.rsplit("/", 1)[-1] for p in self.fs.ls(self.path, detail=False) if self.fs.isdir(p)
        )

    def show(self, model: str, version: int) -> RegistryEntry:
        """One version's entry.

        Raises:
            NotRegistered: no such model or version.

        """
        path = self._entry_path(model, version)
        if not self.fs.exists(path):
            if model not in self.models():
                raise NotRegistered(f"model {model!r}", model, self.models())
            raise VersionNotRegistered(model, version, self._versions(model))
        return self._read(path, model, version)

    def _read(self, path: str, model: str, version: int) -> RegistryEntry:
        """The entry at ``path``, checked; its model and version must be those of its name.

        Raises:
            RegistryEntryInvalid: naming the file and the field.

        """
        try:
            entry = RegistryEntry.model_validate_json(self.fs.cat_file(path))
        except ValidationError as exc:
            error = config_error(path, exc)
            raise RegistryEntryInvalid(path, error.field, error.problem) from None
        for field, value, named in (
            ("model", entry.model, model),
            ("version", entry.version, version),
        ):
            if value != named:
                raise RegistryEntryInvalid(
                    path,
                    field,
                    f"{value!r} does not match the file's name ({model}/v{version:06d}.json); "
                    "restore the entry, or register the checkpoint again",
                )
        return entry

    def list(self, model: str | None = None) -> list[RegistryEntry]:
        """Every entry, or one model's, ordered by model and version.

        A version withdrawn between listing and reading (a duplicate registration of the same
        file, racing this one) is left out.
        """
        names = [model] if model else self.models()
        entries = []
        for name in names:
            for version in self._versions(name):
                try:
                    entries.append(self.show(name, version))
                except VersionNotRegistered:
                    continue
        return entries

    def resolve(self, model: str, stage: str) -> RegistryEntry:
        """The newest version of ``model`` in ``stage``: what a run evaluates.

        Raises:
            NotRegistered: the model has no version in that stage.
            RegistryError: ``stage`` is ``archived``: retired versions are never resolved.

        """
        check_stage(stage)
        if stage == "archived":
            raise RegistryError(
                f"archived versions of {model!r} are retired and never resolved for evaluation; "
                f"name one by its version: `evalsentry registry show {model} --version N`"
            )
        matches = [e for e in self.list(model) if e.stage == stage]
        if not matches:
            if model not in self.models():
                raise NotRegistered(f"model {model!r}", model, self.models())
            raise NotRegistered(f"a {stage} version of {model!r}")
        return matches[-1]

    def promote(self, model: str, version: int, stage: str) -> RegistryEntry:
        """Move a version to ``stage``; promoting to production archives the previous one."""
        check_stage(stage)
        entry = self.show(model, version)
        if stage == "production":
            for other in self.list(model):
                if other.version != version and other.stage == "production":
                    self._set_stage(other, "archived")
        return self._set_stage(entry, stage)

    def archive(self, model: str, version: int) -> RegistryEntry:
        """Retire a version: never evaluated again, its entry and file kept for audit.

        Archiving the production version leaves the model without one (logged as a warning).

        Raises:
            NotRegistered: no such model or version (with a did-you-mean or the versions).

        """
        entry = self.show(model, version)
        if entry.stage == "production":
            log.warning("%s was production: %s has no production version now", entry.ref, model)
        return self._set_stage(entry, "archived")

    def _set_stage(self, entry: RegistryEntry, stage: str) -> RegistryEntry:
        if entry.stage == stage:
            return entry
        change = StageChange(stage=stage, at=_now(), by=_who())
        updated = entry.model_copy(
            update={"stage": stage, "stage_history": [*entry.stage_history, change]}
        )
        self._write(self._entry_path(entry.model, entry.version), _dump(updated))
        log.info("%s: %s -> %s", entry.ref, entry.stage, stage)
        return updated


def check_finite_weights(path: object, model: Any) -> None:
    """Refuse a model whose weights hold NaN or infinity, naming the first such tensor.

    Such a model predicts NaN (an ERROR every week), or, with the NaN masked somewhere,
    something no one trained: better refused at the door than caught by its outputs.

    Raises:
        CheckpointError: naming the tensor, how many values are not finite, and the way through.
    """
    import torch

    from evalsentry.checkpoints.variants import portable_state

    for name, tensor in portable_state(model).items():  # a quantized weight's scales too
        if not tensor.is_floating_point():
            continue
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise CheckpointError(
                path,
                f"weights: {name} holds {bad} NaN or infinite value(s) of {tensor.numel()}; "
                "such a model predicts NaN. Retrain it, or register it with --allow-nonfinite "
                "if that is intended",
            )


def _dump(entry: RegistryEntry) -> bytes:
    return json.dumps(entry.model_dump(mode="json"), indent=2, sort_keys=True).encode()
