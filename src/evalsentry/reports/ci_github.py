"""The gate where a pull request is reviewed: job summary, annotations and one updated comment.

Plain functions over a :class:`~evalsentry.gate.verdicts.GateReport`; ``evalsentry gate --github``
and ``evaluate --github`` write what they return. GitHub's limits shape them: a step summary
over 1 MiB is dropped whole, a comment body holds at most 65,536 characters, and a step shows at
most 10 error and 10 warning annotations. Each output stays well inside its limit, cut with a
note that says so. The comment's first line is a hidden marker that names what it is about, so
a workflow step finds the one comment to update on the next push instead of adding another.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evalsentry.gate.flips import ExampleFlips
from evalsentry.gate.verdicts import SEVERITY, GateReport, Verdict
from evalsentry.reports.report import (
    HEADERS,
    MODEL_OR_DATA,
    VERDICT_MARK,
    comparison_rows,
    no_mentions,
    overview,
    summary_table,
)

#: Bytes of one command's job summary: GitHub drops a step's whole summary beyond 1 MiB.
SUMMARY_LIMIT = 512 * 1024
#: The least a summary is given when the step's summary file already holds much.
SUMMARY_FLOOR = 16 * 1024
#: Bytes of the comment (GitHub refuses a comment body over 65,536 characters).
COMMENT_LIMIT = 60_000
#: GitHub shows at most this many error, and as many warning, annotations of one step.
ANNOTATIONS_PER_KIND = 10
#: Example ids listed per flip list: in the job summary, and in the comment.
SUMMARY_IDS = 500
COMMENT_IDS = 50


def escape_data(text: str) -> str:
    """``text`` as a workflow command's message: ``%``, carriage returns and newlines encoded."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """``text`` as a workflow command's property value: as data, and ``:`` and ``,`` too."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: str) -> str:
    """One workflow command line: ``::error title=...::message``."""
    given = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{command}{' ' + given if given else ''}::{escape_data(message)}"


def workflow_annotations(report: GateReport, *, per_kind: int = ANNOTATIONS_PER_KIND) -> list[str]:
    """``::error`` per gating problem, ``::warning`` per WARN and possible regression.

    Problems are the report's FAILs and ERRORs (and INCONCLUSIVEs when strict); a possible
    regression that does not fail the gate is a warning; an unresolved INCONCLUSIVE and the
    report-only rows are in the summary only. Past ``per_kind`` of a kind, the last one
    shown counts the rest.
    """
    problems = report.problems
    warned = sorted(
        report.warnings + ([] if report.strict else report.possible_regressions),
        key=lambda c: -SEVERITY[c.verdict],
    )
    lines = []
    for command, comparisons in (("error", problems), ("warning", warned)):
        shown = comparisons if len(comparisons) <= per_kind else comparisons[: per_kind - 1]
        lines += [
            workflow_command(
                command, c.describe(), title=f"evalsentry {c.verdict}: {c.who(with_evalset=True)}"
            )
            for c in shown
        ]
        if len(shown) < len(comparisons):
            rest = len(comparisons) - len(shown)
            lines.append(
                workflow_command(
                    command,
                    f"{rest} more {command}(s) of the gate: the job summary lists every one",
                    title=f"evalsentry: {rest} more",
                )
            )
    return lines


#: What Markdown or GitHub would read as markup in a line of text (``#12`` links an issue).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<|~#])")


def md_text(value: object) -> str:
    """``value`` as Markdown text that renders as written: one line, punctuation escaped.

    Escaping ``<`` keeps a reason that holds ``<!--`` from hiding the rest of a comment; a
    zero-width space after an ``@`` that starts a word keeps a value from mentioning anyone.
    """
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", re.sub(r"[\r\n\x00-\x1f\x7f]+", " ", str(value)))
    return no_mentions(text)


def md_code(value: object) -> str:
    """``value`` as one inline code span, whatever backticks it holds."""
    text = re.sub(r"[\r\n]+", " ", str(value))
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


@dataclass(frozen=True)
class Block:
    """A piece of a Markdown document that is shown whole, or cut by its rows.

    ``head`` and ``tail`` are kept; ``rows`` may be cut from the end, a line then saying how
    many ``unit`` were left out.
    """

    head: tuple[str, ...]
    rows: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    unit: str = "row(s)"

    def text(self, keep: int | None = None) -> str:
        """The block with its first ``keep`` rows (all by default), and a blank line after."""
        rows = self.rows if keep is None else self.rows[:keep]
        left = len(self.rows) - len(rows)
        note = ("", f"… {left} more {self.unit} not shown here") if left else ()
        return "\n".join([*self.head, *rows, *note, *self.tail]) + "\n\n"


def _size(text: str) -> int:
    return len(text.encode())


def fit(blocks: Sequence[Block], limit: int, *, whole: str, footer: str = "") -> str:
    """``blocks`` in order, then ``footer``, in at most ``limit`` bytes (UTF-8).

    What does not fit is cut: the block that overflows keeps the rows that fit, the blocks
    after it are left out, and a note says what was cut and where the whole is (``whole``).
    """

    def note(left: int) -> str:
        what = f": {left} more section(s) left out." if left else "."
        return f"> ✂️ Cut to stay within {limit // 1024} KiB (GitHub's limits){what} {whole}\n\n"

    reserve = _size(footer) + _size(note(len(blocks)))
    room = limit - reserve
    parts: list[str] = []
    for index, block in enumerate(blocks):
        used = sum(map(_size, parts))
        if used + _size(block.text()) <= room:
            parts.append(block.text())
            continue
        keep, most = 0, len(block.rows)  # the most rows that fit, by bisection
        while keep < most:
            middle = (keep + most + 1) // 2
            if used + _size(block.text(middle)) <= room:
                keep = middle
            else:
                most = middle - 1
        shown = used + _size(block.text(keep)) <= room
        if shown:
            parts.append(block.text(keep))
        parts.append(note(len(blocks) - index - shown))
        break
    return "".join(parts) + footer


def _url(url: str) -> str:
    """``url`` as a Markdown link target: what would end it (space, parentheses) encoded."""
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _ids(ids: Sequence[str], shown: int) -> str:
    listed = ", ".join(md_code(i) for i in ids[:shown])
    more = len(ids) - shown
    return (listed or "none") + (f" and {more} more" if more > 0 else "")


def _summary_html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def flip_block(flips: ExampleFlips, shown: int) -> Block:
    """The flipped examples of one pair, folded in ``<details>``."""
    wrong, right = len(flips.newly_wrong), len(flips.newly_right)
    summary = f"Flips: {flips.label}: {wrong} newly wrong, {right} newly right"
    return Block(
        head=(f"<details><summary>{_summary_html(summary)}</summary>", ""),
        rows=(
            f"**Newly wrong ({wrong}):** {_ids(flips.newly_wrong, shown)}",
            "",
            f"**Newly right ({right}):** {_ids(flips.newly_right, shown)}",
        ),
        tail=("", "</details>"),
    )


def _table(lines: Sequence[str]) -> Block:
    if len(lines) < 2 or not lines[0].startswith("|"):
        return Block(tuple(lines))
    return Block(tuple(lines[:2]), tuple(lines[2:]))


def _md_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(md_text(c) for c in cells) + " |"


def report_blocks(
    report: GateReport,
    title: str,
    *,
    flips: Sequence[ExampleFlips] = (),
    report_url: str | None = None,
    ids_shown: int = SUMMARY_IDS,
) -> list[Block]:
    """The verdict as Markdown blocks: headline first, then tables, then folded details.

    The title line carries the verdict; then the headline (the worst problem), the counts, a
    link to the HTML report when ``report_url`` is given, the compact table (each checkpoint's
    change against each reference), why each problem or INCONCLUSIVE is what it is, and in
    ``<details>`` every comparison (slices included) and each pair's flipped examples.
    """
    link = ["", f"📄 [HTML report and JUnit]({_url(report_url)})"] if report_url else []
    blocks = [
        Block(
            (
                f"## {VERDICT_MARK[report.verdict]} · evalsentry: {md_text(title)}",
                "",
                f"**{md_text(report.headline())}**",
                "",
                *(
                    [f"**{MODEL_OR_DATA}** {md_text(report.diagnosis)}", ""]
                    if report.diagnosis
                    else []
                ),
                md_text(overview(report, report.comparisons)),
                *link,
            )
        ),
        _table([line.replace("<", "\\<") for line in summary_table(report)]),
    ]
    notes = [c for c in report.inconclusive if c not in report.problems]
    why = [f"- {md_text(c.describe())}" for c in report.problems + notes]
    why += [f"- {md_text(change)}" for change in report.changes if report.problems]
    if why:
        blocks.append(Block(("**Why**", ""), tuple(why), unit="line(s)"))
    if report.comparisons:
        rows = comparison_rows(report.comparisons)
        blocks.append(
            Block(
                (
                    f"<details><summary>All {len(rows)} comparison(s), slices included</summary>",
                    "",
                    "| " + " | ".join(HEADERS) + " |",
                    "|" + "---|" * len(HEADERS),
                ),
                tuple(_md_row(row) for row in rows),
                ("", "</details>"),
            )
        )
    blocks += [flip_block(f, ids_shown) for f in flips]
    return blocks


def step_summary(
    report: GateReport,
    title: str,
    *,
    flips: Sequence[ExampleFlips] = (),
    report_url: str | None = None,
    limit: int = SUMMARY_LIMIT,
) -> str:
    """The job summary's Markdown: the verdict first, cut to ``limit`` bytes with a note."""
    whole = (
        "The HTML report and JUnit hold it whole."
        if report_url
        else "Write it whole with --markdown, --junit or --html."
    )
    return fit(report_blocks(report, title, flips=flips, report_url=report_url), limit, whole=whole)


def comment_marker(command: str, model: str | None, evalsets: Sequence[str] = ()) -> str:
    """The comment's hidden first line: the same for every push of one pull request's check.

    ``<!-- evalsentry:MODEL -->`` for ``evaluate`` of a model line (``:e1,e2`` when evalsets
    were chosen), ``<!-- evalsentry-gate -->`` (``:MODEL``, ``/EVALSET``) for ``gate``. Model
    and evalset names are checked names: letters, digits, ``.``, ``_`` and ``-``.
    """
    if command == "evaluate":
        key = f"evalsentry:{model}" + (f":{','.join(sorted(evalsets))}" if evalsets else "")
    else:
        key = "evalsentry-gate" + (f":{model}" if model else "")
        key += f"/{evalsets[0]}" if evalsets else ""
    return f"<!-- {key} -->"


def pr_comment(
    report: GateReport,
    title: str,
    marker: str,
    *,
    flips: Sequence[ExampleFlips] = (),
    report_url: str | None = None,
    run_url: str | None = None,
    limit: int = COMMENT_LIMIT,
) -> str:
    """The pull request comment: ``marker`` first, the verdict, cut to ``limit`` bytes.

    A workflow posts it once and, on each later push, finds it by ``marker`` and replaces its
    body, so the pull request carries one current verdict.
    """
    footer = "<sub>evalsentry updates this comment on each push" + (
        f" · [this run]({_url(run_url)})</sub>\n" if run_url else "</sub>\n"
    )
    whole = (
        "The job summary and the HTML report hold more."
        if report_url
        else "The job summary holds more."
    )
    blocks = report_blocks(report, title, flips=flips, report_url=report_url, ids_shown=COMMENT_IDS)
    body = fit(blocks, limit - _size(marker) - 1, whole=whole, footer=footer)
    return f"{marker}\n{body}"


def error_report(message: str, title: str) -> tuple[str, str]:
    """Markdown and an annotation for a command that could not gate at all (exit 2)."""
    markdown = (
        f"## {VERDICT_MARK[Verdict.ERROR]} · evalsentry: {md_text(title)}\n\n"
        f"**Not evaluated: {md_text(message)}**\n\n"
        "Nothing was gated, so nothing passed: the check fails until this is fixed.\n\n"
    )
    return markdown, workflow_command("error", message, title=f"evalsentry ERROR: {title}")


def run_url(environ: Mapping[str, str]) -> str | None:
    """The link to this CI run: GitHub's workflow run, else GitLab's job; None elsewhere."""
    parts = [
        environ.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    ]
    if all(parts):
        return f"{parts[0]}/{parts[1]}/actions/runs/{parts[2]}"
    return environ.get("CI_JOB_URL") or None
