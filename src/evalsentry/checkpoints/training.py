"""What training a checkpoint cost: time, device-hours, energy, carbon and money.

Training code brackets its loop with ``track_training`` and hands the run to
``save_checkpoint(..., training=run)``, which records it in the lineage as ``training_cost``.
Energy is measured as an evaluation's is (``evalsentry.cost.meter``: codecarbon's offline tracker);
where that cannot run, it is the configured power draw times the wall time, and the run says so.
Money and carbon come from the same ``cost`` rates of ``evalsentry.yaml`` evaluations use.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import FrozenInstanceError, asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalsentry.config import find_config, load_config
from evalsentry.cost.meter import JOULES_PER_KWH, SECONDS_PER_HOUR, CostMeter, Measurement
from evalsentry.errors import UsageError
from evalsentry.sections import CostRates
from evalsentry.weeks import is_aware_timestamp

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

#: The numbers of a run, each finite and non-negative.
NUMBER_FIELDS = ("wall_s", "device_hours", "energy_kwh", "co2_kg", "cost")
#: The timestamps of a run, ISO 8601 with a timezone; the other fields are non-empty text.
TIME_FIELDS = ("started_at", "ended_at")
#: The keys of ``lineage["training_cost"]``, in the order they are written.
TRAINING_COST_FIELDS = (
    "device",
    "wall_s",
    "device_hours",
    "energy_kwh",
    "co2_kg",
    "cost",
    "currency",
    "energy_method",
    "started_at",
    "ended_at",
)


class BadTrainingCost(UsageError):
    """``training=`` is not a finished run or a complete, plausible record of one."""

    def __init__(self, field: str, problem: str) -> None:
        self.field, self.problem = field, problem
        where = f"training_cost.{field}" if field else "training"
        super().__init__(
            f"{where}: {problem}; pass training= the run `with track_training()` "
            "yielded, after the block, or a mapping of " + ", ".join(TRAINING_COST_FIELDS)
        )


@dataclass
class TrainingRun:
    """One training run's cost; filled in, and frozen, when its ``track_training`` block ends.

    Inside the block only ``device`` and ``started_at`` are known; ``closed`` turns true at
    exit, whether the block finished or raised.
    """

    device: str
    started_at: str
    ended_at: str = ""
    wall_s: float = 0.0
    device_hours: float = 0.0
    energy_kwh: float = 0.0
    co2_kg: float = 0.0
    cost: float = 0.0
    currency: str = ""
    energy_method: str = ""
    closed: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "closed", False):
            raise FrozenInstanceError(f"cannot assign to field {name!r}: the run has ended")
        super().__setattr__(name, value)

    def as_lineage(self) -> dict[str, Any]:
        """The ``training_cost`` record of the lineage."""
        values = asdict(self)
        return {name: values[name] for name in TRAINING_COST_FIELDS}


def device_type(device: str | torch.device | None = None) -> str:
    """The device kind the cost rates are keyed by: ``cpu`` or ``cuda`` (``cuda:1`` -> ``cuda``).

    ``None`` detects it: ``cuda`` where torch sees a GPU, else ``cpu``.
    """
    if device is None:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    kind = getattr(device, "type", None) or str(device).split(":", maxsplit=1)[0].strip()
    if not kind:
        raise UsageError(f"device={device!r}: name a device, such as 'cpu' or 'cuda'")
    return str(kind)


def run_cost(
    device: str, wall_s: float, measurement: Measurement, rates: CostRates
) -> dict[str, Any]:
    """Device-hours, energy, carbon and money of ``wall_s`` seconds on ``device``.

    Measured energy is used when there is some; otherwise the configured power draw times the
    wall time (the whole run occupies the device, not only part of it as inference does).
    """
    energy, method = measurement.energy_kwh, measurement.method
    if energy is None:
        watts = rates.power_watts.get(device, 0.0)
        energy = watts * wall_s / JOULES_PER_KWH
        method = f"estimate: {watts:g} W configured x wall time"
    hours = wall_s / SECONDS_PER_HOUR
    if device not in rates.per_device_hour:
        log.warning("no cost.per_device_hour for device %r; its training is costed at 0", device)
    return {
        "wall_s": wall_s,
        "device_hours": hours,
        "energy_kwh": energy,
        "co2_kg": energy * rates.carbon_kg_per_kwh,
        "cost": rates.per_device_hour.get(device, 0.0) * hours,
        "currency": rates.currency,
        "energy_method": method,
    }


@contextmanager
def track_training(
    device: str | torch.device | None = None,
    *,
    rates: CostRates | None = None,
    config: str | Path | None = None,
    use_codecarbon: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[TrainingRun]:
    """Measure the enclosed training; the yielded run is filled in when the block ends.

    An exception inside the block propagates; the run is still closed (tracker stopped, cost
    of the time spent recorded).

    Args:
        device: where training runs: ``cpu``, ``cuda``, ``cuda:N`` or a ``torch.device``;
            ``None`` detects it (``cuda`` where torch sees a GPU).
        rates: money per device-hour, grid carbon intensity and fallback power draw; default:
            the ``cost`` section of ``config``.
        config: the ``evalsentry.yaml`` whose rates apply; default the project's (found from
            the working folder up, as git finds a repository), and outside any the default rates.
        use_codecarbon: measure energy with codecarbon; ``False`` always estimates it.
        clock: seconds from a monotonic clock (a test passes a fake one).

    Raises:
        ConfigError: ``config`` is named but missing, or is invalid (before training starts).

    """
    kind = device_type(device)
    if rates is None:
        path = config if config is not None else find_config()
        rates = load_config(path).cost if path is not None else CostRates()
    meter = CostMeter(use_codecarbon=use_codecarbon)
    run = TrainingRun(device=kind, started_at=_now())
    measurement = Measurement()
    wall_s = 0.0
    try:
        with meter.measure("training") as measurement:
            run.started_at = _now()  # once the tracker is up: its start-up is not training
            start = clock()
            try:
                yield run
            finally:
                _synchronize(kind)
                wall_s = max(0.0, clock() - start)
                run.ended_at = _now()
    finally:
        meter.close()
        for name, value in run_cost(kind, wall_s, measurement, rates).items():
            setattr(run, name, value)
        run.ended_at = run.ended_at or _now()
        run.closed = True
        log.info(
            "training on %s: %.1f s, %.3g kWh (%s), %.3g %s",
            kind,
            run.wall_s,
            run.energy_kwh,
            run.energy_method,
            run.cost,
            run.currency,
        )


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _synchronize(kind: str) -> None:
    """Wait for queued GPU work, so the wall time covers it (torch is loaded by then)."""
    torch = sys.modules.get("torch")
    if kind != "cuda" or torch is None:
        return
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a failing device must not hide the block's own error
        log.warning("could not synchronize CUDA before timing training: %s", exc)


def training_cost(training: TrainingRun | Mapping[str, Any]) -> dict[str, Any]:
    """The checked ``training_cost`` lineage record of a finished run or a mapping.

    Raises:
        BadTrainingCost: the run is still open, or a field is missing, unknown, or not a
            finite non-negative number, non-empty text, or a timezone-aware ISO timestamp.

    """
    if isinstance(training, TrainingRun):
        if not training.closed:
            raise BadTrainingCost(
                "closed", "the run is still open; call save_checkpoint after its with block"
            )
        record: Mapping[str, Any] = training.as_lineage()
    elif isinstance(training, Mapping):
        record = training
    else:
        raise BadTrainingCost("", f"a {type(training).__name__} is not a run")
    unknown = sorted(str(k) for k in record if k not in TRAINING_COST_FIELDS)
    if unknown:
        raise BadTrainingCost(unknown[0], "unknown field")
    missing = [name for name in TRAINING_COST_FIELDS if name not in record]
    if missing:
        raise BadTrainingCost(missing[0], f"missing (missing: {', '.join(missing)})")
    return {name: _checked(name, record[name]) for name in TRAINING_COST_FIELDS}


def _checked(name: str, value: Any) -> Any:
    """One field of a ``training_cost`` record, checked (numbers as floats)."""
    if name in NUMBER_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadTrainingCost(name, f"{value!r} is not a number")
        if not math.isfinite(value) or value < 0:
            raise BadTrainingCost(name, f"{value!r} is not a finite, non-negative number")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise BadTrainingCost(name, f"{value!r} is not non-empty text")
    if name in TIME_FIELDS and not is_aware_timestamp(value):
        raise BadTrainingCost(name, f"{value!r} is not an ISO 8601 timestamp with a timezone")
    return value
