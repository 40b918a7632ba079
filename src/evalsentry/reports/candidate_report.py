"""A candidate's HTML report: its verdicts, the examples that flipped, its lineage and cost.

What ``evalsentry evaluate --html`` writes for a pull request's reviewers: one self-contained
page (no network, no script), uploaded beside the JUnit file as the check's artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.cost import units
from evalsentry.gate.flips import report_flips
from evalsentry.reports.html_report import STYLE, VERDICT_COLOUR, esc, html_table
from evalsentry.reports.report import HEADERS, comparison_rows, overview

if TYPE_CHECKING:
    from evalsentry.evaluation.candidate import CandidateRun
    from evalsentry.gate.verdicts import GateReport
    from evalsentry.history.store import History

LINEAGE_HEADERS = [
    *("evalset", "status", "git", "data", "seed", "trained", "config"),
    *("device", "time", "energy", "cost"),
]
#: Example ids listed per flip list (the history's predictions hold every one).
IDS_SHOWN = 1000


def _ids(ids: Sequence[str]) -> str:
    more = len(ids) - IDS_SHOWN
    return ", ".join(ids[:IDS_SHOWN]) + (f" and {more} more" if more > 0 else "") or "none"


def render_candidate(history: History, run: CandidateRun, report: GateReport) -> str:
    """The page of ``run``'s candidate as ``report`` (the run's report, maybe made strict) judged it.

    It renders the verdicts it is given, with the flipped examples read from the history's
    predictions; it runs no gate of its own.
    """
    evaluations = [o.evaluation for o in run.outcomes]
    first = evaluations[0] if evaluations else {}
    verdict = str(report.verdict)
    body = [
        f"<h1>evalsentry candidate {esc(first.get('model', ''))}: "
        f'<span class="verdict" style="color:{VERDICT_COLOUR[verdict]}">{verdict}</span></h1>',
        f"<p><strong>{esc(report.headline())}</strong></p>",
        f"<p>{esc(overview(report, report.comparisons))}</p>",
        f"<p>Checkpoint <code>{esc(first.get('checkpoint_uri', ''))}</code>, sha256 "
        f"<code>{esc(first.get('checkpoint_sha256', ''))}</code>; recorded as a candidate check "
        f"of week {esc(run.week)}, run {esc(run.run_id)}.</p>",
        "<h2>Verdicts</h2>",
        html_table(HEADERS, comparison_rows(report.comparisons))
        if report.comparisons
        else "<p>Nothing to compare yet.</p>",
    ]
    body += _flips_section(history, report)
    body += ["<h2>Metrics</h2>", _metrics_table(run)]
    body += ["<h2>Lineage and cost</h2>", _lineage_table(evaluations)]
    body += ["<h2>Data validation</h2>", _validation_table(run)]
    title = f"evalsentry candidate {first.get('model', '')}: {verdict}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def _flips_section(history: History, report: GateReport) -> list[str]:
    """The examples each compared metric saw flip, newly wrong and newly right; none: nothing."""
    flips = report_flips(history, report.comparisons)
    body = []
    if flips:
        body.append("<h2>Flipped examples</h2>")
        for f in flips:
            body.append(f"<h3>{esc(f.label)}</h3>")
            body.append(
                html_table(
                    ["", "examples", "ids"],
                    [
                        ["newly wrong", len(f.newly_wrong), _ids(f.newly_wrong)],
                        ["newly right", len(f.newly_right), _ids(f.newly_right)],
                    ],
                )
            )
    return body


def _metrics_table(run: CandidateRun) -> str:
    """The candidate's metrics over each whole evalset (no slice), with their CIs."""
    metrics = [m for o in run.outcomes for m in o.metrics if not m.get("slice")]
    return html_table(
        ["evalset", "metric", "value", "95% CI", "n"],
        [
            [
                m["evalset"],
                m["metric"],
                f"{m['value']:.4f}",
                f"[{m['ci_low']:.4f}, {m['ci_high']:.4f}]",
                m.get("n"),
            ]
            for m in metrics
        ],
    )


def _lineage_table(evaluations: Sequence[Mapping[str, Any]]) -> str:
    """Each evaluation's status, where the checkpoint came from, and what evaluating it cost."""
    return html_table(
        LINEAGE_HEADERS,
        [
            [
                e.get("evalset"),
                e["status"] if e.get("status") == "ok" else f"error: {e.get('error')}",
                str(e.get("git_sha") or "")[:10] + ("+dirty" if e.get("git_dirty") else ""),
                str(e.get("data_sha") or "")[:12],
                e.get("seed"),
                str(e.get("trained_at") or "")[:19],
                e.get("config_json"),
                e.get("device_name") or e.get("device") or "",
                units.duration(e.get("wall_s")),
                units.energy(e.get("energy_kwh")),
                units.money(e.get("cost"), e.get("currency")),
            ]
            for e in evaluations
        ],
    )


def _validation_table(run: CandidateRun) -> str:
    """Each evalset's data validation: its result, and how many expectations ran and failed."""
    return html_table(
        ["evalset", "result", "expectations", "failed"],
        [
            [
                name,
                "passed" if v.get("success") else f"FAILED: {v.get('error', '')}",
                v.get("evaluated", ""),
                v.get("failed", ""),
            ]
            for name, v in run.validations.items()
        ],
    )
