"""The lifetime bill of each model line: training, evaluation, serving and declared costs.

Training is a fraction of what a model line costs over its life; serving recurs every day and
evaluation every week, and labelling, people and storage cost money no meter sees. The bill
puts them side by side, week by week, in the configured currency:

- **training**: what each registered checkpoint's run cost, from its lineage's
  ``training_cost`` (``track_training``), in the week the run ended;
- **evaluation**: what the history's evaluations of the line cost (all kinds), in their weeks;
- **serving**: the line's declared traffic (``traffic.<model>.requests_per_day``) served at the
  cost per prediction of that week's production checkpoint, measured by its scheduled
  evaluation: the device's hourly rate over its throughput, and the energy per example. The
  evaluation's batch size and device are the assumption: say so where it matters;
- **declared**: ``cost.recurring`` items, per week or per month (a month is 365.25/12 days),
  over every week of the line's life (its first to the history's latest week), or over the whole
  history for shared items.

For token tasks (rows that counted ``input_tokens``/``output_tokens``), each line also shows
the tokens its evaluations processed, and serving's cost per million tokens: the cost per
prediction over the tokens per prediction (input and output) its production evaluation
measured. Traffic is declared in requests, not tokens: each request is assumed to be like an
evaluated example, and a note says so with the number.

Weeks are ISO weeks. A training run in a currency other than the configured one is left out
and named in the notes: money is never added across currencies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from evalsentry.cost.units import DAYS_PER_MONTH
from evalsentry.names import WEEKLY_RUN
from evalsentry.reports.levers import lever_rows, levers
from evalsentry.weeks import iso_week, week_start, weeks_in_order, weeks_up_to

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.checkpoints.registry import RegistryEntry
    from evalsentry.config import Config
    from evalsentry.history.store import History
    from evalsentry.sections import CostRates

PARTS = ("training", "evaluation", "serving", "declared")
SHARED = "shared"
WEEKS_PER_MONTH = DAYS_PER_MONTH / 7
COLUMNS = ("model", "week", "part", "cost", "energy_kwh", "co2_kg", "tokens")


@dataclass(frozen=True)
class LineBill:
    """One model line's bill to date, by part, and its serving forecast."""

    model: str
    currency: str
    parts: dict[str, float]
    energy_kwh: float
    co2_kg: float
    first_week: str | None
    last_week: str | None
    requests_per_day: float | None = None
    serving_per_month: float | None = None
    cost_per_million: float | None = None
    evaluation_tokens: float | None = None  # None: no evaluation of the line counted tokens
    tokens_per_prediction: float | None = None  # of the production evaluation serving prices
    cost_per_million_tokens: float | None = None
    rate_week: str | None = None  # the week whose production evaluation prices serving

    @property
    def total(self) -> float:
        """Money to date, every part."""
        return sum(self.parts.values())

    def share(self, part: str) -> float | None:
        """``part``'s share of the total to date (None when the total is zero)."""
        return self.parts.get(part, 0.0) / self.total if self.total > 0 else None

    def in_words(self) -> str:
        """The training share in a sentence, and what dominates the bill."""
        from evalsentry.cost.units import money

        if self.model == SHARED:
            return f"shared by every line: {money(self.total, self.currency)} declared"
        if self.total <= 0:
            return f"{self.model}: nothing billed yet"
        training = self.share("training") or 0.0
        top = max(PARTS, key=lambda part: self.parts.get(part, 0.0))
        words = (
            f"{self.model}: training is {_percent(training)} of its bill to date "
            f"({money(self.parts.get('training', 0.0), self.currency)} of "
            f"{money(self.total, self.currency)})"
        )
        if top != "training":
            words += f"; {top} is the largest part, {_percent(self.share(top) or 0.0)}"
        return words


def _percent(share: float) -> str:
    if share == 0:
        return "0%"
    if share < 0.01:
        return "under 1%"
    return f"{share * 100:.0f}%"


@dataclass(frozen=True)
class Lifetime:
    """The whole bill: its weekly rows, each line's summary, and what was left out."""

    rows: pd.DataFrame
    lines: list[LineBill]
    notes: list[str]
    #: The serving variants weighed (:mod:`.levers`): a sentence each, and the serving table.
    levers: list[str] = field(default_factory=list)
    lever_rows: list[list[str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether nothing at all is billed yet."""
        return bool(self.rows.empty)


def lifetime(history: History, config: Config, until: str | None = None) -> Lifetime:
    """The lifetime bill from the history's evaluations and the registry's lineage.

    ``until`` (a week) bills that week and those before it only: a report of an earlier week
    shows the bill as it stood then.
    """
    from evalsentry.checkpoints.registry import Registry

    evaluations = history.evaluations()
    if until is not None:
        evaluations = evaluations[evaluations["week"].isin(weeks_up_to(evaluations["week"], until))]
    rates = serving_rates(evaluations, config.cost)
    entries = Registry(config.registry_url).list()
    rows, notes = lifetime_bill(evaluations, entries, config, rates)
    if until is not None:
        rows = rows[rows["week"].isin(weeks_up_to(rows["week"], until))]
    lines = line_bills(rows, config, rates)
    notes += [note for line in lines if (note := _token_note(line))]
    weighed = levers(history, until, evaluations)
    words = [lever.in_words(config) for lever in weighed]
    return Lifetime(rows, lines, notes, words, lever_rows(weighed, config))


def _token_note(line: LineBill) -> str | None:
    """What serving's cost per million tokens assumes, where the line has one."""
    if line.cost_per_million_tokens is None or line.tokens_per_prediction is None:
        return None
    return (
        f"{line.model}: serving per 1M tokens assumes each request is like an example of its "
        f"production evaluation in {line.rate_week}: {line.tokens_per_prediction:,.1f} tokens "
        "(input and output) per prediction; traffic is declared in requests/day, not tokens"
    )


def serving_rates(evaluations: pd.DataFrame, rates: CostRates) -> pd.DataFrame:
    """Per (model, week): money, kWh and kg CO2 per prediction of the production checkpoint.

    From the week's scheduled, successful evaluations of production checkpoints with a measured
    throughput; a line evaluated on several evalsets that week takes their mean. For token
    tasks, also the tokens per prediction and the money per token (the mean over the evalsets
    that counted tokens; null where none did).
    """
    import pandas as pd

    from evalsentry.cost.meter import token_counts

    needed = ("kind", "status", "stage", "examples_per_s", "n_examples", "device", "energy_kwh")
    if evaluations.empty or any(c not in evaluations for c in needed):
        return pd.DataFrame(columns=["model", "week", "device", *RATES])
    rows = evaluations[
        (evaluations["kind"] == WEEKLY_RUN)
        & (evaluations["status"] == "ok")
        & (evaluations["stage"] == "production")
        & (evaluations["examples_per_s"].fillna(0) > 0)
        & (evaluations["n_examples"].fillna(0) > 0)
        & evaluations["week"].isin(weeks_in_order(evaluations["week"]))  # valid weeks only
    ]
    device = rows["device"].fillna("cpu")
    hourly = device.map(lambda d: rates.per_device_hour.get(str(d), 0.0)).astype(float)
    energy = rows["energy_kwh"].fillna(0.0) / rows["n_examples"]
    cost = hourly / (rows["examples_per_s"] * 3600.0)
    tokens = token_counts(rows) / rows["n_examples"]
    per_prediction = pd.DataFrame(
        {
            "model": rows["model"],
            "week": rows["week"],
            "device": device,
            "cost": cost,
            "energy_kwh": energy,
            "co2_kg": energy * rates.carbon_kg_per_kwh,
            "tokens_per_prediction": tokens,
            "cost_per_token": cost / tokens.where(tokens > 0),
        }
    )
    return (
        per_prediction.groupby(["model", "week"], as_index=False)
        .agg(device=("device", "first"), **{column: (column, "mean") for column in RATES})
        .reset_index(drop=True)
    )


#: What :func:`serving_rates` gives per (model, week), each a mean over the week's evalsets.
RATES = ("cost", "energy_kwh", "co2_kg", "tokens_per_prediction", "cost_per_token")


def _training_rows(
    entries: Iterable[RegistryEntry], currency: str, notes: list[str]
) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        run = entry.lineage.get("training_cost")
        if not isinstance(run, dict):
            continue
        if run.get("currency") != currency:
            notes.append(
                f"{entry.ref}: training cost in {run.get('currency')!r}, not {currency}; "
                "left out of the bill"
            )
            continue
        try:  # a lineage written by other code (register --lineage) may hold anything
            week = iso_week(datetime.fromisoformat(str(run["ended_at"])))
            amounts = {key: float(run[key]) for key in ("cost", "energy_kwh", "co2_kg")}
            if not all(math.isfinite(v) and v >= 0 for v in amounts.values()):
                raise ValueError("an amount is negative or not finite")
        except (KeyError, TypeError, ValueError) as exc:
            notes.append(f"{entry.ref}: training_cost unreadable ({exc}); left out of the bill")
            continue
        rows.append({"model": entry.model, "week": week, "part": "training", **amounts})
    return rows


def _weeks_between(first: str, last: str) -> list[str]:
    """Every ISO week from ``first`` to ``last``, inclusive."""
    monday, end = week_start(first), week_start(last)
    weeks = []
    while monday <= end:
        weeks.append(iso_week(datetime(monday.year, monday.month, monday.day)))
        monday += timedelta(days=7)
    return weeks


def _evaluation_rows(evaluations: pd.DataFrame) -> list[dict[str, Any]]:
    """What the line's evaluations cost per week, and the tokens they counted (null: none)."""
    from evalsentry.cost.meter import token_counts

    if evaluations.empty:
        return []
    spent = (
        evaluations.assign(tokens=token_counts(evaluations))
        .groupby(["model", "week"], as_index=False)[["cost", "energy_kwh", "co2_kg", "tokens"]]
        .sum(min_count=1)
    )
    money = ["cost", "energy_kwh", "co2_kg"]
    spent[money] = spent[money].fillna(0.0)  # tokens stay null: not a token task
    return [{**r, "part": "evaluation"} for r in spent.to_dict("records")]


def lifetime_bill(
    evaluations: pd.DataFrame,
    entries: Sequence[RegistryEntry],
    config: Config,
    rates_per_prediction: pd.DataFrame,
) -> tuple[pd.DataFrame, list[str]]:
    """The bill as rows of (model, week, part, cost, energy_kwh, co2_kg), and notes.

    Declared items shared by every line are billed to the model ``shared``.
    """
    import pandas as pd

    rates = config.cost
    notes: list[str] = []
    rows: list[dict[str, Any]] = _training_rows(entries, rates.currency, notes)
    rows += _evaluation_rows(evaluations)
    for r in rates_per_prediction.to_dict("records"):
        traffic = config.traffic.get(r["model"])
        if traffic is None:
            continue
        weekly = traffic.requests_per_day * 7
        rows.append(
            {
                "model": r["model"],
                "week": r["week"],
                "part": "serving",
                "cost": r["cost"] * weekly,
                "energy_kwh": r["energy_kwh"] * weekly,
                "co2_kg": r["co2_kg"] * weekly,
            }
        )
    known = pd.DataFrame(rows, columns=list(COLUMNS))
    all_weeks = weeks_in_order(known["week"])
    for item in rates.recurring:
        owner = item.model or SHARED
        own = (
            all_weeks
            if item.model is None
            else weeks_in_order(known.loc[known["model"] == item.model, "week"])
        )
        if not own:
            notes.append(
                f"cost.recurring {item.name!r}: model line {owner!r} has no week billed yet"
            )
            continue
        weekly = item.amount if item.per == "week" else item.amount / WEEKS_PER_MONTH
        rows += [
            {"model": owner, "week": w, "part": "declared", "cost": weekly}
            for w in _weeks_between(own[0], all_weeks[-1])
        ]
    bill = pd.DataFrame(rows, columns=list(COLUMNS))
    bill[["energy_kwh", "co2_kg", "tokens"]] = bill[["energy_kwh", "co2_kg", "tokens"]].astype(
        float
    )
    return bill, notes


def line_bills(bill: pd.DataFrame, config: Config, rates: pd.DataFrame) -> list[LineBill]:
    """Each model line's bill to date by part, with its serving forecast per month.

    ``rates`` are :func:`serving_rates`: the newest week's is the forecast's cost per prediction.
    """
    lines = []
    for model in sorted(set(bill["model"]), key=lambda m: (m == SHARED, m)):
        own = bill[bill["model"] == model]
        parts = {part: float(own.loc[own["part"] == part, "cost"].sum()) for part in PARTS}
        weeks = weeks_in_order(own["week"])
        traffic = config.traffic.get(model)
        newest = _newest_rate(rates, model)
        per_prediction = float(newest.cost) if newest is not None else None
        lines.append(
            LineBill(
                model=model,
                currency=config.cost.currency,
                parts=parts,
                energy_kwh=float(own["energy_kwh"].fillna(0).sum()),
                co2_kg=float(own["co2_kg"].fillna(0).sum()),
                first_week=weeks[0] if weeks else None,
                last_week=weeks[-1] if weeks else None,
                requests_per_day=traffic.requests_per_day if traffic else None,
                serving_per_month=(
                    per_prediction * traffic.requests_per_day * DAYS_PER_MONTH
                    if traffic is not None and per_prediction is not None
                    else None
                ),
                cost_per_million=per_prediction * 1e6 if per_prediction is not None else None,
                evaluation_tokens=_known(
                    own.loc[own["part"] == "evaluation", "tokens"].sum(min_count=1)
                ),
                tokens_per_prediction=(
                    _known(newest.tokens_per_prediction) if newest is not None else None
                ),
                cost_per_million_tokens=(
                    _known(newest.cost_per_token * 1e6) if newest is not None else None
                ),
                rate_week=str(newest.week) if newest is not None else None,
            )
        )
    return lines


def _newest_rate(rates: pd.DataFrame, model: str) -> Any:
    """The line's newest week's serving rates: its production checkpoint serves from now on."""
    own = rates[rates["model"] == model]
    if own.empty:
        return None
    return max(own.itertuples(), key=lambda r: week_start(str(r.week)))


def _known(value: Any) -> float | None:
    """A float, or None for a null (NaN): a rate or count that was not measured."""
    return None if value is None or math.isnan(float(value)) else float(value)


def weekly_parts(bill: pd.DataFrame) -> pd.DataFrame:
    """Money per week (rows, oldest first) and part (columns, in ``PARTS`` order)."""
    table = bill.pivot_table(index="week", columns="part", values="cost", aggfunc="sum")
    table = table.reindex(columns=list(PARTS)).fillna(0.0)
    return table.loc[weeks_in_order(table.index)]


def lifetime_table(lines: Sequence[LineBill]) -> tuple[list[str], list[list[str]]]:
    """The lifetime table: a column per model line and one for all, a row per part.

    Each part's money carries its share of the column's total; the serving forecast per month
    and the cost per million predictions close it. Where any line counted tokens, the cost per
    million tokens and the evaluations' tokens follow (blank for a line that counted none).
    """
    from evalsentry.cost.units import money

    currency = lines[0].currency if lines else ""
    totals = {p: sum(line.parts.get(p, 0.0) for line in lines) for p in PARTS}
    grand = sum(totals.values())
    monthly = [line.serving_per_month for line in lines if line.serving_per_month is not None]

    headers = ["", *(line.model for line in lines), "all lines"]
    rows = [
        [
            "weeks",
            *(
                f"{line.first_week} to {line.last_week}" if line.first_week else ""
                for line in lines
            ),
            "",
        ],
        *(
            [
                part,
                *(_share(line.parts.get(part, 0.0), line.total, currency) for line in lines),
                _share(totals[part], grand, currency),
            ]
            for part in PARTS
        ),
        ["total to date", *(money(line.total, currency) for line in lines), money(grand, currency)],
        [
            "serving per month",
            *(_forecast(line, currency) for line in lines),
            money(sum(monthly), currency) if monthly else "",
        ],
        [
            "serving per 1M predictions",
            *(
                money(line.cost_per_million, currency) if line.cost_per_million is not None else ""
                for line in lines
            ),
            "",
        ],
        *_token_rows(lines, currency),
    ]
    return headers, rows


def _token_rows(lines: Sequence[LineBill], currency: str) -> list[list[str]]:
    """Serving per 1M tokens and the evaluations' tokens, where any line has them."""
    from evalsentry.cost.units import count, money

    counted = [line.evaluation_tokens for line in lines if line.evaluation_tokens is not None]
    if not counted:
        return []
    return [
        [
            "serving per 1M tokens",
            *(
                money(line.cost_per_million_tokens, currency)
                if line.cost_per_million_tokens is not None
                else ""
                for line in lines
            ),
            "",
        ],
        [
            "evaluation tokens",
            *(
                count(line.evaluation_tokens) if line.evaluation_tokens is not None else ""
                for line in lines
            ),
            count(sum(counted)),
        ],
    ]


def _share(amount: float, total: float, currency: str) -> str:
    """Money and its share of ``total`` (no share of nothing)."""
    from evalsentry.cost.units import money

    return (
        f"{money(amount, currency)} ({_percent(amount / total)})"
        if total > 0
        else (money(amount, currency))
    )


def _forecast(line: LineBill, currency: str) -> str:
    """A line's serving cost per month at its declared traffic, or why there is none."""
    from evalsentry.cost.units import money

    if line.model == SHARED:
        return ""
    if line.requests_per_day is None:
        return "no traffic declared"
    if line.serving_per_month is None:
        return "no production throughput yet"
    return f"{money(line.serving_per_month, currency)} at {line.requests_per_day:,.0f}/day"
