"""The sections of ``evalsentry.yaml`` below its top level: gate, drift, cost, models, imports.

Each is one pydantic model with the same strict settings (:data:`SETTINGS`); ``Config``
(:mod:`evalsentry.config`) holds them and loads the file.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from evalsentry.errors import InvalidName, did_you_mean
from evalsentry.names import check_name

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
    # A language model: 5% more perplexity, about 0.05 nats more per token; above what five
    # seeds of the text example's language model need (4.1% and 0.041 with probability 0.95:
    # README, "Language models and token sequences").
    "perplexity": "5%",
    "token_nll": 0.05,
}

#: The per-row summaries a tensor input's drift can be measured on (``drift.features``); each
#: is computed by ``evalsentry.gate.drift.ROW_SUMMARIES`` under the same name.
ROW_SUMMARY_NAMES = ("mean", "std", "min", "max", "share_above_half_max")
#: The summaries of a tensor evalset ``drift.features`` does not list: meaningful for any
#: values, where a share above a threshold assumes non-negative intensities such as pixels.
DEFAULT_ROW_SUMMARIES: tuple[str, ...] = ("mean", "std", "min", "max")


#: Every settings model: unknown keys refused; strict types, so ``yes`` (YAML's true) is never
#: a 1 where a number belongs and ``123`` never text; NaN and infinities refused. Each model's
#: validator is built when first used, not at import: a command that reads no configuration
#: (or reads it once, through :class:`evalsentry.config.Config`) does not build them all.
SETTINGS = ConfigDict(
    extra="forbid", frozen=True, strict=True, allow_inf_nan=False, defer_build=True
)

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
    only_unchanged: list[str] = Field(
        default_factory=list,
        description="imported evalsets whose comparisons pair only the examples both runs "
        "hold unchanged (edited, added or left-out examples are left out, and a PASS reads "
        "WARN saying how many); any other evalset refuses such a pair",
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
    latency_p99_ms: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the latency a request may wait, at its 99th percentile: `evalsentry "
        "profile` names the cheapest batch size within it",
    )


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
    task: str | list[str] | None = Field(
        None,
        description="lm-eval: the task, when a run holds several, or a list of tasks (each its "
        "own evalset); a task group (MMLU) imports as one evalset with a slice per subtask",
    )
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
    def _evalset_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        tasks = info.data.get("task")
        if value is not None and isinstance(tasks, list) and len(tasks) > 1:
            raise ValueError("names one evalset, and task lists several: remove it (each task is its own evalset)")  # fmt: skip
        try:
            return check_name("evalset", value) if value is not None else None
        except InvalidName as exc:
            raise ValueError(str(exc)) from None


def line_names(sources: dict[str, ImportSource]) -> dict[str, ImportSource]:
    """``imports:`` keyed by valid model line names."""
    for line in sources:
        try:
            check_name("model", line)
        except InvalidName as exc:
            raise ValueError(str(exc)) from None
    return sources
