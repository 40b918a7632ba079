"""What the Prefect UI shows of a week: narrow Markdown and tables, verdicts in words.

Prefect's v1 UI renders an artifact's Markdown tables without wrapping a cell, in a column
about 700 pixels wide at a 1280-pixel window (the default v2 UI wraps cells, in about 580); a
wider table scrolls sideways, and what it hides is what matters (tests/integration/test_ui.py
looks). So each table here stays within a few short columns: the week's verdict table is one
small table per checkpoint (its metrics as rows, its references as columns), wide tables of
the file report are transposed (a bill per model line), and long lines (each comparison's
numbers and reason, lineage, cost, validation) are list items, which wrap. The report artifact
holds the verdict and the summary; the details artifact holds the rest. Verdicts are words
(``FAIL -6.8 pts``), readable on a host without an emoji font.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.cost import units
from evalsentry.gate.verdicts import (
    SEVERITY,
    Comparison,
    GateReport,
    Reference,
    Verdict,
    checkpoint_label,
)
from evalsentry.reports.report import counts_line, md_cell, rounded

if TYPE_CHECKING:
    from evalsentry.reports.bill import Lifetime

REFERENCE_NAMES: dict[str, str] = {
    Reference.PREVIOUS_WEEK: "previous",
    Reference.BASELINE: "baseline",
    Reference.PRODUCTION: "production",
}
DETAILS_KEY = "details"  # the details artifact's key, after the flow's prefix


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table, each cell one line."""
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]


def _short_week(week: str | None, this_week: str) -> str:
    """``W48`` for a week of ``this_week``'s year, else the whole ``2025-W52``."""
    week = week or ""
    return week[5:] if week[:5] == this_week[:5] else week


def verdict_cell(c: Comparison) -> str:
    """A comparison in a few words, verdict first: ``FAIL -6.8 pts, p=0.001``."""
    if c.reference == Reference.NONE or c.delta is None:
        what = "first week" if c.verdict == Verdict.BASELINE else c.reason.split(":")[0]
        return f"{c.verdict} {what}".strip()
    text = f"{c.verdict} {c.change}"
    if c.verdict != Verdict.PASS and c.p_adjusted is not None:
        text += f", p={c.p_adjusted:.1g}"
    return text


def _groups(report: GateReport) -> dict[tuple[str, Any, str, str | None], list[Comparison]]:
    """The overall comparisons by checkpoint and evalset, worst group first."""
    groups: dict[tuple[str, Any, str, str | None], list[Comparison]] = {}
    for c in report.comparisons:
        if not c.slice:  # a registered version is its own name: its timing row (no sha) joins it
            sha = c.checkpoint_sha256 if c.version is None else None
            groups.setdefault((c.model, c.version, c.evalset, sha), []).append(c)

    def order(item: tuple[Any, list[Comparison]]) -> tuple[bool, int]:
        cells = item[1]
        return not any(c.gating for c in cells), -max(SEVERITY[c.verdict] for c in cells)

    return dict(sorted(groups.items(), key=order))


def _who(model: str, version: Any, evalset: str, sha: str | None) -> str:
    if model == "*":
        return "nothing evaluated" if evalset == "*" else f"every checkpoint on {evalset}"
    return f"{checkpoint_label(model, version, sha)} on {evalset}"


def summary_tables(report: GateReport) -> list[str]:
    """One small table per checkpoint and evalset: a row per metric, a column per reference.

    A column is named by its reference and week (``vs W48 (previous)``); a whole-evaluation
    verdict (failed, not evaluated, first week) is one row.
    """
    lines: list[str] = []
    for (model, version, evalset, sha), cells in _groups(report).items():
        gating = any(c.gating for c in cells)
        lines += [
            f"**{_who(model, version, evalset, sha)}**" + ("" if gating else " (report only)")
        ]
        whole = [c for c in cells if c.reference == Reference.NONE]
        compared = [c for c in cells if c.reference != Reference.NONE]
        if whole and not compared:
            lines += ["", *[f"- {verdict_cell(c)}" for c in whole], ""]
            continue
        columns: list[tuple[str, str | None]] = []
        for c in compared:
            key = (c.reference, c.reference_week)
            if key not in columns:
                columns.append(key)
        headers = ["metric", "now"] + [
            f"vs {_short_week(week, report.week)} ({REFERENCE_NAMES.get(ref, ref)})".replace(
                "vs  (", "vs ("
            )
            for ref, week in columns
        ]
        by_metric: dict[str, dict[tuple[str, str | None], Comparison]] = {}
        for c in compared:
            by_metric.setdefault(c.metric, {})[(c.reference, c.reference_week)] = c
        rows = []
        for metric, found in by_metric.items():
            now = next((c.value for c in found.values() if c.value is not None), None)
            rows.append(
                [
                    metric,
                    "" if now is None else f"{rounded(now)}",
                    *(verdict_cell(found[k]) if k in found else "" for k in columns),
                ]
            )
        lines += ["", *table(headers, rows), ""]
        lines += [f"- {verdict_cell(c)}" for c in whole]
    return lines or ["Nothing to compare yet."]


def drift_table(report: GateReport) -> list[str]:
    """The week's drifted features, worst first: evalset, feature, PSI, verdict."""
    drifted = report.drifted
    if not drifted:
        return []
    rows = [
        [
            d.evalset,
            d.feature + (f" of {d.model}" if d.model else ""),
            f"{d.psi:.3g}" if d.measured else "",
            str(d.verdict) if d.measured else f"{d.verdict} (not measured)",
        ]
        for d in drifted
    ]
    return ["### Live-data drift", "", *table(["evalset", "feature", "PSI", "verdict"], rows), ""]


def report_artifact(report: GateReport, scope: str | None = None, more: str = "") -> str:
    """The report artifact: the verdict, the headline, the summary tables and the drift.

    ``more`` (a line) says where the details and the full report are.
    """
    drifted = len(report.drifted)
    lines = [
        f"## evalsentry {report.week}: {report.verdict}",
        "",
        f"**{report.headline()}**",
        "",
        *([f"> {scope}", ""] if scope else []),
        f"{counts_line(report)} over {sum(c.gating for c in report.comparisons)} gating "
        "comparison(s)" + (f"; drift in {drifted} feature(s)." if drifted else "."),
        "",
        *summary_tables(report),
        "",
        *drift_table(report),
        *([more, ""] if more else []),
    ]
    return "\n".join(lines) + "\n"


def _numbers(c: Comparison) -> str:
    """``0.9805 -> 0.9124, change -0.0682, allowed -0.0100, p=0.001 (exact-margin), flips -53/+4``."""
    parts = []
    if c.reference_value is not None and c.value is not None:
        parts.append(f"{c.reference_value:.4f} -> {c.value:.4f}")
    if c.delta is not None:
        parts.append(f"change {c.delta:+.4f}")
    if c.allowed_change is not None:
        parts.append(f"allowed {c.allowed_change:+.4f}")
    if c.p_adjusted is not None:
        parts.append(f"p={c.p_adjusted:.2g}" + (f" ({c.method})" if c.method else ""))
    if c.flips:
        parts.append(f"flips {c.flips}")
    return ", ".join(parts)


def gate_items(report: GateReport) -> list[str]:
    """Every overall comparison as one list item per checkpoint: verdict, reference, numbers, why."""
    lines: list[str] = []
    for (model, version, evalset, sha), cells in _groups(report).items():
        lines += [f"**{_who(model, version, evalset, sha)}**", ""]
        for c in sorted(cells, key=lambda c: (-SEVERITY[c.verdict], c.metric, c.reference)):
            against = (
                f" vs {REFERENCE_NAMES.get(c.reference, c.reference)}"
                + (f" ({c.reference_week})" if c.reference_week else "")
                if c.reference != Reference.NONE
                else ""
            )
            metric = "" if c.metric == "*" else f" {c.metric}"
            numbers = _numbers(c)
            text = f"- {c.verdict}{metric}{against}" + (f": {numbers}" if numbers else "")
            text += f"; {c.reason}" if c.reason else ""
            text += "" if c.gating else " (report only)"
            lines.append(md_cell(text))
        lines.append("")
    return lines


def _metrics_tables(
    evaluations: Sequence[Mapping[str, Any]], metrics: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Overall metrics with their 95% CI: one small table per evaluation."""
    lines: list[str] = []
    for e in evaluations:
        own = [m for m in metrics if m["evaluation_id"] == e["evaluation_id"] and not m["slice"]]
        if not own:
            continue
        who = checkpoint_label(e["model"], e.get("version"), e.get("checkpoint_sha256"))
        rows = [
            [
                m["metric"],
                f"{rounded(m['value'])}",
                f"{rounded(m.get('ci_low'))} to {rounded(m.get('ci_high'))}",
                "" if m.get("n") is None else int(m["n"]),
            ]
            for m in own
        ]
        lines += [
            f"**{who} on {e['evalset']}** ({e.get('stage')})",
            "",
            *table(["metric", "value", "95% CI", "n"], rows),
            "",
        ]
    return lines or ["No metrics.", ""]


def _lineage_items(evaluations: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each evaluation's status, lineage, device and cost, as one list item."""
    lines = []
    for e in evaluations:
        who = checkpoint_label(e["model"], e.get("version"), e.get("checkpoint_sha256"))
        status = "ok" if e["status"] == "ok" else f"error: {e.get('error')}"
        git = str(e.get("git_sha") or "")[:10]
        facts = [
            f"git {git}" + ("+dirty" if e.get("git_dirty") else "") if git else "",
            f"data {str(e['data_sha'])[:12]}" if e.get("data_sha") else "",
            f"seed {e['seed']}" if e.get("seed") is not None else "",
            f"trained {str(e['trained_at'])[:16]}" if e.get("trained_at") else "",
            str(e.get("device_name") or e.get("device") or ""),
            f"{e['examples_per_s']:,.0f} examples/s" if e.get("examples_per_s") else "",
            units.energy(e.get("energy_kwh")) if e.get("energy_kwh") is not None else "",
            units.carbon(e.get("co2_kg")) if e.get("co2_kg") is not None else "",
            units.money(e.get("cost"), e.get("currency")) if e.get("cost") is not None else "",
        ]
        shown = ", ".join(f for f in facts if f)
        lines.append(md_cell(f"- {who} on {e['evalset']} ({e.get('stage')}, {status}): {shown}"))
    return lines


def _validation_items(validations: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each evalset's data validation, as one list item."""
    lines = []
    for name, v in validations.items():
        if not v.get("success"):
            result = f"FAILED: {v.get('error', '')}"
        elif isinstance(source := v.get("reused_from"), Mapping):
            result = (
                f"passed (reused from run {str(source.get('run_id'))[:8]}, {source.get('week')})"
            )
        else:
            result = "passed"
        counts = f"; {v.get('evaluated', '')} expectation(s), {v.get('failed', 0)} failed"
        lines.append(md_cell(f"- {name}: {result}" + (counts if "evaluated" in v else "")))
    return lines


def bill_tables(bill: Lifetime) -> list[str]:
    """The lifetime bill, transposed: one two-column table per model line (and for all)."""
    from evalsentry.reports.bill import lifetime_table

    headers, rows = lifetime_table(bill.lines)
    lines: list[str] = []
    for column, name in enumerate(headers[1:], start=1):
        own = [[row[0], row[column]] for row in rows if row[column]]
        lines += [f"**{name}**", "", *table(["part", "to date"], own), ""]
    lines += [f"- {line.in_words()}" for line in bill.lines]
    lines += [f"- note: {note}" for note in bill.notes]
    return lines


def bill_rows(bill: Lifetime) -> list[dict[str, str]]:
    """The lifetime bill as long rows for a table artifact: model line, part, amount."""
    from evalsentry.reports.bill import lifetime_table

    headers, rows = lifetime_table(bill.lines)
    return [
        {"model line": name, "part": row[0], "to date": row[column]}
        for column, name in enumerate(headers[1:], start=1)
        for row in rows
        if row[column]
    ]


def details_artifact(
    report: GateReport,
    evaluations: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    validations: Mapping[str, Mapping[str, Any]],
    bindings: Mapping[str, str] | None = None,
    bill: Lifetime | None = None,
) -> str:
    """The details artifact: everything behind the report artifact's verdict.

    The gate's numbers and reasons, metrics, drift, lineage and cost, data validation, the
    model lines, and the lifetime bill.
    """
    total = sum(e.get("cost") or 0.0 for e in evaluations)
    energy = sum(e.get("energy_kwh") or 0.0 for e in evaluations)
    currency = next((e.get("currency") for e in evaluations if e.get("currency")), "")
    lines = [
        f"## evalsentry {report.week}: details",
        "",
        "### Gate",
        "",
        *gate_items(report),
        "### Metrics",
        "",
        *_metrics_tables(evaluations, metrics),
    ]
    if report.drifted:
        lines += ["### Live-data drift", "", *[f"- {d.describe()}" for d in report.drifted], ""]
    lines += ["### Lineage and cost", "", *_lineage_items(evaluations), ""]
    lines += [f"This week's bill: {units.money(total, currency)}, {units.energy(energy)}.", ""]
    lines += ["### Data validation", "", *_validation_items(validations), ""]
    if bindings:
        lines += ["### Model lines", ""]
        lines += [md_cell(f"- {model}: {text}") for model, text in sorted(bindings.items())]
        lines.append("")
    if bill is not None and not bill.empty:
        lines += ["### Lifetime bill to date", "", *bill_tables(bill), ""]
    return "\n".join(lines) + "\n"
