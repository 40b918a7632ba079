"""The import-results artifact shows what a log said as text: no link, image, mention or comment."""

from __future__ import annotations

import re

from evalsentry.harnesses.pickup import IMPORT, REFUSED, Found, Imported
from evalsentry.reports.imports import imports_markdown


def test_what_a_log_said_is_text_and_each_run_one_row() -> None:
    """A reason holding a link, an image, an @mention and an HTML comment, and a path with a
    pipe: each row stays one table row and renders as written."""
    hostile = "no filter 'x](https://evil.example) ![i](https://evil.example/p.png) @team <!--'"
    found = [
        Found("sums", "runs/a|b/results_1.json", REFUSED, hostile),
        Found("sums", "runs/ok/results_2.json", IMPORT, evalset="lm-eval.arith"),
    ]
    done = [Imported("sums", "runs/ok/results_2.json", 2, "lm-eval.arith", 40, {"score:acc": 1.0})]
    markdown = imports_markdown("2026-W41", found, done, "2026-W41: PASS, 0 warning(s)")
    rows = [line for line in markdown.splitlines() if line.startswith("| sums")]
    assert len(rows) == 2 and all(row.count(" | ") == 2 for row in rows)
    assert "`runs/a\\|b/results_1.json`" in rows[0]
    assert re.search(r"(?<!\\)[\[\]]", rows[0]) is None  # every bracket escaped: no link
    assert "!\\[i\\](https" in rows[0]  # no image either
    assert "@team" not in markdown and "@\u200bteam" in rows[0] and "\\<!--" in rows[0]
    assert "imported: sums@v2 on lm-eval.arith: 40 examples, score:acc 1.0000" in rows[1].replace(
        "\\", ""
    )
    assert "1 imported, 0 skipped, 1 refused." in markdown
