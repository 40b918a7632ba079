"""One self-contained HTML report of a week: no network, charts drawn offline as inline SVG.

Per model and evalset: a trend chart of each gated metric over the weeks with its confidence
band, the baseline, checkpoint changes and verdicts; per-slice deltas; flips with example ids;
live-data drift; lineage; data validation; and the bill with its trend.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from evalsentry.cost import units
from evalsentry.gate.content import example_label
from evalsentry.gate.pairs import align
from evalsentry.gate.stats import flip_masks
from evalsentry.gate.week import SEVERITY, GateReport, Verdict
from evalsentry.harnesses.example_text import visible
from evalsentry.history.frames import records
from evalsentry.history.store import History
from evalsentry.names import WEEKLY_RUN
from evalsentry.reports.bill import PARTS, Lifetime, lifetime_table, weekly_parts
from evalsentry.reports.levers import LEVER_HEADERS
from evalsentry.reports.report import MODEL_OR_DATA, counts_line
from evalsentry.reports.svg import WeekChart
from evalsentry.reports.weekly import SUSPECT_HEADERS, suspect_rows
from evalsentry.weeks import weeks_up_to

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.gate.suspects import Suspects
    from evalsentry.gate.verdicts import Comparison

VERDICT_COLOUR: dict[str, str] = {
    Verdict.PASS: "#2e7d32",
    Verdict.BASELINE: "#1565c0",
    Verdict.WARN: "#ef6c00",
    Verdict.INCONCLUSIVE: "#546e7a",
    Verdict.FAIL: "#c62828",
    Verdict.ERROR: "#6a1b9a",
}
FLIP_IDS_SHOWN = 8
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
h1 .verdict, td.verdict { font-weight: bold; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
.chart svg { width: 420px; height: auto; }
"""


def up_to(frame: pd.DataFrame, week: str) -> pd.DataFrame:
    """The rows of ``frame`` of ``week`` and the weeks before it (valid ISO weeks only)."""
    return frame[frame["week"].isin(weeks_up_to(frame["week"], week))]


def esc(value: object) -> str:
    r"""``value`` as HTML text (None as nothing), control and invisible characters as ``\xNN``."""
    return html.escape(visible("" if value is None else str(value)))


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain HTML table of ``rows`` under ``headers``, every cell escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def trend_chart(
    line: pd.DataFrame,
    metrics: pd.DataFrame,
    metric: str,
    verdicts: dict[str, str],
    baseline_week: str | None,
) -> str:
    """A metric's weekly values with CI band, baseline, checkpoint changes and verdict markers."""
    rows = (
        metrics[(metrics["metric"] == metric) & (metrics["slice"] == "")]
        .merge(line[["evaluation_id", "week", "version"]], on="evaluation_id", suffixes=("_m", ""))
        .sort_values("week")
    )
    chart = WeekChart(rows["week"].tolist(), metric, height=320)
    chart.band(rows["ci_low"].tolist(), rows["ci_high"].tolist(), "#90a4ae", "95% CI")
    chart.line(rows["value"].tolist(), "#37474f", metric)
    if baseline_week is not None and (rows["week"] == baseline_week).any():
        base = float(rows.loc[rows["week"] == baseline_week, "value"].iloc[0])
        chart.level(base, "#1565c0", f"baseline {baseline_week}")
    versions = rows["version"].tolist()
    for i in range(1, len(versions)):
        if versions[i] != versions[i - 1]:
            chart.divider(i, f"v{int(versions[i])}")
    for i, week in enumerate(rows["week"]):
        verdict = verdicts.get(week)
        if verdict:
            cross = verdict in (Verdict.FAIL, Verdict.ERROR)
            chart.mark(i, float(rows["value"].iloc[i]), VERDICT_COLOUR[verdict], cross=cross)
    return chart.render()


def cost_chart(evaluations: pd.DataFrame) -> str:
    """Money and energy per week, the energy in the unit that suits the week that used most."""
    weekly = evaluations.groupby("week")[["cost", "energy_kwh"]].sum().sort_index()
    currency = evaluations["currency"].dropna()
    money_label = f"money ({currency.iloc[0]})" if not currency.empty else "money"
    energy_unit, kwh_per_unit = units.energy_scale(float(weekly["energy_kwh"].max()))
    energy_label = f"energy ({energy_unit})"
    chart = WeekChart(weekly.index.tolist(), "cost per week")
    chart.bars(weekly["cost"].tolist(), "#5c6bc0", money_label)
    chart.line(
        (weekly["energy_kwh"] / kwh_per_unit).tolist(), "#ef6c00", energy_label, side="right"
    )
    chart.label_axis("left", money_label)
    chart.label_axis("right", energy_label)
    return chart.render()


def _flips(
    history: History, current: pd.Series, previous: pd.Series | None
) -> tuple[list[object], list[list[object]]]:
    """The flips' counts and first ids, and the first newly wrong examples' texts (if kept)."""
    if previous is None:
        return [], []
    cur, ref = (
        history.predictions(current["evaluation_id"]),
        history.predictions(previous["evaluation_id"]),
    )
    aligned = align(ref, cur) if cur is not None and ref is not None else None
    if aligned is None or cur is None or "prediction" not in cur:
        return [], []  # not comparable, or a language model: no right or wrong to flip
    if np.issubdtype(cur["prediction"].dtype, np.floating):
        return [], []  # a regression task: no right or wrong to flip
    newly_wrong, newly_right = flip_masks(
        aligned["prediction"] == aligned["target"], cur["prediction"] == cur["target"]
    )
    wrong, right = cur["example_id"][newly_wrong], cur["example_id"][newly_right]
    texts = _flip_texts(cur, aligned, newly_wrong)
    return [len(wrong), _some(wrong), len(right), _some(right)], texts


#: The columns of the newly wrong examples' texts (an imported harness run's, when kept).
FLIP_TEXT_HEADERS = ("example", "question", "expected", "response", "previous response")


def _flip_texts(
    cur: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], newly_wrong: np.ndarray
) -> list[list[object]]:
    """The first ``FLIP_IDS_SHOWN`` newly wrong examples as a person reads them."""
    if "question" not in cur:
        return []
    rows: list[list[object]] = []
    for i in np.flatnonzero(newly_wrong)[:FLIP_IDS_SHOWN]:
        label = example_label(cur, int(i))
        texts = [cur[c][i] if c in cur else "" for c in ("question", "expected", "response")]
        rows.append([label, *texts, ref["response"][i] if "response" in ref else ""])
    return rows


def _some(ids: np.ndarray) -> str:
    """The first ``FLIP_IDS_SHOWN`` example ids, and how many more there are."""
    shown = ", ".join(map(str, ids[:FLIP_IDS_SHOWN]))
    more = len(ids) - FLIP_IDS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _line_section(history: History, report: GateReport, line: pd.DataFrame, week: str) -> str:
    current = line[line["week"] == week].iloc[-1]
    earlier = line[line["week"] < week]
    metrics = history.metrics(line["evaluation_id"])
    stored = history.comparisons(line["evaluation_id"])
    baseline_week, _ = history.baseline(str(current["model"]), line["week"])
    parts = [
        f"<h2>{esc(current['model'])} on {esc(current['evalset'])}</h2>",
        '<div class="charts">',
    ]
    for metric in sorted(set(metrics["metric"])):
        verdicts = _worst_verdicts(stored, report, current, metric, week)
        parts.append(
            f'<div class="chart">{trend_chart(line, metrics, metric, verdicts, baseline_week)}</div>'
        )
    parts.append("</div>")
    sliced = [
        c for c in report.comparisons if c.evaluation_id == current["evaluation_id"] and c.slice
    ]
    if sliced:
        parts.append("<h3>Slices</h3>")
        parts.append(_slices_table(sliced))
    flips, texts = _flips(history, current, earlier.iloc[-1] if not earlier.empty else None)
    if flips:
        parts.append("<h3>Flips against the previous week</h3>")
        parts.append(html_table(["newly wrong", "examples", "newly right", "examples"], [flips]))
    if texts:
        parts.append(f"<h4>Newly wrong, the first {len(texts)}</h4>")
        parts.append(html_table(FLIP_TEXT_HEADERS, texts))
    return "".join(parts)


def _worst_verdicts(
    stored: pd.DataFrame, report: GateReport, current: pd.Series, metric: str, week: str
) -> dict[str, str]:
    """Each week's worst gating verdict on ``metric`` overall (``week``'s from ``report``).

    Against any reference: a FAIL against the baseline is never a green dot because last
    week's PASSed.
    """
    judged: list[tuple[str, str]] = []
    if not stored.empty:
        rows = stored[(stored["metric"] == metric) & (stored["slice"] == "") & stored["gating"]]
        judged += list(zip(rows["week"], rows["verdict"], strict=True))
    judged = [(w, v) for w, v in judged if w != week]
    judged += [
        (week, str(c.verdict))
        for c in report.comparisons
        if c.evaluation_id == current["evaluation_id"]
        and c.metric == metric
        and not c.slice
        and c.gating
    ]
    verdicts: dict[str, str] = {}
    for judged_week, verdict in judged:
        worst = verdicts.get(judged_week)
        if worst is None or SEVERITY[Verdict(verdict)] > SEVERITY[Verdict(worst)]:
            verdicts[judged_week] = verdict
    return verdicts


def _slices_table(sliced: Sequence[Comparison]) -> str:
    """The week's comparisons on slices: values, delta, family-adjusted p and verdict."""
    return html_table(
        ["metric", "slice", "reference", "was", "now", "delta", "p (family)", "verdict"],
        [
            [
                c.metric,
                c.slice,
                c.reference,
                _num(c.reference_value),
                _num(c.value),
                _num(c.delta, "+.4f"),
                _num(c.p_adjusted, ".2g"),
                c.verdict,
            ]
            for c in sliced
        ],
    )


def _num(value: float | None, spec: str = ".4f") -> str:
    return (
        ""
        if value is None or (isinstance(value, float) and np.isnan(value))
        else format(value, spec)
    )


#: One colour per part of the bill, the same in every report.
PART_COLOUR = {
    "training": "#8e24aa",
    "evaluation": "#26a69a",
    "serving": "#f9a825",
    "declared": "#78909c",
}


def bill_chart(bill: Lifetime) -> str:
    """Every line's bill per week, stacked by part: training, evaluation, serving, declared."""
    weekly = weekly_parts(bill.rows)
    currency = bill.lines[0].currency if bill.lines else ""
    chart = WeekChart(weekly.index.tolist(), "the bill per week, by part")
    bottom = np.zeros(len(weekly))
    for part in PARTS:
        values = weekly[part].to_numpy(dtype=float)
        chart.bars(values.tolist(), PART_COLOUR[part], part, bottom=bottom.tolist())
        bottom += values
    chart.label_axis("left", f"money ({currency})")
    return chart.render()


def _bill_section(bill: Lifetime | None) -> list[str]:
    if bill is None or bill.empty:
        return []
    headers, rows = lifetime_table(bill.lines)
    return [
        "<h2>Lifetime bill to date</h2>",
        html_table(headers, [list(r) for r in rows]),
        "<ul>" + "".join(f"<li>{esc(line.in_words())}</li>" for line in bill.lines) + "</ul>",
        *(f"<p>note: {esc(note)}</p>" for note in bill.notes),
        f'<div class="chart" id="bill-chart">{bill_chart(bill)}</div>',
        *_levers_section(bill),
    ]


def _levers_section(bill: Lifetime) -> list[str]:
    """The serving variants weighed: a table, and what serving each would change."""
    if not bill.lever_rows:
        return []
    words = "".join(f"<li>{esc(said)}</li>" for said in bill.levers)
    return ["<h3>Serving levers</h3>", html_table(LEVER_HEADERS, bill.lever_rows), f"<ul>{words}</ul>"]  # fmt: skip


def render_report(
    history: History,
    report: GateReport,
    bindings: Mapping[str, str] | None = None,
    bill: Lifetime | None = None,
    scope: str | None = None,
    suspects: Mapping[str, Suspects | str] | None = None,
) -> str:
    """The HTML report of ``report``'s week: its verdicts, with trends and the rest from the history.

    It renders the gate report it is given (the one the weekly flow computed and published in
    Markdown too), so the two reports never disagree; it runs no gate of its own. ``scope``
    says what a partial run itself evaluated. Nothing after ``report``'s week is shown: a
    report of an earlier week reads as it did then.
    """
    week = report.week
    evaluations = up_to(history.evaluations(kind=WEEKLY_RUN), week)
    this_week = evaluations[evaluations["week"] == week]
    sections = _line_sections(history, report, evaluations)
    verdict = str(report.verdict)
    gating = [
        c
        for c in report.comparisons
        if c.gating
        and c.verdict in (Verdict.FAIL, Verdict.ERROR, Verdict.INCONCLUSIVE, Verdict.WARN)
    ]
    body = [
        f'<h1>evalsentry {esc(week)}: <span class="verdict" style="color:{VERDICT_COLOUR[verdict]}">{verdict}</span></h1>',
        f"<p><strong>{esc(report.headline())}</strong></p>",
        *(
            [f"<p><strong>{MODEL_OR_DATA}</strong> {esc(report.diagnosis)}</p>"]
            if report.diagnosis
            else []
        ),
        f"<p>{esc(counts_line(report))}.</p>",
        *([f'<p class="scope">{esc(scope)}</p>'] if scope else []),
    ]
    if gating:
        body.append(html_table(["verdict", "what"], [[c.verdict, c.describe()] for c in gating]))
    if report.changes:
        body.append(f"<h2>{MODEL_OR_DATA}</h2><ul>")
        body += [f"<li>{esc(change)}</li>" for change in report.changes] + ["</ul>"]
    if bindings:
        body.append("<h2>Model lines</h2>")
        body.append(
            html_table(["model", "evaluated on"], [[m, b] for m, b in sorted(bindings.items())])
        )
    body += sections
    body += ["<h2>Live-data drift</h2>", _drift_table(history.drift([week]))]
    body += _suspects_section(suspects or {}, week)
    body += ["<h2>Lineage</h2>", _lineage_table(this_week)]
    body += ["<h2>Data validation</h2>", _validation_table(this_week)]
    body += ["<h2>Cost</h2>", *_cost_section(evaluations, this_week)]
    body += _bill_section(bill)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>evalsentry {esc(week)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def _line_sections(history: History, report: GateReport, evaluations: pd.DataFrame) -> list[str]:
    """A section for each production model line evaluated in the report's week."""
    week = report.week
    production = evaluations[
        (evaluations["status"] == "ok") & (evaluations["stage"] == "production")
    ]
    sections = []
    for _, line in production.groupby(["model", "evalset"]):
        if (line["week"] == week).any():
            sections.append(_line_section(history, report, line.sort_values("week"), week))
    return sections


def _suspects_section(suspects: Mapping[str, Suspects | str], week: str) -> list[str]:
    """Each evalset's label-error suspects: what was found, and the first of them."""
    if not suspects:
        return []
    body = ["<h2>Label-error suspects</h2>"]
    for name, found in suspects.items():
        said, rows = suspect_rows(name, found, week)
        body.append(f"<p><strong>{esc(name)}</strong>: {esc(said.replace('`', ''))}</p>")
        body += [html_table(SUSPECT_HEADERS, rows)] if rows else []
    return body


def _drift_table(drift: pd.DataFrame) -> str:
    """The week's live-data drift checks, or a note that none was configured."""
    if drift.empty:
        return "<p>No live sample configured for this week.</p>"
    return html_table(
        ["evalset", "feature", "model", "PSI", "statistic", "p (BH)", "verdict"],
        [
            [
                r.evalset,
                r.feature,
                r.model if isinstance(r.model, str) else "",  # NaN where no model
                _num(r.psi, ".3f"),
                _num(r.statistic, ".3f"),
                _num(r.p_adjusted, ".2g"),
                r.verdict,
            ]
            for r in drift.itertuples()
        ],
    )


def _lineage_table(this_week: pd.DataFrame) -> str:
    """Where each of the week's checkpoints came from, and how its evaluation ended."""
    return html_table(
        ["checkpoint", "stage", "status", "git", "data", "seed", "trained", "config"],
        [
            [
                f"{r['model']}@v{r['version']}",
                r["stage"],
                r["status"] if r["status"] == "ok" else f"error: {r['error']}",
                str(r["git_sha"] or "")[:10],
                str(r["data_sha"] or "")[:12],
                r["seed"],
                str(r["trained_at"] or "")[:19],
                r["config_json"],
            ]
            for r in records(this_week)
        ],
    )


def _validation_table(this_week: pd.DataFrame) -> str:
    """Each evalset's recorded data validation this week."""
    rows = []
    for name, group in this_week.groupby("evalset"):
        summary = (
            json.loads(group["validation_json"].dropna().iloc[0])
            if group["validation_json"].notna().any()
            else {}
        )
        rows.append(
            [
                name,
                "passed" if summary.get("success") else "not recorded or failed",
                summary.get("evaluated", ""),
                summary.get("failed", ""),
            ]
        )
    return html_table(["evalset", "result", "expectations", "failed"], rows)


def _cost_section(evaluations: pd.DataFrame, this_week: pd.DataFrame) -> list[str]:
    """What the week's evaluations cost, and the cost chart of every week up to it."""
    this_bill = this_week[["wall_s", "energy_kwh", "co2_kg", "cost"]].sum()
    currency = this_week["currency"].dropna().iloc[0] if this_week["currency"].notna().any() else ""
    parts = [
        f"<p>This week: {esc(units.duration(this_bill['wall_s']))} of device time, "
        f"{esc(units.energy(this_bill['energy_kwh']))}, {esc(units.carbon(this_bill['co2_kg']))}, "
        f"{esc(units.money(this_bill['cost'], currency))}.</p>"
    ]
    if not evaluations.empty:
        parts.append(f'<div class="chart">{cost_chart(evaluations)}</div>')
    return parts
