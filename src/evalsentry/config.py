"""The project configuration, ``evalsentry.yaml``, loaded by one pydantic model.

Relative locations are resolved against the folder holding the file, so the same file works
from any working directory. A missing file means the defaults: a fresh clone works as is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalsentry.errors import ConfigError

CONFIG_FILE = "evalsentry.yaml"
_TOLERANCE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*")


class Tolerance(BaseModel):
    """How far a metric may drop before the gate calls it a regression.

    ``max_drop`` is absolute (``0.01``: one accuracy point) or relative to the reference value
    (``"5%"``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_drop: float | str = "1%"

    @field_validator("max_drop")
    @classmethod
    def _parse(cls, value: float | str) -> float | str:
        if isinstance(value, str) and not _TOLERANCE.fullmatch(value):
            raise ValueError("use an absolute number like 0.01 or a relative one like '5%'")
        if isinstance(value, float | int) and value < 0:
            raise ValueError("must be >= 0")
        return value

    def allowed_drop(self, reference: float) -> float:
        """The absolute drop allowed from ``reference``."""
        if isinstance(self.max_drop, str):
            match = _TOLERANCE.fullmatch(self.max_drop)
            if match is None:  # unreachable: the validator checked the form
                raise ValueError(self.max_drop)
            amount = float(match.group(1))
            return abs(reference) * amount / 100 if match.group(2) else amount
        return float(self.max_drop)


class GatePolicy(BaseModel):
    """Gate settings: tolerance per metric, significance level, slice handling."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(0.05, gt=0, lt=1)
    default: Tolerance = Tolerance()
    metrics: dict[str, Tolerance] = Field(
        default_factory=lambda: {
            "accuracy": Tolerance(max_drop=0.01),
            "top5_accuracy": Tolerance(max_drop=0.01),
            "macro_f1": Tolerance(max_drop=0.01),
            "nll": Tolerance(max_drop="10%"),
            "ece": Tolerance(max_drop=0.02),
        },
        description="per-metric tolerances; metrics not listed use `default`",
    )
    slices: Literal["gate", "report"] = "report"
    bootstrap_resamples: int = Field(2000, ge=100)

    def tolerance(self, metric: str) -> Tolerance:
        """The tolerance for ``metric``: its own entry, else the default."""
        return self.metrics.get(metric, self.default)


class DriftPolicy(BaseModel):
    """Live-data drift: where each evalset's recent production inputs are, and thresholds."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    live: dict[str, str] = Field(
        default_factory=dict, description="evalset name -> Parquet path, glob or fsspec URL"
    )
    psi_warn: float = Field(0.1, ge=0)
    psi_fail: float = Field(0.25, ge=0)
    alpha: float = Field(0.05, gt=0, lt=1)
    fail_run: bool = Field(False, description="whether FAIL-level drift fails the weekly run")

    def verdict(self, psi: float, p_value: float) -> str:
        """FAIL or WARN when the shift is both significant and large enough, else PASS."""
        if p_value < self.alpha and psi >= self.psi_fail:
            return "FAIL"
        if p_value < self.alpha and psi >= self.psi_warn:
            return "WARN"
        return "PASS"


class CostRates(BaseModel):
    """Rates that turn measured time and energy into money and carbon."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    currency: str = "USD"
    per_device_hour: dict[str, float] = Field(default_factory=lambda: {"cpu": 0.05, "cuda": 3.0})
    carbon_kg_per_kwh: float = Field(0.4, ge=0)
    power_watts: dict[str, float] = Field(
        default_factory=lambda: {"cpu": 65.0, "cuda": 700.0},
        description="fallback power draw when energy cannot be measured",
    )


class Config(BaseModel):
    """``evalsentry.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    store: str = ".evalsentry"
    registry: str = ".evalsentry/registry"
    evalsets: str = "evalsets"
    gate: GatePolicy = GatePolicy()
    cost: CostRates = CostRates()
    drift: DriftPolicy = DriftPolicy()
    root: str = Field(".", exclude=True, description="folder the relative locations resolve in")

    def resolve(self, location: str) -> str:
        """``location`` as an absolute path, or unchanged when it is a URL (``s3://...``)."""
        if "://" in location:
            return location
        return str((Path(self.root) / location).resolve())

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


def load_config(path: str | Path | None = None) -> Config:
    """Load ``evalsentry.yaml``.

    Args:
        path: the file; ``None`` means ``./evalsentry.yaml``, and its absence the defaults.

    Raises:
        ConfigError: the file is named but missing, is not YAML, or a field is invalid.

    """
    explicit = path is not None
    file = Path(path) if path is not None else Path(CONFIG_FILE)
    if not file.exists():
        if explicit:
            raise ConfigError(file, "", "file not found; create it or drop --config")
        return Config(root=str(Path.cwd()))
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(
            file, "", f"not valid YAML ({exc.__class__.__name__}); fix the syntax"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(file, "", "expected a mapping of settings at the top level")
    try:
        return Config(**data, root=str(file.resolve().parent))
    except ValidationError as exc:
        raise config_error(file, exc) from None


def config_error(file: object, exc: ValidationError) -> ConfigError:
    """The first pydantic error as a ``ConfigError`` naming file and field."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field; remove it or check its spelling"
    return ConfigError(file, field, message)
