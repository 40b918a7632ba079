"""The project configuration, ``evalsentry.yaml``, loaded by one pydantic model.

Relative locations are resolved against the folder holding the file, so the same file works
from any working directory. Without a path, the project is found as git finds a repository:
``evalsentry.yaml`` in the working folder or the nearest folder above it holding one; none
there is an error, never an empty project.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from evalsentry.documents import _parse_yaml, config_error, folder_problem
from evalsentry.errors import ConfigError
from evalsentry.sections import (
    DEFAULT_METRIC_TOLERANCES,
    SETTINGS,
    CostRates,
    DriftPolicy,
    GatePolicy,
    ImportSource,
    ModelBinding,
    Traffic,
    line_names,
)
from evalsentry.trust import DEFAULT_MAX_CHECKPOINT_BYTES, TRUSTED_ENTRY, Trust

CONFIG_FILE = "evalsentry.yaml"
#: Seconds one evaluation (building the model and running it over the evalset) may take before
#: its process is killed and the pair recorded as an error: generous, a backstop against hangs.
DEFAULT_INFERENCE_TIMEOUT_S = 3600.0


class Config(BaseModel):
    """``evalsentry.yaml``."""

    model_config = SETTINGS
    store: str = ".evalsentry"
    registry: str = ".evalsentry/registry"
    evalsets: str = "evalsets"
    gate: GatePolicy = GatePolicy()
    cost: CostRates = CostRates()
    drift: DriftPolicy = DriftPolicy()
    traffic: dict[str, Traffic] = Field(
        default_factory=dict,
        description="model line -> requests_per_day, for its serving cost forecast",
    )
    models: dict[str, ModelBinding] = Field(
        default_factory=dict,
        description="model line -> its evalsets; an unbound model runs on the only evalset, "
        "and is an error where there are several",
    )
    imports: Annotated[dict[str, ImportSource], AfterValidator(line_names)] = Field(
        default_factory=dict,
        description="model line -> the harness results the import-results flow picks up",
    )
    inference_timeout_s: float = Field(
        DEFAULT_INFERENCE_TIMEOUT_S,
        gt=0,
        allow_inf_nan=False,
        description="seconds one evaluation may run before it is killed and recorded as an error",
    )
    trusted_factories: list[str] = Field(
        default_factory=list,
        description="modules whose nn.Module classes, and module:attr callables, may build a "
        "model from a checkpoint; nothing else is imported on a checkpoint's word",
    )
    max_checkpoint_bytes: int = Field(
        DEFAULT_MAX_CHECKPOINT_BYTES,
        gt=0,
        description="largest checkpoint file, and largest total its archive inflates to",
    )
    reports_url: str | None = Field(
        None,
        description="http(s) URL under which <store>/reports is served (`evalsentry "
        "serve-reports`, or your own web server); the run's link artifact points there. Unset: "
        "a presigned URL on an object store, else the local report server's default URL",
    )
    root: str = Field(".", exclude=True, description="folder the relative locations resolve in")
    #: The file these settings were read from ("" when built in code), named in refusals.
    _source: str = PrivateAttr("")

    @field_validator("reports_url")
    @classmethod
    def _check_reports_url(cls, url: str | None) -> str | None:
        if url is None:
            return url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"{url!r} is not an http(s) URL with a host, like http://127.0.0.1:8470"
            )
        return url

    @field_validator("trusted_factories")
    @classmethod
    def _check_entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            if not TRUSTED_ENTRY.fullmatch(entry):
                raise ValueError(
                    f"{entry!r} is neither a module name (pkg.models) nor module:attr "
                    "(pkg.models:make_net)"
                )
        return entries

    @model_validator(mode="before")
    @classmethod
    def _merge_metric_tolerances(cls, data: object) -> object:
        """A document's ``gate.metrics`` overrides the default tolerances key by key.

        Only settings given as data (a YAML or JSON mapping) merge; a ``GatePolicy`` built in
        code is taken as it is, its ``metrics`` the whole table.
        """
        if not isinstance(data, dict):
            return data
        gate = data.get("gate")
        if isinstance(gate, dict) and isinstance(gate.get("metrics"), dict):
            defaults = {name: {"max_drop": d} for name, d in DEFAULT_METRIC_TOLERANCES.items()}
            merged = {**defaults, **gate["metrics"]}
            data = {**data, "gate": {**gate, "metrics": merged}}
        return data

    def resolve(self, location: str) -> str:
        """``location`` as an absolute path, or unchanged when it is a URL (``s3://...``)."""
        if "://" in location:
            return location
        return str((Path(self.root) / location).resolve())

    @property
    def trust(self) -> Trust:
        """What checkpoints may run and how large they may be, naming this file in refusals."""
        return Trust(
            tuple(self.trusted_factories),
            self.max_checkpoint_bytes,
            self._source or str(Path(self.root).resolve() / CONFIG_FILE),
            str(Path(self.root).resolve()),
        )

    def bound_evalsets(self, model: str) -> list[str] | None:
        """The evalsets ``model`` is bound to in ``models:``; None when it is not bound."""
        binding = self.models.get(model)
        return list(binding.evalsets) if binding is not None else None

    @property
    def store_url(self) -> str:
        """Absolute store root."""
        return self.resolve(self.store)

    @property
    def registry_url(self) -> str:
        """Absolute registry root."""
        return self.resolve(self.registry)

    @property
    def evalsets_dir(self) -> str:
        """Absolute folder of the evalsets."""
        return self.resolve(self.evalsets)


def find_config(start: str | Path | None = None) -> Path | None:
    """The project's ``evalsentry.yaml``, found as git finds a repository.

    In ``start`` (default: the working folder) or the nearest folder above it that holds one;
    None when no folder up to the root does.
    """
    folder = Path(start if start is not None else Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        file = candidate / CONFIG_FILE
        if file.is_file():
            return file
    return None


def load_config(path: str | Path | None = None) -> Config:
    """Load ``evalsentry.yaml``.

    Args:
        path: the file; ``None`` means the project's (:func:`find_config`).

    Raises:
        ConfigError: the file is named but missing, no project is found, or the file cannot be
            read, is not UTF-8 YAML, is not a mapping of named settings, or a field is invalid.

    """
    if path is None:
        found = find_config()
        if found is None:
            raise ConfigError(
                CONFIG_FILE,
                "",
                f"not found in {Path.cwd()} or any folder above it; run this inside a project, "
                "or start one with `evalsentry init`",
            )
        file = found
    else:
        file = Path(path)
        if not file.exists():
            raise ConfigError(
                file,
                "",
                "file not found; check the path, or start a project with `evalsentry init`",
            )
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            file, "", f"not UTF-8 text (byte {exc.start}); save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(
            file, "", f"cannot read it ({exc.strerror or exc}); give a readable YAML file"
        ) from None
    data = _parse_yaml(file, text)
    try:
        config = Config.model_validate({**data, "root": str(file.resolve().parent)})
    except ValidationError as exc:
        raise config_error(file, exc) from None
    config._source = str(file.resolve())
    for field in ("store", "registry", "evalsets"):  # a folder that cannot be one reads as empty
        setting = getattr(config, field)
        location = Path(config.root) / setting
        problem = None if "://" in setting else folder_problem(location, field)
        if problem is not None:
            raise ConfigError(
                location,
                "",
                f"{problem}; point `{field}:` in {file} at a folder this user can read and write",
            )
    return config
