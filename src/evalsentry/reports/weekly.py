"""The week's Markdown report: headline and gate, metrics, lineage and cost, validation, drift, bill."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.cost import units
from evalsentry.gate.week import GateReport
from evalsentry.reports.bill import Lifetime, lifetime_table
from evalsentry.reports.levers import LEVER_HEADERS
from evalsentry.reports.report import (
    VERDICT_MARK,
    checkpoint_name,
    finite,
    fmt,
    gate_markdown,
    md_table,
    summary_table,
    validation_result,
)

if TYPE_CHECKING:
    from evalsentry.gate.suspects import Suspects

#: At most this many suspects of an evalset are listed in a report (all: the CLI).
SUSPECTS_SHOWN = 10
SUSPECT_HEADERS = ["example", "row", "given", "agreed", "p(agreed)", "p(given)", "agreeing"]


def weekly_markdown(
    report: GateReport,
    evaluations: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    validations: Mapping[str, Mapping[str, Any]],
    drifts: Sequence[Any] = (),
    bindings: Mapping[str, str] | None = None,
    bill: Lifetime | None = None,
    scope: str | None = None,
    suspects: Mapping[str, Suspects | str] | None = None,
) -> str:
    """The weekly report, headline and compact summary first, then the details.

    The summary fits the Prefect UI's artifact panel; below it come the model lines and the
    evalsets each is bound to, the gate's full table (tolerance, p, flips, why), metrics with
    CIs, lineage, cost, data validation and drift, (given ``suspects``, see
    :func:`~evalsentry.gate.suspects.week_suspects`) each evalset's label-error suspects, and
    (given ``bill``) each line's lifetime bill. ``scope`` (a partial run's :func:`run_scope`) follows the headline.
    """
    lines = _headline_and_gate(report, bindings, scope)
    lines += ["### Metrics", "", *_metrics_section(evaluations, metrics)]
    lines += ["", "### Lineage and cost", "", *_lineage_table(evaluations)]
    lines += ["", "### Data validation", "", *_validation_table(validations)]
    if drifts:
        lines += ["", "### Live-data drift", "", *_drift_table(drifts)]
    if suspects:
        lines += ["", "### Label-error suspects", ""]
        for name, found in suspects.items():
            said, rows = suspect_rows(name, found, report.week)
            lines += [f"- **{name}**: {said}", ""]
            lines += [*md_table(SUSPECT_HEADERS, rows), ""] if rows else []
    lines += _bill_section(evaluations, bill)
    return "\n".join(lines) + "\n"


def _headline_and_gate(
    report: GateReport, bindings: Mapping[str, str] | None, scope: str | None
) -> list[str]:
    """The heading, headline, scope and summary; the model lines; the gate's full table."""
    details = gate_markdown(report, include_slices=False).rstrip().splitlines()
    if details and details[0].startswith("#"):  # its heading: this report has its own
        details = details[1:]
    return [
        f"## evalsentry {report.week} — {VERDICT_MARK[report.verdict]}",
        "",
        f"**{report.headline()}**",
        "",
        *([f"> {scope}", ""] if scope else []),
        *summary_table(report),
        "",
        *(
            [
                "### Model lines",
                "",
                *md_table(["model", "evaluated on"], sorted(bindings.items())),
                "",
            ]
            if bindings
            else []
        ),
        "### Gate details",
        *details,
        "",
    ]


def _metrics_section(
    evaluations: Sequence[Mapping[str, Any]], metrics: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Each evaluation's metrics over the whole evalset (no slice), with their CIs."""
    by_eval = {e["evaluation_id"]: e for e in evaluations}
    rows = [
        [
            checkpoint_name(
                by_eval[m["evaluation_id"]]["model"],
                by_eval[m["evaluation_id"]].get("version"),
                by_eval[m["evaluation_id"]].get("checkpoint_sha256"),
            ),
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
    return (
        md_table(["checkpoint", "stage", "evalset", "metric", "value", "95% CI", "n"], rows)
        if rows
        else ["No metrics."]
    )


def _lineage_table(evaluations: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each evaluation's status, where its checkpoint came from, and what evaluating it cost."""
    return md_table(
        [
            "checkpoint",
            "status",
            "git",
            "data",
            "seed",
            "trained",
            "device",
            "examples/s",
            "energy",
            "CO2",
            "cost",
        ],
        [
            [
                checkpoint_name(e["model"], e.get("version"), e.get("checkpoint_sha256")),
                e["status"] if e["status"] == "ok" else f"error: {e.get('error')}",
                str(e.get("git_sha") or "")[:10] + ("+dirty" if e.get("git_dirty") else ""),
                str(e.get("data_sha") or "")[:12],
                e.get("seed"),
                str(e.get("trained_at") or "")[:19],
                e.get("device_name") or e.get("device") or "",
                fmt(e.get("examples_per_s"), ".0f"),
                units.energy(e.get("energy_kwh")),
                units.carbon(e.get("co2_kg")),
                units.money(e.get("cost"), e.get("currency")),
            ]
            for e in evaluations
        ],
    )


def _validation_table(validations: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each evalset's data validation: its result, and how many expectations ran and failed."""
    return md_table(
        ["evalset", "result", "expectations", "failed"],
        [
            [
                name,
                validation_result(v),
                v.get("evaluated", ""),
                v.get("failed", ""),
            ]
            for name, v in validations.items()
        ],
    )


def _drift_table(drifts: Sequence[Any]) -> list[str]:
    """Each drift check: the feature, its PSI and adjusted p, and the verdict with its reason."""
    return md_table(
        ["evalset", "feature", "model", "PSI", "p (BH)", "verdict"],
        [
            [
                d.evalset,
                d.feature,
                d.model or "",
                fmt(finite(d.psi), ".3f"),
                fmt(finite(d.p_adjusted), ".2g"),
                f"{d.verdict}" + (f": {d.reason}" if getattr(d, "reason", "") else ""),
            ]
            for d in drifts
        ],
    )


def _bill_section(evaluations: Sequence[Mapping[str, Any]], bill: Lifetime | None) -> list[str]:
    """The week's bill; then, given a bill with lines, each line's lifetime bill to date."""
    total = sum(e.get("cost") or 0.0 for e in evaluations)
    energy = sum(e.get("energy_kwh") or 0.0 for e in evaluations)
    currency = next((e.get("currency") for e in evaluations if e.get("currency")), "")
    lines = [
        "",
        f"**This week's bill:** {units.money(total, currency)}, {units.energy(energy)}.",
        "",
    ]
    if bill is not None and not bill.empty:
        lines += ["### Lifetime bill to date", "", *md_table(*lifetime_table(bill.lines)), ""]
        lines += [f"- {line.in_words()}" for line in bill.lines]
        lines += [f"- note: {note}" for note in bill.notes] + [""]
    if bill is not None and bill.lever_rows:
        lines += ["### Serving levers", "", *md_table(LEVER_HEADERS, bill.lever_rows), ""]
        lines += [f"- {words}" for words in bill.levers] + [""]
    return lines


def suspect_rows(name: str, found: Suspects | str, week: str) -> tuple[str, list[list[str]]]:
    """What a report says of one evalset's suspects: a sentence, and its first suspects' rows."""
    if isinstance(found, str):
        return found, []
    said = found.headline().removeprefix(f"label-error suspects in {name}: ")
    if found.suspects:
        said += (
            f". All of them: `evalsentry evalset suspects {name}`; the week without them: "
            f"`evalsentry gate --week {week} --without-suspects`"
        )
    rows = [
        [
            s.example_id,
            str(s.row),
            s.given,
            s.agreed,
            f"{s.confidence:.2f}",
            f"{s.given_probability:.2f}",
            f"{s.agreeing} of {len(found.checkpoints)}",
        ]
        for s in found.suspects[:SUSPECTS_SHOWN]
    ]
    return said, rows
