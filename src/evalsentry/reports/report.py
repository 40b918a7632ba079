"""Gate results as people and CI systems read them: Markdown summaries and JUnit XML."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

from evalsentry.gate.verdicts import Reference, checkpoint_label
from evalsentry.gate.week import SEVERITY, Comparison, GateReport, Verdict

VERDICT_MARK = {
    Verdict.PASS: "✅ PASS",
    Verdict.BASELINE: "📌 BASELINE",
    Verdict.WARN: "⚠️ WARN",
    Verdict.INCONCLUSIVE: "❔ INCONCLUSIVE",
    Verdict.FAIL: "❌ FAIL",
    Verdict.ERROR: "⛔ ERROR",
}


def finite(value: float | None) -> float | None:
    """``value``, or None when it is missing, NaN or infinite (shown as an empty cell)."""
    return value if value is not None and math.isfinite(value) else None


def fmt(value: float | int | None, spec: str = ".4f") -> str:
    """``value`` in ``spec``; empty for None."""
    return "" if value is None else format(value, spec)


REPORT_ONLY = " (report only)"  # appended to the verdict of a row that does not gate


def _cells(c: Comparison) -> list[str]:
    return [
        VERDICT_MARK[c.verdict] + ("" if c.gating else REPORT_ONLY),
        (
            checkpoint_label(c.model, c.version, c.checkpoint_sha256)
            if c.version is not None or c.checkpoint_sha256
            else c.model
        ),
        c.evalset,
        c.metric + (f" [{c.slice}]" if c.slice else ""),
        c.reference + (f" ({c.reference_week})" if c.reference_week else ""),
        fmt(c.reference_value),
        fmt(c.value),
        fmt(c.delta, "+.4f"),
        fmt(c.allowed_change, "+.4f"),
        fmt(c.p_adjusted, ".2g"),
        c.flips,
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
    "change",  # now - was, as the summary's; read beside "allowed", the tolerance signed
    "allowed",
    "p (family)",
    "flips",
    "why",
]


def comparison_rows(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """Table rows: the gating ones first, then the report-only ones, each worst first."""
    ordered = sorted(
        comparisons, key=lambda c: (not c.gating, -SEVERITY[c.verdict], c.model, c.metric, c.slice)
    )
    return [_cells(c) for c in ordered]


INCONCLUSIVE_NOTE = (
    "INCONCLUSIVE: the evalset showed neither a regression nor a drop within tolerance "
    "(the row says what drop it can detect); it {effect}."
)


def counts_line(report: GateReport) -> str:
    """``1 regression(s), 0 error(s), 2 inconclusive, 1 warning(s)``: the gating verdicts.

    An unresolved INCONCLUSIVE is counted apart, as information: ``..., 1 unresolved``.
    """
    unsure = len(report.possible_regressions)
    unresolved = len(report.unresolved)
    return (
        f"{len(report.failures)} regression(s), {len(report.errors)} error(s), "
        + (f"{unsure} inconclusive, " if unsure else "")
        + f"{len(report.warnings)} warning(s)"
        + (f", {unresolved} unresolved" if unresolved else "")
    )


def validation_result(validation: Mapping[str, Any]) -> str:
    """``passed``, ``passed (reused from run …)`` or ``FAILED: …``."""
    if not validation.get("success"):
        return f"FAILED: {validation.get('error', '')}"
    source = validation.get("reused_from")
    if isinstance(source, Mapping):
        return f"passed (reused from run {source.get('run_id')}, {source.get('week')})"
    return "passed"


def overview(report: GateReport, shown: Sequence[Comparison]) -> str:
    """The counts, what the report-only rows of ``shown`` mean, and what INCONCLUSIVE means."""
    report_only = sum(not c.gating for c in shown)
    text = (
        f"{counts_line(report)} over {sum(c.gating for c in report.comparisons)} gating "
        "comparison(s)."
    )
    if report_only:
        text += f" The {report_only} row(s) marked report only do not gate."
    if any(c.verdict == Verdict.INCONCLUSIVE for c in shown):
        effect = "fails the gate (strict)" if report.strict else "does not fail it (only --strict)"
        text += " " + INCONCLUSIVE_NOTE.format(effect=effect)
    return text


#: The heading of what a FAIL's line changed, where its flips are and how many are on suspects.
MODEL_OR_DATA = "Model or data?"


def gate_markdown(report: GateReport, *, include_slices: bool = True) -> str:
    """A Markdown summary fit for a CI step summary or a Prefect artifact."""
    shown = [c for c in report.comparisons if include_slices or not c.slice]
    headline = overview(report, shown)
    lines = [
        f"## evalsentry gate: {report.week} — {VERDICT_MARK[report.verdict]}",
        "",
        headline,
        "",
        *([f"**{MODEL_OR_DATA}** {md_cell(report.diagnosis)}", ""] if report.diagnosis else []),
    ]
    if not shown:
        return "\n".join([*lines, "Nothing to compare yet."]) + "\n"
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in comparison_rows(shown)]
    if report.changes:
        lines += ["", f"### {MODEL_OR_DATA}", "", *(f"- {md_cell(c)}" for c in report.changes)]
    return "\n".join(lines) + "\n"


def gate_junit(report: GateReport) -> str:
    """JUnit XML: one testcase per comparison; FAIL is a failure, ERROR an error.

    An INCONCLUSIVE comparison is a ``<skipped>`` testcase ("inconclusive: ..."), shown but not
    failing the build, unless the report is strict: then it is a failure of type
    ``inconclusive``. A report-only comparison that did not pass is skipped too. Every count in
    the suite headers is counted from the elements written. No ``time`` is given: the gate reads
    recorded results, it times nothing.
    """
    import xml.etree.ElementTree as ET  # builds XML only (nothing untrusted is parsed); --junit

    root = ET.Element("testsuites", name="evalsentry")
    suite = ET.SubElement(root, "testsuite", name="evalsentry-gate")
    for c in report.comparisons:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=xml_text(f"{c.model}.{c.evalset}"),
            name=xml_text(
                f"{c.metric}{f'[{c.slice}]' if c.slice else ''} vs {c.reference} ({report.week})"
            ),
        )
        text = xml_text(c.describe())
        if not c.gating and c.verdict in (
            Verdict.FAIL,
            Verdict.WARN,
            Verdict.ERROR,
            Verdict.INCONCLUSIVE,
        ):
            ET.SubElement(case, "skipped", message=f"report only: {text}")
        elif c.verdict == Verdict.INCONCLUSIVE and report.strict:
            ET.SubElement(case, "failure", message=text, type="inconclusive").text = text
        elif c.verdict == Verdict.INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=f"inconclusive: {text}")
        elif c.verdict == Verdict.FAIL:
            ET.SubElement(case, "failure", message=text, type="regression").text = text
        elif c.verdict == Verdict.ERROR:
            ET.SubElement(case, "error", message=text, type="not-comparable").text = text
        else:
            ET.SubElement(case, "system-out").text = text
    counts = {
        "tests": len(suite.findall("testcase")),
        "failures": len(suite.findall("testcase/failure")),
        "errors": len(suite.findall("testcase/error")),
        "skipped": len(suite.findall("testcase/skipped")),
    }
    suite.attrib.update({key: str(value) for key, value in counts.items()})
    # <testsuites> takes no skipped count in the common (Jenkins junit-10) schema.
    root.attrib.update({key: str(counts[key]) for key in ("tests", "failures", "errors")})
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table's lines, each cell escaped."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]


#: Characters XML 1.0 cannot carry at all, even escaped: C0 controls but tab, newline, return.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def xml_text(value: object) -> str:
    r"""``value`` as text XML 1.0 can hold: a character it cannot is written ``\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def md_cell(value: object) -> str:
    """``value`` as one Markdown table cell: ``|`` escaped, line breaks and controls as spaces.

    No ``@mention`` either (:func:`no_mentions`).
    """
    text = re.sub(r"[\r\n\x00-\x1f\x7f]+", " ", str(value))
    return no_mentions(text.replace("|", "\\|"))


#: An ``@`` that GitHub would read as a mention (``@team``, not ``model@v2`` or an address).
_MENTION = re.compile(r"(?<![A-Za-z0-9_])@(?=[A-Za-z0-9_-])")


def no_mentions(text: str) -> str:
    """``text`` with a zero-width space after each ``@`` that would mention a user or team."""
    return _MENTION.sub("@\u200b", text)


REFERENCE_COLUMNS = {  # the summary's reference columns, in this order when present
    Reference.PREVIOUS_WEEK: "vs previous week",
    Reference.BASELINE: "vs baseline",
    Reference.PRODUCTION: "vs production",
}
DISPLAY_DIGITS = 4  # table artifact values: significant digits, and at least as many decimals
LINK_EXPIRY = timedelta(days=7)  # S3's longest presigned URL; a weekly report is read that week


def checkpoint_name(model: Any, version: Any, sha256: Any = None) -> str:
    """``model@vN``, or the candidate file's short sha256 when it has no version."""
    return checkpoint_label(str(model), version, sha256)


def _summary_cell(c: Comparison, week: str) -> str:
    """One comparison in a few words: verdict, change, reference week, p when it matters.

    Words, not icons: a host without an emoji font still reads them (``FAIL -6.8 pts``).

    The reference week drops its year when it is ``week``'s (``W48``, not ``2026-W48``).
    """
    if c.reference == Reference.NONE or c.delta is None:
        what = "first week, the baseline" if c.verdict == Verdict.BASELINE else c.reason
        return f"{c.verdict} {what.split(':')[0]}"  # the cause; its detail is below
    reference_week = c.reference_week or ""
    notes = [reference_week[5:] if reference_week[:5] == week[:5] else reference_week]
    if c.verdict != Verdict.PASS and c.p_adjusted is not None:
        notes.append(f"p={c.p_adjusted:.1g}")
    note = ", ".join(n for n in notes if n)
    return f"{c.verdict} {c.change}" + (f" ({note})" if note else "")


def summary_table(report: GateReport) -> list[str]:
    """Markdown lines: one row per checkpoint x evalset x metric, its references side by side.

    Narrow enough for the Prefect UI's artifact panel: the change against each reference (points
    for accuracy-type metrics), its week, and p where the verdict is not PASS. Slices,
    tolerances, flips and reasons are in the gate details.
    """
    overall = [c for c in report.comparisons if not c.slice]
    if not overall:
        return ["Nothing to compare yet."]
    present = {c.reference for c in overall}
    columns = [r for r in REFERENCE_COLUMNS if r in present] or [Reference.NONE]
    rows: dict[tuple[Any, ...], dict[str, Comparison]] = {}
    for c in overall:
        key = (c.model, c.version, c.evalset, c.metric)
        column = c.reference if c.reference in REFERENCE_COLUMNS else Reference.NONE
        rows.setdefault(key, {}).setdefault(column, c)

    def order(cells: dict[str, Comparison]) -> tuple[bool, int]:
        """Gating rows first, each group worst first (as the details table orders them)."""
        gating = any(c.gating for c in cells.values())
        return not gating, -max(SEVERITY[c.verdict] for c in cells.values())

    body = []
    for (model, version, evalset, metric), cells in sorted(
        rows.items(), key=lambda item: order(item[1])
    ):
        now = next((c.value for c in cells.values() if c.value is not None), None)
        if Reference.NONE in cells:  # a whole-evaluation verdict: say it under the first reference
            spread = [_summary_cell(cells[Reference.NONE], report.week)] + [""] * (len(columns) - 1)
        else:
            spread = [_summary_cell(cells[r], report.week) if r in cells else "" for r in columns]
        sha = next((c.checkpoint_sha256 for c in cells.values()), None)
        who = "every checkpoint" if model == "*" else checkpoint_name(model, version, sha)
        body.append([who, evalset, "" if metric == "*" else metric, fmt(now), *spread])
    headers = ["checkpoint", "evalset", "metric", "now"]
    headers += [REFERENCE_COLUMNS.get(r, "verdict") for r in columns]
    return md_table(headers, body)


def metrics_table(
    evaluations: Sequence[Mapping[str, Any]], metrics: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The overall metrics as JSON-safe rows for a table artifact, rounded for reading.

    Values keep ``DISPLAY_DIGITS`` significant digits and at least as many decimals
    (0.8820, 12.3457, 0.0001235); NaN and infinities become None.
    """
    by_eval = {e["evaluation_id"]: e for e in evaluations}
    return [
        {
            "checkpoint": checkpoint_name(e["model"], e.get("version"), e.get("checkpoint_sha256")),
            "stage": e.get("stage"),
            "evalset": m["evalset"],
            "metric": m["metric"],
            "value": rounded(m["value"]),
            "ci_low": rounded(m.get("ci_low")),
            "ci_high": rounded(m.get("ci_high")),
            "n": None if m.get("n") is None else int(m["n"]),
        }
        for m in metrics
        if not m["slice"] and (e := by_eval.get(m["evaluation_id"])) is not None
    ]


def rounded(value: Any) -> float | None:
    """``value`` rounded to ``DISPLAY_DIGITS`` decimals, or more to keep that many significant digits.

    None for a missing, NaN or infinite value (JSON has neither).
    """
    if value is None or not math.isfinite(number := float(value)):
        return None
    if number == 0:
        return 0.0
    exponent = math.floor(math.log10(abs(number)))
    return round(number, max(DISPLAY_DIGITS, DISPLAY_DIGITS - 1 - exponent))


#: Where ``evalsentry serve-reports`` serves ``<store>/reports`` unless told otherwise.
REPORTS_PORT = 8470
DEFAULT_REPORTS_URL = f"http://127.0.0.1:{REPORTS_PORT}"


def browser_link(
    fs: Any, path: str, *, expiry: timedelta = LINK_EXPIRY, reports_url: str | None = None
) -> tuple[str, str]:
    """An http(s) link to the report file ``path`` for a browser, and what a reader should know.

    ``reports_url`` (the config's: where ``<store>/reports`` is served) gives that URL and the
    file's name; else an object store that can sign (S3, GCS with a service account) gives a
    presigned URL valid for ``expiry``; else a local file is linked on the local report server
    (``evalsentry serve-reports``) at its default URL: browsers refuse ``file://`` links from
    a web page. Any other store gives its URL, and says it cannot be opened from a browser.
    """
    from urllib.parse import quote

    location = str(fs.unstrip_protocol(path))
    name = quote(PurePosixPath(path).name)
    if reports_url is not None:
        return f"{reports_url.rstrip('/')}/{name}", f"served at {reports_url}"
    if location.startswith("file://"):
        return (
            f"{DEFAULT_REPORTS_URL}/{name}",
            "open it while `evalsentry serve-reports` runs where the store is",
        )
    try:
        url = str(fs.sign(path, expiration=int(expiry.total_seconds())))
    except Exception:  # noqa: BLE001 - NotImplementedError, or no credentials that can sign
        return location, "this store cannot sign a browser link: fetch it with your storage tools"
    until = datetime.now(UTC) + expiry
    return url, f"signed link, valid until {until:%Y-%m-%d %H:%M} UTC"


def file_stem(name: str) -> str:
    """``name`` as one safe file-name segment: other characters become ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:100] or "report"


def run_scope(outcomes: Sequence[Any], partial: str | None) -> str | None:
    """What a partial run itself evaluated, for its report; None for a run of the whole week.

    ``outcomes`` are the run's own (``pipeline.Outcome``); ``partial`` says what it was asked
    for (``model(s) wine``).
    """
    if partial is None:
        return None
    done = ", ".join(
        f"{checkpoint_name(o.evaluation['model'], o.evaluation.get('version'), o.evaluation.get('checkpoint_sha256'))} on "
        f"{o.evaluation['evalset']}"
        for o in outcomes
    )
    return (
        f"Partial run ({partial}): it evaluated {done or 'nothing'}. The verdict and the tables "
        "cover every result recorded for the week, whichever run recorded it."
    )
