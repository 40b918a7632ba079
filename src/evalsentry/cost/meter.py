"""What an evaluation costs: time, energy, carbon and money.

Energy comes from codecarbon's offline tracker (CPU and RAM power models, GPU energy through
NVML), started once per run; each evaluation is one tracker task, so measuring costs a few
milliseconds per evaluation, not per batch. Where codecarbon cannot run, energy is estimated
from the configured power draw times the inference time, and the row says so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsentry.sections import CostRates

log = logging.getLogger(__name__)

SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6


@dataclass
class Measurement:
    """Energy of one measured block; filled in when the block ends."""

    energy_kwh: float | None = None
    method: str = ""


class CostMeter:
    """One energy tracker for a whole run; ``measure`` brackets each evaluation.

    Measured blocks run one at a time: energy is read for the whole process, so two blocks
    measured at once would each be charged for both. (Torch already uses every core for one
    evaluation; parallelism across evaluations comes from more workers, not more threads.)
    """

    def __init__(self, *, use_codecarbon: bool = True) -> None:
        self._lock = threading.Lock()
        self._tracker: Any = None
        self._failed = not use_codecarbon
        self._method = ""

    def _start(self) -> Any:
        if self._tracker is None and not self._failed:
            try:
                import codecarbon
                from codecarbon import OfflineEmissionsTracker

                logging.getLogger("codecarbon").setLevel(logging.ERROR)
                with cpu_named_from_proc():
                    tracker = OfflineEmissionsTracker(
                        country_iso_code="USA",  # its grid intensity only; evalsentry's rate applies
                        output_methods=[],  # measurements stay in memory; the history records them
                        log_level="error",
                        tracking_mode="process",
                    )
                    tracker.start()
                self._tracker = tracker
                self._method = f"codecarbon {getattr(codecarbon, '__version__', '')}".strip()
            except Exception as exc:  # noqa: BLE001 - energy falls back to an estimate, recorded as such
                log.warning(
                    "codecarbon unavailable (%s); estimating energy from configured power", exc
                )
                self._failed = True
        return self._tracker

    def start_in_background(self) -> None:
        """Start the tracker on a thread now; the first ``measure`` waits for it.

        Its hardware probe takes about a second: this overlaps it with loading model and data.
        """

        def start() -> None:
            with self._lock:
                self._start()

        threading.Thread(target=start, name="evalsentry-cost-meter", daemon=True).start()

    @contextmanager
    def measure(self, name: str) -> Iterator[Measurement]:
        """Measure the energy of the enclosed block (None when it cannot be measured)."""
        measurement = Measurement()
        with self._lock:
            tracker = self._start()
            if tracker is None:
                yield measurement
                return
            tracker.start_task(name)
            try:
                yield measurement
            finally:
                data = tracker.stop_task(name)
                measurement.energy_kwh = float(data.energy_consumed)
                measurement.method = self._method

    def close(self) -> None:
        """Stop the tracker (after a background start has finished)."""
        with self._lock:
            if self._tracker is not None:
                try:
                    self._tracker.stop()
                finally:
                    self._tracker = None


#: The /proc/cpuinfo keys py-cpuinfo takes a CPU's name from, in its order (a number is not one).
CPU_NAME_KEYS = ("model name", "cpu", "processor", "uarch")


def proc_cpu_name(text: str | None = None) -> str | None:
    """The CPU's name as py-cpuinfo reads it from /proc/cpuinfo; None where there is none.

    The first line whose key is one of :data:`CPU_NAME_KEYS` and whose value is not a number,
    as py-cpuinfo's own parser takes it (``text``: the file's text, else the file is read).
    """
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        value = value.strip()
        if colon and key.strip().lower() in CPU_NAME_KEYS and value and not value.isdigit():
            return value
    return None


@contextmanager
def cpu_named_from_proc() -> Iterator[None]:
    """While codecarbon starts, py-cpuinfo's answer is the CPU's name from /proc/cpuinfo.

    codecarbon asks py-cpuinfo for the CPU's name only (to look up its TDP, once per process).
    py-cpuinfo answers from a Python process of its own that also times the clock through
    CPUID: a core spinning for about a second beside the evaluation that needs it. On Linux
    its answer is the name :func:`proc_cpu_name` reads (py-cpuinfo takes /proc/cpuinfo's
    first). Where that file names no CPU, py-cpuinfo is asked as before. The answer is swapped
    for the whole process while the tracker starts (nothing else in evalsentry asks
    py-cpuinfo); codecarbon keeps the name it got for the life of the process.
    """
    name = proc_cpu_name()
    if name is None:
        yield
        return
    import cpuinfo

    asked = cpuinfo.get_cpu_info
    cpuinfo.get_cpu_info = lambda: {"brand_raw": name}
    try:
        yield
    finally:
        cpuinfo.get_cpu_info = asked


def cost_fields(
    *,
    device: str,
    wall_s: float,
    inference_s: float,
    n_examples: int,
    measurement: Measurement,
    rates: CostRates,
) -> dict[str, Any]:
    """The cost columns of an evaluation row."""
    energy, method = measurement.energy_kwh, measurement.method
    if energy is None:
        watts = rates.power_watts.get(device, 0.0)
        energy = watts * inference_s / JOULES_PER_KWH
        method = f"estimate: {watts:g} W configured x inference time"
    return {
        "wall_s": wall_s,
        "inference_s": inference_s,
        "examples_per_s": n_examples / inference_s if inference_s > 0 else None,
        "energy_kwh": energy,
        "co2_kg": energy * rates.carbon_kg_per_kwh,
        "cost": rates.per_device_hour.get(device, 0.0) * wall_s / SECONDS_PER_HOUR,
        "currency": rates.currency,
        "energy_method": method,
    }


LEDGER_GROUPS = ("model", "device", "week")
TOKEN_COLUMNS = ("input_tokens", "output_tokens")
PER_MILLION = 1e6


def token_counts(evaluations: Any) -> Any:
    """Each evaluation row's tokens, input and output; null where it counted none.

    A null is not zero: the row's evalset is not a token task (an image classifier), or its
    harness recorded no usage. Rows of a history older than schema 2 have no token columns.
    """
    import pandas as pd

    present = [c for c in TOKEN_COLUMNS if c in evaluations]
    if not present:
        return pd.Series(float("nan"), index=evaluations.index, dtype=float)
    return evaluations[present].astype(float).sum(axis=1, min_count=1)


def ledger(evaluations: Any, by: str) -> Any:
    """The bill from the history's evaluation rows, grouped ``by`` model, device or week.

    Returns a DataFrame with evaluations, device-hours, kWh, kg CO2 and money per group, and a
    final ``total`` row; with tokens (input and output), tokens per second of inference time
    and money per million tokens, each from the group's rows that counted tokens only (null
    where none did).
    """
    import pandas as pd

    if by not in LEDGER_GROUPS:
        from evalsentry.errors import UsageError

        raise UsageError(f"--by: {by!r} is not one of {', '.join(LEDGER_GROUPS)}")
    frame = evaluations.assign(
        device=evaluations["device"].fillna("unknown"),
        device_hours=evaluations["wall_s"].fillna(0) / SECONDS_PER_HOUR,
        **_token_parts(evaluations),
    )
    grouped = frame.groupby(by, sort=True).agg(
        evaluations=("evaluation_id", "count"),
        device_hours=("device_hours", "sum"),
        kwh=("energy_kwh", "sum"),
        co2_kg=("co2_kg", "sum"),
        cost=("cost", "sum"),
    )
    parts = list(_TOKEN_PARTS)
    grouped[parts] = frame.groupby(by, sort=True)[parts].sum(min_count=1)
    grouped.loc["total"] = grouped.sum(numeric_only=True, min_count=1)
    grouped["evaluations"] = grouped["evaluations"].astype(int)
    grouped["tokens_per_s"] = grouped["timed_tokens"] / grouped["token_s"].where(
        grouped["token_s"] > 0
    )
    grouped["cost_per_million_tokens"] = (
        grouped["token_cost"] / grouped["priced_tokens"].where(grouped["priced_tokens"] > 0)
    ) * PER_MILLION
    currency = frame["currency"].dropna().iloc[0] if frame["currency"].notna().any() else ""
    grouped = grouped.drop(columns=[p for p in parts if p != "tokens"])
    return pd.DataFrame(grouped).reset_index().assign(currency=currency)


#: What the ledger sums of the rows that counted tokens, to divide after grouping.
_TOKEN_PARTS = ("tokens", "timed_tokens", "token_s", "priced_tokens", "token_cost")


def _token_parts(evaluations: Any) -> dict[str, Any]:
    """Per row: its tokens; those with an inference time, and the time; those priced, and the money.

    Each rate divides sums over the same rows: a row with tokens but no recorded money (an
    imported run in another currency) counts in tokens/s, not in the money per token.
    """
    tokens = token_counts(evaluations)
    seconds = evaluations["inference_s"].astype(float)
    timed = tokens.notna() & (seconds > 0)
    priced = tokens.notna() & evaluations["cost"].notna()
    return {
        "tokens": tokens,
        "timed_tokens": tokens.where(timed),
        "token_s": seconds.where(timed),
        "priced_tokens": tokens.where(priced),
        "token_cost": evaluations["cost"].astype(float).where(priced),
    }
