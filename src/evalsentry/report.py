"""Gate results as people and CI systems read them: Markdown summaries and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET  # builds XML only; nothing untrusted is parsed
from collections.abc import Mapping, Sequence
from typing import Any

from evalsentry.gate import SEVERITY, Comparison, GateReport, Verdict

VERDICT_MARK = {
    Verdict.PASS: "✅ PASS",
    Verdict.BASELINE: "📌 BASELINE",
    Verdict.WARN: "⚠️ WARN",
    Verdict.FAIL: "❌ FAIL",
    Verdict.ERROR: "⛔ ERROR",
}


def _fmt(value: float | int | None, spec: str = ".4f") -> str:
    return "" if value is None else format(value, spec)


def _cells(c: Comparison) -> list[str]:
    flips = "" if c.newly_wrong is None else f"-{c.newly_wrong} / +{c.newly_right}"
    return [
        VERDICT_MARK[c.verdict],
        f"{c.model}@v{c.version}" if c.version is not None else c.model,
        c.evalset,
        c.metric + (f" [{c.slice}]" if c.slice else ""),
        c.reference + (f" ({c.reference_week})" if c.reference_week else ""),
        _fmt(c.reference_value),
        _fmt(c.value),
        _fmt(c.drop, "+.4f"),
        _fmt(c.tolerance),
        _fmt(c.p_adjusted, ".2g"),
        flips,
        c.reason,
    ]


HEADERS = [
    "verdict",
    "model",
    "evalset",
    "metric",
    "reference",
    "was",
    "now",
    "drop",
    "tolerance",
    "p (Holm)",
    "flips",
    "why",
]


def comparison_rows(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Table rows, worst first."""
    ordered = sorted(
        comparisons, key=lambda c: (-SEVERITY[c.verdict], not c.gating, c.model, c.metric, c.slice)
    )
    return [_cells(c) for c in ordered]


def gate_markdown(report: GateReport, *, include_slices: bool = True) -> str:
    """A Markdown summary fit for a CI step summary or a Prefect artifact."""
    shown = [c for c in report.comparisons if include_slices or not c.slice]
    lines = [
        f"## evalsentry gate: {report.week} — {VERDICT_MARK[report.verdict]}",
        "",
        f"{len(report.failures)} regression(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s) "
        f"over {len([c for c in report.comparisons if c.gating])} gating comparison(s).",
        "",
    ]
    if not shown:
        return "\n".join([*lines, "Nothing to compare yet."]) + "\n"
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += [
        "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
        for row in comparison_rows(shown)
    ]
    return "\n".join(lines) + "\n"


def gate_junit(report: GateReport) -> str:
    """JUnit XML: one testcase per comparison; FAIL is a failure, ERROR an error."""
    suite = ET.Element(
        "testsuite",
        name="evalsentry-gate",
        tests=str(len(report.comparisons)),
        failures=str(len(report.failures)),
        errors=str(len(report.errors)),
        skipped=str(sum(not c.gating for c in report.comparisons)),
    )
    for c in report.comparisons:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{c.model}.{c.evalset}",
            name=f"{c.metric}{f'[{c.slice}]' if c.slice else ''} vs {c.reference} ({report.week})",
        )
        text = c.describe()
        if not c.gating and c.verdict in (Verdict.FAIL, Verdict.WARN, Verdict.ERROR):
            ET.SubElement(case, "skipped", message=f"report only: {text}")
        elif c.verdict == Verdict.FAIL:
            ET.SubElement(case, "failure", message=text, type="regression").text = text
        elif c.verdict == Verdict.ERROR:
            ET.SubElement(case, "error", message=text, type="not-comparable").text = text
        else:
            ET.SubElement(case, "system-out").text = text
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + [
        "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows
    ]


def weekly_markdown(
    report: GateReport,
    evaluations: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    validations: Mapping[str, Mapping[str, Any]],
    drifts: Sequence[Any] = (),
) -> str:
    """The weekly report: verdicts, metrics with CIs, lineage, cost, data validation, drift."""
    lines = [gate_markdown(report, include_slices=False).rstrip(), "", "### Metrics", ""]
    by_eval = {e["evaluation_id"]: e for e in evaluations}
    rows = [
        [
            f"{by_eval[m['evaluation_id']]['model']}@v{by_eval[m['evaluation_id']]['version']}",
            by_eval[m["evaluation_id"]]["stage"],
            m["evalset"],
            m["metric"],
            f"{m['value']:.4f}",
            f"[{m['ci_low']:.4f}, {m['ci_high']:.4f}]",
            m["n"],
        ]
        for m in metrics
        if not m["slice"] and m["evaluation_id"] in by_eval
    ]
    lines += (
        _table(["checkpoint", "stage", "evalset", "metric", "value", "95% CI", "n"], rows)
        if rows
        else ["No metrics."]
    )
    lines += ["", "### Lineage and cost", ""]
    lines += _table(
        [
            "checkpoint",
            "status",
            "git",
            "data",
            "seed",
            "trained",
            "device",
            "examples/s",
            "kWh",
            "kg CO2",
            "cost",
        ],
        [
            [
                f"{e['model']}@v{e.get('version')}",
                e["status"] if e["status"] == "ok" else f"error: {e.get('error')}",
                str(e.get("git_sha") or "")[:10] + ("+dirty" if e.get("git_dirty") else ""),
                str(e.get("data_sha") or "")[:12],
                e.get("seed"),
                str(e.get("trained_at") or "")[:19],
                e.get("device_name") or e.get("device") or "",
                _fmt(e.get("examples_per_s"), ".0f"),
                _fmt(e.get("energy_kwh"), ".2e"),
                _fmt(e.get("co2_kg"), ".2e"),
                f"{_fmt(e.get('cost'), '.5f')} {e.get('currency') or ''}".strip(),
            ]
            for e in evaluations
        ],
    )
    lines += ["", "### Data validation", ""]
    lines += _table(
        ["evalset", "result", "expectations", "failed"],
        [
            [
                name,
                "passed" if v.get("success") else f"FAILED: {v.get('error', '')}",
                v.get("evaluated", ""),
                v.get("failed", ""),
            ]
            for name, v in validations.items()
        ],
    )
    if drifts:
        lines += ["", "### Live-data drift", ""]
        lines += _table(
            ["evalset", "feature", "model", "PSI", "p (BH)", "verdict"],
            [
                [
                    d.evalset,
                    d.feature,
                    d.model or "",
                    f"{d.psi:.3f}",
                    f"{d.p_adjusted:.2g}",
                    d.verdict,
                ]
                for d in drifts
            ],
        )
    total = sum(e.get("cost") or 0.0 for e in evaluations)
    energy = sum(e.get("energy_kwh") or 0.0 for e in evaluations)
    currency = next((e.get("currency") for e in evaluations if e.get("currency")), "")
    lines += ["", f"**This week's bill:** {total:.5f} {currency}, {energy:.2e} kWh.", ""]
    return "\n".join(lines) + "\n"
