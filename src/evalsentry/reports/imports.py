"""The ``import-results`` run's artifact: the week's verdict, each harness run found and its fate.

A run's path and the reasons a log gave (a filter's name, a task's) are data: written as code
spans and escaped Markdown text, they show as written, never as a link, an image or a mention.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalsentry.harnesses.pickup import REFUSED, SKIPPED, Found, Imported
from evalsentry.reports.ci_github import md_code, md_text


def imports_markdown(
    week: str, found: Sequence[Found], imported: Sequence[Imported], verdict: str
) -> str:
    """The run's artifact: the verdict, then each run found and what became of it."""
    done: dict[tuple[str, str | None], Imported] = {(i.source, i.evalset): i for i in imported}
    lines = [
        f"# Harness results imported for {week}",
        "",
        f"**{md_text(verdict)}**",
        "",
        f"{len(imported)} imported, {sum(f.action == SKIPPED for f in found)} skipped, "
        f"{sum(f.action == REFUSED for f in found)} refused.",
        "",
        "| model line | run | what happened |",
        "|---|---|---|",
    ]
    for f in found:
        what = (
            f"imported: {done[f.source, f.evalset].describe()}"
            if (f.source, f.evalset) in done
            else f"{f.action}: {f.reason}"
        )
        source = md_code(f.source).replace("|", "\\|")  # GFM: a pipe in a cell's code span
        lines.append(f"| {md_text(f.line)} | {source} | {md_text(what)} |")
    return "\n".join(lines) + "\n"
