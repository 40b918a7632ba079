"""Publishing: the report files under the store, and the artifacts the Prefect UI shows.

Each run writes ``<store>/reports/<run name>.md`` (and ``.html`` for the weekly flow), one file
per run, and copies each to ``<key_prefix>-<week>.md`` / ``.html``: the week's latest report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.gate.drift import DriftResult
from evalsentry.gate.suspects import week_suspects
from evalsentry.gate.week import GateReport
from evalsentry.history.store import History
from evalsentry.reports.artifacts import bill_rows, details_artifact, report_artifact
from evalsentry.reports.bill import Lifetime, lifetime
from evalsentry.reports.html_report import render_report
from evalsentry.reports.report import browser_link, file_stem, metrics_table
from evalsentry.reports.weekly import weekly_markdown
from evalsentry.storage import filesystem, join, write_atomic

REPORTS = "reports"


@task(name="publish-report", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish_report(
    store_url: str,
    report: GateReport,
    evaluations: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    validations: Mapping[str, Mapping[str, Any]],
    *,
    run_name: str,
    key_prefix: str = "weekly-eval",
    drifts: Sequence[DriftResult] = (),
    config: Config | None = None,
    bindings: Mapping[str, str] | None = None,
    scope: str | None = None,
) -> str:
    """Write this run's Markdown (and, with ``config``, HTML) report and the week's latest copy.

    ``evaluations`` and ``metrics`` are the rows the report covers (a week's: every current
    result of it, whichever run recorded it). ``bindings`` (model line -> its evalsets, in
    words) is shown at the top of both; ``scope`` says what a partial run itself evaluated.
    With ``config`` (the weekly flow) both list each evalset's label-error suspects.

    Publishes the Markdown as an artifact, the overall metrics as a table, and a link to this
    run's report file (HTML when written). Returns where to open it: its http link where
    ``reports_url`` is configured, else the file's URL.
    """
    history = History(store_url)
    bill, suspects = None, None
    if config is not None:  # the weekly flow's report: its lifetime bill, the label suspects
        bill = lifetime(history, config, until=report.week)
        suspects = week_suspects(history, evaluations, config.evalsets_dir)
    markdown = weekly_markdown(
        report, evaluations, metrics, validations, drifts, bindings, bill, scope, suspects
    )
    files = {".md": markdown.encode()}
    if config is not None:
        files[".html"] = render_report(history, report, bindings, bill, scope, suspects).encode()
    latest = f"{key_prefix}-{report.week}"
    fs, path, kind = _write_reports(store_url, files, file_stem(run_name), latest)
    link, note = browser_link(fs, path, reports_url=config.reports_url if config else None)
    create_markdown_artifact(
        report_artifact(
            report,
            scope,
            more=f"Gate details, metrics, lineage, cost and data validation: the "
            f"`{key_prefix}-details` artifact; the whole report: [{note}]({link}).",
        ),
        key=f"{key_prefix}-report",
        description=report.headline(),
    )
    _details_artifacts(
        report, evaluations, metrics, validations, bindings, bill, run_name, key_prefix
    )
    create_link_artifact(
        link,
        link_text=f"{'HTML' if kind == '.html' else 'Markdown'} report of {run_name} ({note})",
        key=f"{key_prefix}-report-file",
        description=f"This run's report; {latest}{kind} next to it is the week's latest",
    )
    served = config is not None and config.reports_url is not None
    return link if served else str(fs.unstrip_protocol(path))


def _write_reports(
    store_url: str, files: Mapping[str, bytes], this_run: str, latest: str
) -> tuple[Any, str, str]:
    """Write each report file as this run's and as the week's latest.

    Returns the store's filesystem, the path of this run's report (HTML when written), and
    that report's suffix.
    """
    fs, root = filesystem(store_url)
    for suffix, data in files.items():
        for stem in (this_run, latest):
            write_atomic(fs, join(root, REPORTS, stem + suffix), data)
    kind = ".html" if ".html" in files else ".md"
    return fs, join(root, REPORTS, this_run + kind), kind


def _details_artifacts(
    report: GateReport,
    evaluations: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    validations: Mapping[str, Mapping[str, Any]],
    bindings: Mapping[str, str] | None,
    bill: Lifetime | None,
    run_name: str,
    key_prefix: str,
) -> None:
    """The artifacts beside the report: its details, the overall metrics, the lifetime bill."""
    create_markdown_artifact(
        details_artifact(report, evaluations, metrics, validations, bindings, bill),
        key=f"{key_prefix}-details",
        description=f"{report.week}: the gate's numbers and reasons, metrics, lineage, cost",
    )
    create_table_artifact(
        metrics_table(evaluations, metrics),
        key=f"{key_prefix}-metrics",
        description=f"Overall metrics of {run_name}, 4 significant digits",
    )
    if bill is not None and not bill.empty:
        create_table_artifact(
            bill_rows(bill),
            key=f"{key_prefix}-lifetime-bill",
            description="Each model line's bill to date: training, evaluation, serving, declared",
        )
