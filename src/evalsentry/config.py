"""The project configuration, ``evalsentry.yaml``, loaded by one pydantic model.

Relative locations are resolved against the folder holding the file, so the same file works
from any working directory. Without a path, the project is found as git finds a repository:
``evalsentry.yaml`` in the working folder or the nearest folder above it holding one; none
there is an error, never an empty project.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalsentry.documents import _parse_yaml, config_error, folder_problem
from evalsentry.errors import ConfigError, InvalidName, did_you_mean
from evalsentry.names import check_name
from evalsentry.trust import DEFAULT_MAX_CHECKPOINT_BYTES, TRUSTED_ENTRY, Trust

CONFIG_FILE = "evalsentry.yaml"
_TOLERANCE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*")
#: The per-metric tolerances a config starts from; ``gate.metrics`` in a file overrides them
#: key by key (a file that sets only ``accuracy`` keeps ``ece`` at 0.02 absolute).
DEFAULT_METRIC_TOLERANCES: dict[str, float | str] = {
    "accuracy": 0.01,
    "top5_accuracy": 0.01,
    "macro_f1": 0.01,
    "nll": "10%",
    "ece": 0.02,
    "r2": 0.01,  # absolute: a relative tolerance of an r2 near 0 allows nothing
    # A language model: 5% more perplexity, the same as 0.05 nats more per token.
    "perplexity": "5%",
    "token_nll": 0.05,
}
#: Seconds one evaluation (building the model and running it over the evalset) may take before
#: its process is killed and the pair recorded as an error: generous, a backstop against hangs.
DEFAULT_INFERENCE_TIMEOUT_S = 3600.0
#: The per-row summaries a tensor input's drift can be measured on (``drift.features``); each
#: is computed by ``evalsentry.gate.drift.ROW_SUMMARIES`` under the same name.
ROW_SUMMARY_NAMES = ("mean", "std", "min", "max", "share_above_half_max")
#: The summaries of a tensor evalset ``drift.features`` does not list: meaningful for any
#: values, where a share above a threshold assumes non-negative intensities such as pixels.
DEFAULT_ROW_SUMMARIES: tuple[str, ...] = ("mean", "std", "min", "max")


#: Every settings model: unknown keys refused; strict types, so ``yes`` (YAML's true) is never
#: a 1 where a number belongs and ``123`` never text; NaN and infinities refused.
SETTINGS = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

#: Random paired swaps (sign flips) behind the gate's non-count tests: ``gate.bootstrap_resamples``.
DEFAULT_SWAPS = 2000


class Tolerance(BaseModel):
    """How far a metric may drop before the gate calls it a regression.

    ``max_drop`` is absolute (``0.01``: one accuracy point) or relative to the reference value
    (``"5%"``).
    """

    model_config = SETTINGS
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

    model_config = SETTINGS
    alpha: float = Field(0.05, gt=0, lt=1)
    default: Tolerance = Tolerance()
    metrics: dict[str, Tolerance] = Field(
        default_factory=lambda: {
            name: Tolerance(max_drop=drop) for name, drop in DEFAULT_METRIC_TOLERANCES.items()
        },
        description="per-metric tolerances; metrics not listed use `default`",
    )
    evalsets: dict[str, dict[str, Tolerance]] = Field(
        default_factory=dict,
        description="per-evalset, per-metric tolerances (gate.evalsets.<evalset>.<metric>), "
        "before `metrics` and `default`: what one evalset can resolve is its own",
    )
    slices: Literal["gate", "report"] = "report"
    bootstrap_resamples: int = Field(
        DEFAULT_SWAPS,
        ge=100,
        description="random paired swaps (sign flips) behind the tests of non-count metrics "
        "and the family correction",
    )
    primary: str = Field(
        "accuracy",
        description="the metric tested at (nearly) full alpha; the first metric when absent",
    )
    secondary_share: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="share of alpha the other gating tests spend on their own before the "
        "primary fails; 0 tests them only after it",
    )
    strict: bool = Field(False, description="INCONCLUSIVE fails like FAIL: exit 1, run Failed")
    regression_delta: float | None = Field(
        None,
        ge=0,
        description="regression: change of an example's absolute error counted as worse or "
        "better; default 5% of the targets' standard deviation",
    )

    def tolerance(self, metric: str, evalset: str | None = None) -> Tolerance:
        """The tolerance for ``metric`` (on ``evalset``).

        The evalset's own entry, else the metric's, else the default.
        """
        own = self.evalsets.get(evalset, {}).get(metric) if evalset is not None else None
        return own if own is not None else self.metrics.get(metric, self.default)

    def setting(self, metric: str, evalset: str | None = None) -> str:
        """Where the tolerance of ``metric`` (on ``evalset``) is set: ``gate.<...>.max_drop``."""
        if evalset is not None and metric in self.evalsets.get(evalset, {}):
            return f"gate.evalsets.{evalset}.{metric}.max_drop"
        return (
            f"gate.metrics.{metric}.max_drop" if metric in self.metrics else "gate.default.max_drop"
        )

    def for_evalset(self, evalset: str) -> GatePolicy:
        """These settings with ``evalset``'s own tolerances in ``metrics`` (the gate of one pair)."""
        own = self.evalsets.get(evalset)
        if not own:
            return self
        return self.model_copy(update={"metrics": {**self.metrics, **own}, "evalsets": {}})


def _known_row_summaries(names: list[str]) -> list[str]:
    """``names`` when each is a row summary drift offers, listed once."""
    known = list(ROW_SUMMARY_NAMES)
    if not names:
        raise ValueError(
            f"no features listed; list some of {', '.join(known)}, or remove the entry for the "
            f"default ({', '.join(DEFAULT_ROW_SUMMARIES)})"
        )
    for name in names:
        if name not in ROW_SUMMARY_NAMES:
            raise ValueError(
                f"unknown feature {name!r}; choose from {', '.join(known)}."
                f"{did_you_mean(name, known)}"
            )
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ValueError(f"{twice!r} is listed twice; list each feature once")
    return names


class DriftPolicy(BaseModel):
    """Live-data drift: each evalset's recent production inputs, its features, and thresholds."""

    model_config = SETTINGS
    live: dict[str, str] = Field(
        default_factory=dict, description="evalset name -> Parquet path, glob or fsspec URL"
    )
    features: dict[str, Annotated[list[str], AfterValidator(_known_row_summaries)]] = Field(
        default_factory=dict,
        description="tensor evalset name -> the per-row summaries its drift is measured on "
        "(names in evalsentry.gate.drift.ROW_SUMMARIES); unlisted: drift.DEFAULT_ROW_SUMMARIES",
    )
    psi_warn: float = Field(0.1, ge=0)
    psi_fail: float = Field(0.25, ge=0)
    alpha: float = Field(0.05, gt=0, lt=1)
    fail_run: bool = Field(False, description="whether FAIL-level drift fails the weekly run")


class RecurringCost(BaseModel):
    """A cost no meter sees (labelling, people's hours, storage, monitoring), declared."""

    model_config = SETTINGS
    name: str = Field(min_length=1, description="what it pays for, e.g. labelling")
    amount: float = Field(ge=0, allow_inf_nan=False, description="money per `per`")
    per: Literal["week", "month"] = "month"
    model: str | None = Field(
        None, description="the model line it belongs to; absent: shared by every line"
    )


class CostRates(BaseModel):
    """Rates that turn measured time and energy into money and carbon, and declared costs."""

    model_config = SETTINGS
    currency: str = "USD"
    per_device_hour: dict[str, float] = Field(default_factory=lambda: {"cpu": 0.05, "cuda": 3.0})
    carbon_kg_per_kwh: float = Field(0.4, ge=0)
    power_watts: dict[str, float] = Field(
        default_factory=lambda: {"cpu": 65.0, "cuda": 700.0},
        description="fallback power draw when energy cannot be measured",
    )
    recurring: list[RecurringCost] = Field(
        default_factory=list,
        description="declared costs per week or month, of one model line or shared",
    )
    slowdown_warn: float = Field(
        0.25,
        gt=0,
        allow_inf_nan=False,
        description="a checkpoint this share slower per example than last week's, on the same "
        "device in paired timing, is a WARN (0.25: 1.25x the time)",
    )
    timing_budget_s: float = Field(
        5.0, gt=0, description="seconds one pair's paired timing may take; its sample is cut to fit"
    )


class Traffic(BaseModel):
    """A model line's expected serving traffic, for its serving forecast."""

    model_config = SETTINGS
    requests_per_day: float = Field(ge=0, allow_inf_nan=False)


class ModelBinding(BaseModel):
    """A model line's evalsets, and its training data (relative to this file) to check them for."""

    model_config = SETTINGS
    evalsets: list[str] = Field(
        min_length=1, description="the evalsets this model is evaluated on, and only these"
    )
    train_data: str | None = Field(None, description="files each week's split-leak check reads")
    leak: Literal["warn", "fail"] = Field("warn", description="what a split leak makes the week")


class ImportSource(BaseModel):
    """One model line's harness results, which the ``import-results`` flow picks up weekly.

    The options are those of ``evalsentry import lm-eval`` / ``import inspect``.
    """

    model_config = SETTINGS
    harness: Literal["lm-eval", "inspect"]
    results: str = Field(
        min_length=1,
        description="a folder or glob (relative to this file) of lm-eval output folders or "
        "results_*.json files, or of Inspect logs (.eval/.json) and folders of .eval logs",
    )
    task: str | None = Field(None, description="lm-eval: the task, when a run holds several")
    filter: str | None = Field(None, description="lm-eval: the filter, when the task logs several")
    evalset: str | None = Field(None, description="default: lm-eval.<task> or inspect.<task>")
    cluster: str | None = Field(None, description="field whose equal values group examples")
    allow_harness_change: bool = False

    @field_validator("task", "filter")
    @classmethod
    def _lm_eval_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("harness") == "inspect":
            raise ValueError("an lm-eval option; an Inspect log holds one task: remove it")
        return value

    @field_validator("evalset")
    @classmethod
    def _evalset_name(cls, value: str | None) -> str | None:
        try:
            return check_name("evalset", value) if value is not None else None
        except InvalidName as exc:
            raise ValueError(str(exc)) from None


def _line_names(sources: dict[str, ImportSource]) -> dict[str, ImportSource]:
    """``imports:`` keyed by valid model line names."""
    for line in sources:
        try:
            check_name("model", line)
        except InvalidName as exc:
            raise ValueError(str(exc)) from None
    return sources


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
    imports: Annotated[dict[str, ImportSource], AfterValidator(_line_names)] = Field(
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
