"""Publishing: the report file under the store, and the artifacts the Prefect UI shows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.drift import DriftResult
from evalsentry.gate import GateReport
from evalsentry.history import History
from evalsentry.html_report import render_report
from evalsentry.pipeline import Outcome
from evalsentry.report import weekly_markdown
from evalsentry.storage import filesystem, join, write_atomic

REPORT_KEY = "weekly-eval-report"
TABLE_KEY = "weekly-eval-metrics"
LINK_KEY = "weekly-eval-report-file"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@task(name="publish-report", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def publish_report(
    store_url: str,
    report: GateReport,
    outcomes: Sequence[Outcome],
    validations: Mapping[str, Mapping[str, Any]],
    *,
    key_prefix: str = "weekly-eval",
    drifts: Sequence[DriftResult] = (),
    config: Config | None = None,
) -> str:
    """Write the week's Markdown (and, with ``config``, HTML) report under the store; publish artifacts."""
    evaluations = [o.evaluation for o in outcomes]
    metrics = [m for o in outcomes for m in o.metrics]
    markdown = weekly_markdown(report, evaluations, metrics, validations, drifts)
    fs, root = filesystem(store_url)
    path = join(root, "reports", f"{key_prefix}-{report.week}.md")
    write_atomic(fs, path, markdown.encode())
    location = fs.unstrip_protocol(path)
    if config is not None:
        html_path = join(root, "reports", f"{key_prefix}-{report.week}.html")
        write_atomic(fs, html_path, render_report(History(store_url), report.week, config).encode())
        location = fs.unstrip_protocol(html_path)
    create_markdown_artifact(
        markdown,
        key=f"{key_prefix}-report",
        description=f"evalsentry {report.week}: {report.verdict}",
    )
    create_table_artifact(
        [
            {k: _json_safe(v) for k, v in m.items() if k != "evaluation_id"}
            for m in metrics
            if not m["slice"]
        ],
        key=f"{key_prefix}-metrics",
        description=f"Metrics of {report.week}",
    )
    create_link_artifact(
        location, link_text=f"report {report.week}", key=f"{key_prefix}-report-file"
    )
    return location
