"""The one alert of a failed run: counts and the worst rows, rounded and JSON-safe.

A failed week can hold many FAIL and ERROR comparisons (each metric, slice and reference of
each model). An alert per comparison buries the reader; this module folds them into one
summary an automation posts once: how many of each verdict, the worst few rows with numbers
rounded for reading, and a ``text`` line block that chat webhooks (Slack, Mattermost) show as is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.gate.week import Comparison, GateReport, Verdict

if TYPE_CHECKING:
    from evalsentry.gate.drift import DriftResult

WORST_ROWS = 5
VALUE_DIGITS = 4  # metric values and drops: decimal places
P_DIGITS = 2  # p-values: significant figures


def _finite(value: Any) -> float | None:
    """``value`` as a plain float; None for a missing, NaN or infinite one (JSON has neither)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _number(value: Any) -> float | None:
    """A metric value or drop, rounded to ``VALUE_DIGITS`` places."""
    number = _finite(value)
    return None if number is None else round(number, VALUE_DIGITS)


def _p(value: Any) -> float | None:
    """A p-value to ``P_DIGITS`` significant figures: 1.2e-05 stays distinguishable from 0."""
    number = _finite(value)
    return None if number is None else float(f"{number:.{P_DIGITS}g}")


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def comparison_row(comparison: Comparison) -> dict[str, Any]:
    """One comparison as the alert shows it: who, what, against what, and the rounded numbers."""
    flips = (
        None
        if comparison.newly_wrong is None
        else {
            "newly_wrong": int(comparison.newly_wrong),
            "newly_right": _int(comparison.newly_right),
        }
    )
    return {
        "verdict": str(comparison.verdict),
        "model": comparison.model,
        "version": _int(comparison.version),
        "evalset": comparison.evalset,
        "metric": comparison.metric,
        "slice": comparison.slice,
        "reference": comparison.reference,
        "was": _number(comparison.reference_value),
        "now": _number(comparison.value),
        "change": _number(comparison.delta),
        "allowed": _number(comparison.allowed_change),
        "drop": _number(comparison.drop),
        "tolerance": _number(comparison.tolerance),
        "p": _p(comparison.p_adjusted),
        "flips": flips,
        "reason": comparison.reason,
    }


def drift_row(result: DriftResult) -> dict[str, Any]:
    """One drifted feature (or model's predictions) as the alert shows it."""
    return {
        "verdict": str(result.verdict),
        "evalset": result.evalset,
        "model": result.model,
        "feature": result.feature,
        "kind": result.kind,
        "psi": _number(result.psi),
        "p": _p(result.p_adjusted),
        "reason": result.reason,
    }


def _line(row: dict[str, Any], comparison: Comparison) -> str:
    text = f"{row['verdict']} {comparison.label}"
    if row["was"] is not None and row["now"] is not None and row["change"] is not None:
        text += f": {row['was']} -> {row['now']} (change {row['change']:+}"
        if row["p"] is not None:
            text += f", p={row['p']}"
        if row["flips"] is not None:
            text += f", flips -{row['flips']['newly_wrong']}/+{row['flips']['newly_right']}"
        text += ")"
    elif row["reason"]:
        text += f": {row['reason']}"
    return text


#: What an alert is about: a run that ended Failed (the flow's own event), one that crashed,
#: or one that did not end within the grace period (Prefect automations; flows/alerts.py).
ALERT_FAILED = "failed"
#: The ``alert`` of a week that completed with FAIL-level live-data drift (same payload shape).
ALERT_DRIFT = "drift"


def summary(
    report: GateReport,
    *,
    title: str | None = None,
    run_name: str | None = None,
    run_url: str | None = None,
    limit: int = WORST_ROWS,
) -> dict[str, Any]:
    """The payload of the one alert for a failed run (a week, or a candidate).

    Args:
        report: the gate's report; its gating FAIL, ERROR, INCONCLUSIVE and WARN comparisons
            are counted, its problems (FAIL, ERROR; INCONCLUSIVE when strict) listed in the
            order of :attr:`GateReport.problems`, so the first row is the headline's. An
            INCONCLUSIVE counts as one when it may be a regression; an unresolved one (the
            evalset cannot resolve the tolerance) is informational, counted as UNRESOLVED.
            Its drifted features are counted and listed (up to ``limit``).
        title: what precedes the headline on the first line of ``text`` (a candidate's
            ``candidate of m failed``); nothing unless given.
        run_name: the flow run's name, shown and returned when known.
        run_url: a link to the flow run, shown and returned when known.
        limit: how many of the worst rows to include; ``more`` counts the rest.

    Returns:
        A dict of plain JSON types (no NaN, no numpy scalars): ``alert`` (``failed``),
        ``week``, ``headline``, ``gate`` (the week's verdict, drift included), ``counts``
        (FAIL, ERROR, INCONCLUSIVE, WARN, DRIFT, UNRESOLVED), ``models``, ``worst``, ``more``,
        ``drift``, ``run`` and ``text``, whose first line is the headline.
    """
    bad = report.problems
    shown = bad[:limit]
    rows = [comparison_row(c) for c in shown]
    drifted = report.drifted
    drift_rows = [drift_row(d) for d in drifted[:limit]]
    counts = _counts(report)
    headline = report.headline()
    lines = ["evalsentry: " + (f"{title}: " if title else "") + headline]
    lines += [f"diagnosis: {report.diagnosis}"] if bad and report.diagnosis else []
    lines += [_counts_line(counts), *(change for change in report.changes if bad)]
    lines += [_line(row, c) for row, c in zip(rows, shown, strict=True)]
    if len(bad) > limit:
        lines.append(f"... and {len(bad) - limit} more")
    lines += [d.describe() for d in drifted[:limit]]
    if len(drifted) > limit:
        lines.append(f"... and {len(drifted) - limit} more drifted")
    if run_url or run_name:
        lines.append(f"run: {run_url or run_name}")
    return {
        "alert": ALERT_FAILED,
        "week": report.week,
        "headline": headline,
        "gate": str(report.verdict),
        "counts": counts,
        "models": sorted({c.model for c in bad if c.model != "*"}),
        "worst": rows,
        "more": max(len(bad) - limit, 0),
        "drift": drift_rows,
        "run": {"name": run_name, "url": run_url},
        "text": "\n".join(lines),
    }


def _counts(report: GateReport) -> dict[str, int]:
    """How many gating FAIL, ERROR, INCONCLUSIVE and WARN, drifted features and unresolved."""
    return {
        str(Verdict.FAIL): len(report.failures),
        str(Verdict.ERROR): len(report.errors),
        str(Verdict.INCONCLUSIVE): len(report.possible_regressions),
        str(Verdict.WARN): len(report.warnings),
        "DRIFT": len(report.drifted),
        "UNRESOLVED": len(report.unresolved),
    }


def _counts_line(counts: dict[str, int]) -> str:
    """The counts in words: the alert text's second line."""
    return (
        f"{counts['FAIL']} regression(s), {counts['ERROR']} error(s), "
        + (f"{counts['INCONCLUSIVE']} inconclusive, " if counts["INCONCLUSIVE"] else "")
        + f"{counts['WARN']} warning(s), {counts['DRIFT']} drifted feature(s)"
        + (f" ({counts['UNRESOLVED']} unresolved, informational)" if counts["UNRESOLVED"] else "")
    )


def failure_summary(
    week: str | None,
    headline: str,
    details: Sequence[str] = (),
    *,
    run_name: str | None = None,
    run_url: str | None = None,
    limit: int = WORST_ROWS,
) -> dict[str, Any]:
    """The same payload for a run that failed before or outside the gate (nothing was judged).

    ``headline`` is the run's state message's first part (``2026-W49: ERROR nothing to
    evaluate``), ``details`` its reasons; ``gate`` is ERROR, ``counts`` one ERROR, and the
    reasons lead ``text`` after the headline.
    """
    counts = dict.fromkeys(("FAIL", "ERROR", "INCONCLUSIVE", "WARN", "DRIFT", "UNRESOLVED"), 0)
    counts["ERROR"] = 1
    lines = [f"evalsentry: {headline}", *details[:limit]]
    if len(details) > limit:
        lines.append(f"... and {len(details) - limit} more")
    if run_url or run_name:
        lines.append(f"run: {run_url or run_name}")
    return {
        "alert": ALERT_FAILED,
        "week": week,
        "headline": headline,
        "gate": str(Verdict.ERROR),
        "counts": counts,
        "models": [],
        "worst": [],
        "more": 0,
        "drift": [],
        "run": {"name": run_name, "url": run_url},
        "text": "\n".join(lines),
    }
