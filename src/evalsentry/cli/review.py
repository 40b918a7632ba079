"""The pull request's outputs of the CI commands: where each goes, and an error as one.

``evalsentry gate`` and ``evaluate`` write them beside their JUnit and Markdown files: the
comment file (``--comment``) and, with ``--github``, the job summary and annotations. What
they say is rendered by :mod:`evalsentry.reports.ci_github`; this module decides where they go.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evalsentry.cli.output import echo
from evalsentry.errors import EvalsentryError, UsageError

if TYPE_CHECKING:
    from evalsentry.gate.verdicts import GateReport
    from evalsentry.history.store import History

COMMENT_FILE = "pr-comment.md"
#: A CI output: its option, its path (None: not asked for) and what renders it.
Output = tuple[str, Path | None, Callable[["GateReport"], str]]


@dataclass(frozen=True)
class Review:
    """Where a pull request's reviewers read the verdict: GitHub's job summary, a comment file."""

    github: bool
    comment: Path | None
    marker: str
    title: str
    report_url: str | None = None


def review_of(
    args: argparse.Namespace, command: str, evalsets: Sequence[str], title: str
) -> Review | None:
    """The review outputs ``args`` of ``command`` ask for; None for none.

    ``--github`` (or GITHUB_ACTIONS=true, unless ``--no-github``) writes the comment to
    ``--comment``, else to ``$RUNNER_TEMP/pr-comment.md`` (``./pr-comment.md`` without it).
    The comment's marker names the command, ``--model`` and ``evalsets``.
    """
    github = args.github if args.github is not None else os.environ.get("GITHUB_ACTIONS") == "true"
    comment = args.comment
    if github and comment is None:
        comment = Path(os.environ.get("RUNNER_TEMP") or ".") / COMMENT_FILE
    if not github and comment is None:
        return None
    from evalsentry.reports.ci_github import comment_marker

    marker = comment_marker(command, args.model, evalsets)
    return Review(github, comment, marker, title, args.report_url)


@contextmanager
def reported(review: Review | None) -> Iterator[None]:
    """Run the command; an error that stops it is the review's ERROR too, then raised on.

    A pull request whose check could not gate at all then says so in its job summary, an
    annotation and its comment (replacing an earlier verdict), not only in the log.
    """
    try:
        yield
    except EvalsentryError as exc:
        if review is not None and not isinstance(exc, OutputNotWritten):
            _report_error(review, str(exc))
        raise


class OutputNotWritten(UsageError):
    """A CI output file could not be written (exit 2): not reported into the outputs again."""


def _report_error(review: Review, message: str) -> None:
    """The error as the review's outputs: summary, annotation and comment, as far as they go."""
    from evalsentry.reports.ci_github import error_report, run_url

    markdown, annotation = error_report(message, review.title)
    if review.github:
        echo(annotation)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with suppress(OSError), Path(summary).open("a", encoding="utf-8") as handle:
                handle.write(markdown)  # if not, the one-line error still says it all
    if review.comment is not None:
        link = run_url(os.environ)
        footer = f"<sub>[this run]({link})</sub>\n" if link else ""
        with suppress(OSError):
            _write(review.comment, f"{review.marker}\n{markdown}{footer}")


def _write(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all, creating its folders."""
    from evalsentry.storage import filesystem, write_atomic

    fs, target = filesystem(str(path))
    write_atomic(fs, target, text.encode())


def write_output(option: str, path: Path, text: str) -> None:
    """Write a CI output file; a path that cannot be written is unusable input (exit 2)."""
    try:
        _write(path, text)
    except OSError as exc:
        blocked = isinstance(exc, FileExistsError | NotADirectoryError)
        reason = "a file stands where a folder is needed" if blocked else exc.strerror
        raise OutputNotWritten(
            f"{option} {path}: cannot write it ({reason or exc}); "
            "give a file path in a folder you can write to"
        ) from None


def review_outputs(
    report: GateReport,
    review: Review,
    history: History | None,
    outputs: list[Output],
) -> Callable[[int], str] | None:
    """Add the comment to ``outputs``; the job summary's renderer (given its byte budget)."""
    from evalsentry.gate.flips import report_flips
    from evalsentry.reports.ci_github import pr_comment, run_url, step_summary

    flips = report_flips(history, report.comparisons) if history is not None else []
    if review.comment is not None:
        comment = pr_comment(
            report,
            review.title,
            review.marker,
            flips=flips,
            report_url=review.report_url,
            run_url=run_url(os.environ),
        )
        outputs.append(("--comment", review.comment, lambda _: comment))
    if not review.github:
        return None
    return lambda limit: step_summary(
        report, review.title, flips=flips, report_url=review.report_url, limit=limit
    )


def append_summary(render: Callable[[int], str]) -> None:
    """Append the job summary to ``$GITHUB_STEP_SUMMARY``, within what the step has left."""
    from evalsentry.reports.ci_github import SUMMARY_FLOOR, SUMMARY_LIMIT

    where = os.environ.get("GITHUB_STEP_SUMMARY")
    if not where:
        return
    path = Path(where)
    try:
        used = path.stat().st_size if path.exists() else 0
        text = render(max(SUMMARY_LIMIT - used, SUMMARY_FLOOR))
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise OutputNotWritten(
            f"GITHUB_STEP_SUMMARY {path}: cannot append the job summary to it "
            f"({exc.strerror or exc}); run it in a GitHub Actions step, or pass --no-github"
        ) from None


def say_where(review: Review, summary: Callable[[int], str] | None) -> None:
    """One line per review output: where it went, or why it did not."""
    if summary is not None:
        where = os.environ.get("GITHUB_STEP_SUMMARY")
        echo(
            f"job summary: appended to {where}"
            if where
            else "job summary: not written (GITHUB_STEP_SUMMARY is not set)"
        )
    if review.comment is not None:
        echo(f"comment: {review.comment} (first line {review.marker})")
