"""The README's pictures of the Prefect UI: the demo's failed week as a user sees it.

`make screenshots` starts a Prefect server with its UI on a free port, runs `evalsentry demo`
against it, and photographs, in headless Chromium at 1280 pixels wide, the failed week's run
(its state message), the head of its logs and its report artifact, and the week before it that
completed (its state message), as docs/ui-*.png.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from PIL import Image

from tests.integration.browser import Page, chromium
from tests.integration.prefect_server import ROOT, api, prefect_server

DOCS = ROOT / "docs"
WIDTH = 1280
SIDEBAR = 256  # the UI's navigation column, left out of every picture
#: The run graph is drawn on a canvas, again after the window grows: no DOM change says when.
SETTLE_S = 3
COLOURS = 96  # a palette this size keeps the UI's text sharp and each file under 200 KB
#: The bottom of the first element whose own text is ``%s`` and of the element after it.
BOTTOM_AFTER = """(() => {
  const label = [...document.querySelectorAll('*')].find(e => e.children.length === 0 && e.innerText?.trim() === %r);
  if (!label) return null;
  const next = label.nextElementSibling || label.parentElement.nextElementSibling;
  return Math.max(label.getBoundingClientRect().bottom, next ? next.getBoundingClientRect().bottom : 0);
})()"""
#: The bottom of the ``%d``-th log line (or the last), once that many are drawn.
LOG_BOTTOM = """(() => {
  const rows = [...document.querySelectorAll('*')].filter(e => e.children.length === 0 && e.innerText?.trim() === 'prefect.flow_runs');
  return rows.length >= %d ? rows[%d - 1].getBoundingClientRect().bottom : null;
})()"""
#: The top of the run page's tabs (Details, Logs, ...): a picture of one tab starts there.
TABS_TOP = """(() => {
  const tab = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Details');
  return tab ? tab.getBoundingClientRect().top - 8 : null;
})()"""
#: The bottom of the artifact's Markdown, once its tables are drawn.
ARTIFACT_BOTTOM = """(() => {
  const tables = document.querySelectorAll('table');
  const end = [...document.querySelectorAll('p')].find(p => p.innerText.startsWith('Gate details'));
  return tables.length && end ? end.getBoundingClientRect().bottom : null;
})()"""


def completed_week(env: Mapping[str, str]) -> str:
    """The flow run id of the demo's last week that completed (its second: the gate passed)."""
    runs = api(
        env,
        "POST",
        "/flow_runs/filter",
        {"flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}, "sort": "START_TIME_DESC"},
    )
    if not isinstance(runs, list) or not runs:
        raise RuntimeError("the demo should complete two weeks; none completed")
    return str(runs[0]["id"])


def failed_week(env: Mapping[str, str], folder: Path) -> tuple[str, str]:
    """Run the demo against the server; its failed week's flow run id and report artifact id."""
    subprocess.run(  # noqa: S603 - this checkout's own CLI
        [str(Path(sys.executable).parent / "evalsentry"), "demo", "--dir", str(folder / "demo")],
        env=dict(env),
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    runs = api(
        env, "POST", "/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["FAILED"]}}}}
    )
    if not isinstance(runs, list) or len(runs) != 1:
        raise RuntimeError(f"the demo should fail one week; failed runs: {runs}")
    artifacts = api(
        env,
        "POST",
        "/artifacts/filter",
        {
            "artifacts": {
                "flow_run_id": {"any_": [runs[0]["id"]]},
                "key": {"any_": ["weekly-eval-report"]},
            }
        },
    )
    if not isinstance(artifacts, list) or len(artifacts) != 1:
        raise RuntimeError(f"the failed week has no one report artifact: {artifacts}")
    return str(runs[0]["id"]), str(artifacts[0]["id"])


def shoot(page: Page, url: str, bottom: str, name: str, top: str = "") -> Path:
    """Photograph ``url`` right of its navigation column, as docs/<name>.png in a small palette.

    From the ``top`` its expression finds (the page's top without one) to the ``bottom``.
    """
    page.open(url)
    end = float(page.wait_for(bottom)) + 8
    page.send(
        "Emulation.setDeviceMetricsOverride",
        width=WIDTH,
        height=int(end) + 1,
        deviceScaleFactor=1,
        mobile=False,
    )
    time.sleep(SETTLE_S)
    end = float(page.wait_for(bottom)) + 8  # the same place, unless the taller window moved it
    start = float(page.wait_for(top)) if top else 0.0
    clip = {"x": SIDEBAR, "y": start, "width": WIDTH - SIDEBAR, "height": end - start}
    path = page.screenshot(DOCS / f"{name}.png", clip)
    Image.open(path).convert("RGB").quantize(COLOURS).save(path, optimize=True)
    return path


def main() -> None:
    """Write docs/ui-run.png, ui-logs.png, ui-artifact.png and ui-run-completed.png."""
    with (
        tempfile.TemporaryDirectory(prefix="screenshots-") as folder,
        prefect_server(Path(folder), deploy=False) as env,
    ):
        run, artifact = failed_week(env, Path(folder))
        ui = env["PREFECT_API_URL"].removesuffix("/api")
        with chromium(WIDTH, 900) as page:
            shoot(
                page,
                f"{ui}/v2/runs/flow-run/{run}?tab=Details",
                BOTTOM_AFTER % "State Message",
                "ui-run",
            )
            shoot(
                page,
                f"{ui}/v2/runs/flow-run/{run}?tab=Logs",
                LOG_BOTTOM % (6, 6),
                "ui-logs",
                TABS_TOP,
            )
            shoot(page, f"{ui}/v2/artifacts/artifact/{artifact}", ARTIFACT_BOTTOM, "ui-artifact")
            shoot(
                page,
                f"{ui}/v2/runs/flow-run/{completed_week(env)}?tab=Details",
                BOTTOM_AFTER % "State Message",
                "ui-run-completed",
                TABS_TOP,
            )


if __name__ == "__main__":
    main()
