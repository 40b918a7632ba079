"""The Prefect UI as a user sees it: a FAIL week's report artifact in headless Chromium, 1280 wide.

Prefect 3.9 serves two UIs: the default (v2) wraps a table's cells in a column of about 580
pixels; the one a user may switch back to (v1) does not wrap a cell, and a table wider than its
column of about 700 pixels scrolls sideways, hiding the verdicts at its right. Both are checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.history.store import History
from tests.integration.browser import CHROMIUM, Page, chromium
from tests.integration.prefect_server import api, run_week
from tests.models import TRUST, TRUSTED_YAML

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed; `make test` installs Debian's chromium where it can",
    ),
]

WIDTH = 1280
#: Where each UI shows one artifact: the default (v2) and the one a user may switch back to.
ARTIFACT_PAGES = ("/v2/artifacts/artifact/{id}", "/artifacts/artifact/{id}")
#: Once the artifact's heading and its tables are drawn (in its fonts): the Markdown column's
#: content box (the smallest element holding both), each table's box and header row, and every
#: ancestor of a table that scrolls or clips it sideways. Null before then.
MEASURE = """document.fonts.ready.then(() => {
  const heading = [...document.querySelectorAll('h2')].find(h => h.innerText.startsWith('evalsentry '));
  const tables = [...document.querySelectorAll('table')];
  if (!heading || tables.length < %d) return null;
  let column = heading.parentElement;
  while (!tables.every(t => column.contains(t))) column = column.parentElement;
  const box = column.getBoundingClientRect(), style = getComputedStyle(column);
  return {left: box.left + parseFloat(style.paddingLeft), right: box.right - parseFloat(style.paddingRight),
          tables: tables.map(t => {
    const scrolling = [];
    for (let e = t.parentElement; e; e = e.parentElement)
      if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')
        scrolling.push(`${e.tagName}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`);
    const own = t.getBoundingClientRect();
    return {header: t.rows[0].innerText.replace(/\\s+/g, ' '), left: own.left, right: own.right, scrolling};
  })};
})"""
PAGE_WIDTH = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"


def _failed_week(
    server: dict[str, str], tmp_path: Path, evalset: Path, checkpoints: dict[str, Path]
) -> str:
    """W40 and W41 of the good checkpoint recorded directly, then W42 of a worse one run on the
    server: a FAIL against both references, the widest verdict table; the run's id."""
    config_path = tmp_path / "evalsentry.yaml"
    config_path.write_text(
        f"store: store\nregistry: registry\nevalsets: {evalset.parent}\n" + TRUSTED_YAML
    )
    config = load_config(config_path)
    registry = Registry(str(tmp_path / "registry"))
    good = registry.register(checkpoints["good"], "toy-model", stage="production", trust=TRUST)
    for week in ("2026-W40", "2026-W41"):
        outcome = evaluate_checkpoint(
            Target.from_entry(good), load_evalset(evalset), config=config, run_id=week, week=week
        )
        record(History(config.store_url), [outcome])
    worse = registry.register(checkpoints["degraded"], "toy-model", trust=TRUST)
    registry.promote("toy-model", worse.version, "production")
    failed = run_week(server, "2026-W42", config_path)
    assert failed["state"] == "FAILED", failed
    return str(failed["id"])


def _artifact(server: dict[str, str], flow_run_id: str, key: str) -> dict[str, object]:
    found = api(
        server,
        "POST",
        "/artifacts/filter",
        {
            "artifacts": {
                "flow_run_id": {"any_": [flow_run_id]},
                "key": {"any_": [key]},
            }
        },
    )
    assert isinstance(found, list) and len(found) == 1, found
    return found[0]  # type: ignore[no-any-return]


def _tables_fit(page: Page, url: str, tables: int, header: str) -> None:
    page.open(url)
    measured = page.wait_for(MEASURE % tables)
    headers = [t["header"] for t in measured["tables"]]
    assert header in headers, (url, headers)
    for table in measured["tables"]:
        assert table["left"] >= measured["left"] - 0.5, (url, measured)
        assert table["right"] <= measured["right"] + 0.5, (url, measured)
        assert table["scrolling"] == [], (url, table)
    scroll_width, client_width = page.evaluate(PAGE_WIDTH)
    assert client_width == WIDTH and scroll_width <= client_width, url


#: The artifacts with tables, and a header row each must show.
HEADERS = {
    "weekly-eval-report": "metric now vs W41 (previous) vs W40 (baseline)",
    "weekly-eval-details": "metric value 95% CI n",
}


def test_a_fail_weeks_artifacts_fit_a_1280_pixel_window(
    server: dict[str, str], tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """The report and details artifacts of a week failing against last week and the baseline
    render their tables (in both UIs) within their column, and no page scrolls sideways."""
    failed = _failed_week(server, tmp_path, toy_evalset, toy_checkpoints)
    ui = server["PREFECT_API_URL"].removesuffix("/api")
    with chromium(WIDTH) as page:
        for key, header in HEADERS.items():
            artifact = _artifact(server, failed, key)
            tables = str(artifact["data"]).count("\n|---|")
            assert tables >= 1
            for path in ARTIFACT_PAGES:
                _tables_fit(page, ui + path.format(id=artifact["id"]), tables, header)
