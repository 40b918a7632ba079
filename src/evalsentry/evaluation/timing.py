"""Is this week's checkpoint slower than last week's? Paired timing on one device, one process.

Serving recurs forever, so a checkpoint that takes markedly longer per example is a cost
regression, and a regression is reported. One evaluation's throughput a week is a poor witness:
the load on a shared host changes from week to week, and a 20% difference is noise as often as
not. Paired timing runs both checkpoints in one process on the same examples, alternating which
goes first (ABBA), round after round, after a warm-up each. A round repeats its pass over the
examples for about 50 ms and keeps the fastest pass, since another process can only add time;
each round's ratio then cancels what load is left. A slowdown is a WARN only when the median ratio passes ``cost.slowdown_warn`` and all
rounds but one are slower by at least half of it: one unlucky round cannot raise it, nor one
lucky round hide it.

:func:`evalsentry.evaluation.speed.time_pair` measures, in the evaluation's child process
(``evalsentry.evaluation.isolation``), where the checkpoints' code runs; this module judges:
:func:`slowdown_pairs` and :func:`slowdown_comparison` are the caller's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalsentry.evaluation.speed import PairedTiming
from evalsentry.gate.verdicts import Comparison, Reference, Verdict
from evalsentry.names import TIMING_METRIC, WEEKLY_RUN
from evalsentry.weeks import week_start, weeks_in_order

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evaluation.pipeline import Outcome, Target
    from evalsentry.history.store import History

log = logging.getLogger(__name__)

#: The comparison's metric: its values are microseconds per example, slower is worse.
METRIC = TIMING_METRIC


@dataclass(frozen=True)
class TimingPair:
    """A production checkpoint's evaluation this week, and its line's previous one to time against."""

    outcome: Outcome
    reference: Mapping[str, Any]  # last week's evaluation row of the line on the same evalset


def slowdown_pairs(outcomes: Sequence[Outcome], history: History, week: str) -> list[TimingPair]:
    """One pair per model line whose production checkpoint changed since its previous week.

    The previous week is the line's latest scheduled week before ``week`` with a successful
    production evaluation on the same evalset and device kind. The same checkpoint as then, a
    different device, or no such week: nothing to time.
    """
    pairs, seen = [], set()
    for outcome in sorted(outcomes, key=lambda o: (o.evaluation["model"], o.evaluation["evalset"])):
        row = outcome.evaluation
        if (
            not outcome.ok
            or row["model"] in seen
            or row["stage"] != "production"
            or row["kind"] != WEEKLY_RUN
        ):
            continue
        earlier = history.evaluations(model=row["model"], evalset=row["evalset"], kind=WEEKLY_RUN)
        earlier = earlier[
            (earlier["status"] == "ok")
            & (earlier["stage"] == "production")
            & earlier["week"].isin(weeks_in_order(earlier["week"]))  # valid weeks only
        ]
        earlier = earlier[earlier["week"].map(week_start) < week_start(week)]
        if earlier.empty:
            continue
        previous = earlier.loc[earlier["week"].map(week_start).idxmax()]
        if previous["checkpoint_sha256"] == row["checkpoint_sha256"]:
            continue
        if previous["device"] != row["device"]:
            continue
        seen.add(row["model"])
        pairs.append(TimingPair(outcome, previous.to_dict()))
    return pairs


def microseconds(seconds: float) -> str:
    """``7.5 µs``, ``1,500 µs``: about three significant digits, never scientific notation."""
    value = seconds * 1e6
    decimals = 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 1 else 3
    text = f"{value:,.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if decimals else text) + " µs"


def slowdown_comparison(
    pair: TimingPair,
    timing: PairedTiming | None,
    threshold: float,
    error: str = "",
    *,
    serving: ServingBill | None = None,
) -> Comparison:
    """The WARN (or PASS) of one pair's paired timing; a WARN saying so when it could not run.

    Slower beyond ``threshold`` in all rounds but one is a WARN; faster by as much, just as
    consistently, is a PASS that says the version is cheaper. ``serving`` (the line's declared
    traffic) adds what a month of it costs with each version.
    """
    from evalsentry.gate.pairs import owner

    previous = pair.reference
    base = {
        **owner(pair.outcome.evaluation),  # whose: the evaluation's kind, stage and checkpoint too
        "reference": Reference.PREVIOUS_WEEK,
        "metric": METRIC,
        "reference_evaluation_id": previous["evaluation_id"],
        "reference_week": previous["week"],
        "reference_version": int(previous["version"]),
        "method": "paired timing",
    }
    if timing is None:
        return Comparison(
            **base,
            verdict=Verdict.WARN,
            reason=f"paired timing against v{previous['version']} could not run: {error}",
        )
    before, now = timing.per_example()
    slower = sum(ratio > 1 + threshold / 2 for ratio in timing.ratios)
    flagged = timing.ratio > 1 + threshold and slower >= len(timing.ratios) - 1
    faster = sum(ratio < 1 - threshold / 2 for ratio in timing.ratios)
    cheaper = timing.ratio < 1 - threshold and faster >= len(timing.ratios) - 1
    bill = f"; {serving.change(before, now)}" if serving is not None else ""
    counted = f"{faster} faster" if cheaper else f"{slower} slower"
    measured = _measured(timing, int(previous["version"]), f"{counted} by over {threshold / 2:.0%}")
    return Comparison(
        **base,
        verdict=Verdict.WARN if flagged else Verdict.PASS,
        reason=f"{measured}; serving costs {timing.ratio:.2f}x as much{bill}"
        if flagged
        else f"cheaper: {measured}; serving costs {timing.ratio:.2f}x as much{bill}"
        if cheaper
        else f"no slowdown: {measured}",
        reference_value=before * 1e6,
        value=now * 1e6,
        delta=(now - before) * 1e6,
        drop=(now - before) * 1e6,  # slower is worse
        tolerance=before * threshold * 1e6,
        n=timing.examples,
    )


def _measured(timing: PairedTiming, version: int, counted: str) -> str:
    """``1.50x the time per example of v1 on cpu (1,500 µs vs 1,000 µs; median of 7 ...)``."""
    before, now = timing.per_example()
    return (
        f"{timing.ratio:.2f}x the time per example of v{version} on {timing.device} "
        f"({microseconds(now)} vs {microseconds(before)}; median of {len(timing.ratios)} paired "
        f"rounds ({min(timing.ratios):.2f}x to {max(timing.ratios):.2f}x) over "
        f"{timing.examples:,} examples{_cut(timing)}, {counted})"
    )


def _cut(timing: PairedTiming) -> str:
    """`` (the sample cut to fit the 5 s timing budget)`` where it was; else ""."""
    if timing.budget_s is None:
        return ""
    return f" (the sample cut to fit the {timing.budget_s:g} s timing budget)"


def check_slowdowns(
    pairs: Sequence[TimingPair],
    evalsets: Mapping[str, Evalset],
    config: Config,
    *,
    device: str,
) -> list[Comparison]:
    """Time each pair in an evaluation child; one comparison per pair whose versions still exist.

    A previous version no longer in the registry leaves nothing to time (logged). A timing that
    fails (a checkpoint that will not load, a timeout) is a WARN saying why: the cost check was
    not made, and that is said, not hidden.
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.errors import RegistryError
    from evalsentry.evaluation.isolation import failure_reason, request_isolated
    from evalsentry.evaluation.pipeline import Target

    registry = Registry(config.registry_url)
    found = []
    for pair in pairs:
        row, previous = pair.outcome.evaluation, pair.reference
        try:
            current = Target.from_entry(registry.show(row["model"], int(row["version"])))
            reference = Target.from_entry(registry.show(row["model"], int(previous["version"])))
        except RegistryError as exc:
            log.info("%s: not timed against its previous version: %s", row["model"], exc)
            continue

        try:
            answer = request_isolated(
                "time",
                current.uri,
                load_arguments_of(current, config),
                evalsets[row["evalset"]],
                device=device,
                timeout_s=config.inference_timeout_s,
                reference_uri=reference.uri,
                reference_load=load_arguments_of(reference, config),
                budget_s=config.cost.timing_budget_s,
            )
        except Exception as exc:  # noqa: BLE001 - whatever failed, the check says it did not run
            found.append(
                slowdown_comparison(
                    pair, None, config.cost.slowdown_warn, failure_reason(exc, "timing")
                )
            )
            continue
        found.append(
            slowdown_comparison(
                pair,
                answer.result,
                config.cost.slowdown_warn,
                serving=serving_bill(config, row["model"], answer.result.device),
            )
        )
    return found


@dataclass(frozen=True)
class ServingBill:
    """A line's declared traffic at its device's price: what a month of serving costs."""

    requests_per_day: float
    per_device_hour: float
    currency: str

    def month(self, seconds_per_example: float) -> float:
        """The money a month of the traffic costs at ``seconds_per_example``."""
        from evalsentry.cost.units import DAYS_PER_MONTH

        hours = seconds_per_example * self.requests_per_day * DAYS_PER_MONTH / 3600
        return hours * self.per_device_hour

    def change(self, before_s: float, now_s: float) -> str:
        """``at 100,000 requests/day: 0.41 -> 0.25 USD/month``."""
        from evalsentry.cost.units import money

        before, now = money(self.month(before_s), ""), money(self.month(now_s), self.currency)
        return f"at {self.requests_per_day:,.0f} requests/day: {before} -> {now}/month"


def serving_bill(config: Config, model: str, device: str) -> ServingBill | None:
    """The line's serving bill on ``device`` (``cuda:0`` is priced as ``cuda``); None without traffic."""
    traffic = config.traffic.get(model)
    price = config.cost.per_device_hour.get(device.split(":", maxsplit=1)[0])
    if traffic is None or price is None:  # no traffic declared, or no price for the device
        return None
    return ServingBill(traffic.requests_per_day, price, config.cost.currency)


def load_arguments_of(target: Target, config: Config) -> dict[str, Any]:
    """What the child may load ``target`` with: the trust, and the hash and factory pinned."""
    from evalsentry.evaluation.isolation import load_arguments

    pinned = target.pinned_model
    return load_arguments(
        config.trust,
        target.sha256,
        pinned.get("factory"),
        pinned.get("kwargs"),
        pinned.get("transform"),
    )
