"""The serving levers each line has weighed: a variant's quality and cost against its parent.

``evalsentry evaluate --version N`` of a serving variant records one row weighing both
(:mod:`evalsentry.evaluation.serving`). Here the newest such row of each variant becomes a line
of the lifetime bill (``evalsentry cost --lifetime``) and a row of the weekly report's serving
table: with the line's traffic declared, what a month of serving costs with the parent and
with the variant, and what choosing the variant saves, or would add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalsentry.evaluation.serving import CHEAPER, COST_HELD, COSTLIER, METHOD, said_in
from evalsentry.gate.verdicts import Reference

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.config import Config
    from evalsentry.history.store import History

#: Headers of :func:`lever_rows`.
LEVER_HEADERS = [
    "variant",
    "of",
    "verdict",
    "week",
    "time per example",
    "a month of traffic",
    "saves",
]


@dataclass(frozen=True)
class Lever:
    """A variant's newest weighing against the version it is a variant of."""

    model: str
    version: int
    parent: int
    transform: str
    verdict: str  # CHEAPER, COSTLIER, COST HELD, or the quality verdict
    week: str
    parent_s: float  # seconds per example, paired
    variant_s: float
    device: str
    reason: str

    def month(self, config: Config) -> tuple[float, float] | None:
        """A month of the line's declared traffic with the parent, then the variant.

        None without traffic, or without a price for the device.
        """
        from evalsentry.evaluation.timing import serving_bill

        bill = serving_bill(config, self.model, self.device)
        if bill is None:
            return None
        return bill.month(self.parent_s), bill.month(self.variant_s)

    def in_words(self, config: Config) -> str:
        """``cancer: serving v10 (dynamic-int8) instead of v8 saves 1.20 USD/month ...``."""
        from evalsentry.cost.units import money

        name = f"{self.model}: serving v{self.version} ({self.transform}) instead of v{self.parent}"
        said = said_in(self.reason).ratio  # the row's own number: the median paired round's
        ratio = said if said is not None else self.variant_s / self.parent_s
        if self.verdict not in (CHEAPER, COSTLIER, COST_HELD):
            return f"{name}: not weighed, its quality {self.verdict} ({self.week}; {ratio:.2f}x the time per example)"  # fmt: skip
        months = self.month(config)
        if months is None:
            missing = f"traffic.{self.model}" if self.model not in config.traffic else f"cost.per_device_hour.{self.device.split(':')[0]}"  # fmt: skip
            return f"{name}: {self.verdict}, {ratio:.2f}x the time per example ({self.week}; declare {missing} for the month's bill)"  # fmt: skip
        if self.verdict == COST_HELD:
            return f"{name}: the paired rounds showed no difference in cost ({self.week})"
        change = months[0] - months[1]
        verb = "saves" if self.verdict == CHEAPER else "would add"
        per = f"{money(abs(change), config.cost.currency)}/month"
        return f"{name} {verb} {per} at the declared traffic ({self.verdict}, {self.week})"


def levers(
    history: History, until: str | None = None, evaluations: pd.DataFrame | None = None
) -> list[Lever]:
    """Each variant's newest weighing, by line and version (to ``until``'s week only).

    Only the history's current evaluations count (``evaluations``: those rows where the caller
    has read and cut them to ``until`` already; each row's device prices its serving). A
    variant whose newest weighing could not time it ("cost not weighed") has no lever: an older
    saving is not claimed again.
    """
    from evalsentry.names import TIMING_METRIC
    from evalsentry.weeks import weeks_up_to

    if evaluations is None:
        evaluations = history.evaluations()
        if until is not None and not evaluations.empty:
            evaluations = evaluations[evaluations["week"].isin(weeks_up_to(evaluations["week"], until))]  # fmt: skip
    if evaluations.empty:
        return []
    rows = history.comparisons(evaluations["evaluation_id"])
    rows = rows[
        (rows["metric"] == TIMING_METRIC) & (rows["reference"] == Reference.PRODUCTION.value)
    ]
    devices = evaluations.set_index("evaluation_id")["device"]
    newest = rows.sort_values("created_at").groupby(["model", "version"]).tail(1)
    found = []
    for row in newest.itertuples():
        if row.method != METHOD:  # its timing could not run: nothing to bill
            continue
        said = said_in(str(row.reason))
        found.append(
            Lever(
                str(row.model), int(row.version), int(row.reference_version), said.made,
                said.word or str(row.verdict), str(row.week),
                float(row.reference_value) / 1e6, float(row.value) / 1e6,
                str(devices[row.evaluation_id]), str(row.reason),
            )
        )  # fmt: skip
    return sorted(found, key=lambda lever: (lever.model, lever.version))


def lever_rows(found: list[Lever], config: Config) -> list[list[str]]:
    """The serving table: one row per weighed variant (see :data:`LEVER_HEADERS`)."""
    from evalsentry.cost.units import money
    from evalsentry.evaluation.timing import microseconds

    rows = []
    for lever in found:
        months = lever.month(config)
        per_month = saves = ""
        if months is not None:
            per_month = f"{money(months[0], '')} -> {money(months[1], config.cost.currency)}"
            change = money(abs(months[0] - months[1]), config.cost.currency)
            saves = {CHEAPER: change, COSTLIER: f"adds {change}", COST_HELD: "no difference shown"}.get(lever.verdict, "not weighed")  # fmt: skip
        timing = f"{microseconds(lever.parent_s)} -> {microseconds(lever.variant_s)}"
        rows.append(
            [f"{lever.model}@v{lever.version} ({lever.transform})", f"v{lever.parent}",
             lever.verdict, lever.week, timing, per_month, saves]
        )  # fmt: skip
    return rows
