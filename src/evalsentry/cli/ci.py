"""The CI commands, ``evalsentry gate`` and ``evaluate``, on a lean path; the gate's output.

They run in every CI build, so their start-up is part of every build's wall time: they are
parsed with argparse and print plain text, importing neither Typer nor Rich (about 0.2 s of
imports and command building before anything runs). ``bench/bench_cold_start.py`` and
``bench/bench_candidate.py`` measure them. ``evalsentry --help`` lists them through forwarding
commands (``cli/results.py``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from evalsentry.cli.output import echo, print_table
from evalsentry.errors import EvalsentryError, UsageError

if TYPE_CHECKING:
    from evalsentry.candidate import CandidateRun
    from evalsentry.config import Config
    from evalsentry.history import History
    from evalsentry.verdicts import GateReport

GATE_HELP = (
    "Gate a week's results against the previous week and the baseline (reads the history only)."
)
GATE_EPILOG = (
    "Exit 0 pass, warn or inconclusive; 1 a regression (or, with --strict, an inconclusive "
    "comparison); 2 not comparable or unusable input."
)
EVALUATE_HELP = (
    "Evaluate a candidate checkpoint and gate it against production and the baseline, for CI."
)
EVALUATE_EPILOG = (
    "The result is recorded as a candidate evaluation, never as a week's production result. "
    "Exit 0 pass or warn, 1 a regression, 2 not comparable or unusable input. In a pull "
    "request: see --github, and `evalsentry init --ci github` for a workflow."
)
MARKDOWN_HELP = "Write a Markdown summary here."
JUNIT_HELP = "Write JUnit XML here."
SLICES_HELP = "Show per-slice comparisons too."
STRICT_HELP = "Exit 1 on INCONCLUSIVE too (the evalset could not tell); see gate.strict."
CONFIG_HELP = (
    "evalsentry.yaml to use (default: the project's, in this folder or the nearest above it)."
)
GITHUB_HELP = (
    "GitHub Actions output (on by default where GITHUB_ACTIONS=true): append the verdict to "
    "$GITHUB_STEP_SUMMARY, print ::error/::warning annotations, and write the pull request "
    "comment (see --comment)."
)
COMMENT_FILE = "pr-comment.md"
COMMENT_HELP = (
    "Write the pull request (or merge request) comment here: Markdown whose first line is a "
    "hidden marker, the same on every push, to find the one comment to update by. With "
    f"--github it defaults to $RUNNER_TEMP/{COMMENT_FILE}, or ./{COMMENT_FILE} where "
    "RUNNER_TEMP is not set."
)
REPORT_URL_HELP = (
    "Link the job summary and the comment to the HTML report here (an artifact's URL, or the "
    "run's page)."
)
HTML_HELP = "Write the candidate's self-contained HTML report here (verdicts, flipped examples)."


def _with_ci_options(parse: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parse`` with the options every CI command has, after its own."""
    parse.add_argument("--junit", metavar="FILE", type=Path, help=JUNIT_HELP)
    parse.add_argument("--markdown", metavar="FILE", type=Path, help=MARKDOWN_HELP)
    parse.add_argument("--slices", action="store_true", help=SLICES_HELP)
    parse.add_argument("--strict", action="store_true", help=STRICT_HELP)
    parse.add_argument("--config", metavar="FILE", type=Path, help=CONFIG_HELP)
    parse.add_argument(
        "--github", action=argparse.BooleanOptionalAction, default=None, help=GITHUB_HELP
    )
    parse.add_argument("--comment", metavar="FILE", type=Path, help=COMMENT_HELP)
    parse.add_argument("--report-url", metavar="URL", help=REPORT_URL_HELP)
    return parse


def gate_parser() -> argparse.ArgumentParser:
    """The arguments of ``evalsentry gate``."""
    parse = argparse.ArgumentParser(
        prog="evalsentry gate", description=GATE_HELP, epilog=GATE_EPILOG
    )
    parse.add_argument(
        "--week", metavar="WEEK", help="ISO week, e.g. 2026-W49 (default: the latest recorded)."
    )
    parse.add_argument("--model", metavar="NAME", help="Only this model.")
    parse.add_argument("--evalset", metavar="NAME", help="Only this evalset.")
    return _with_ci_options(parse)


def evaluate_parser() -> argparse.ArgumentParser:
    """The arguments of ``evalsentry evaluate``."""
    parse = argparse.ArgumentParser(
        prog="evalsentry evaluate", description=EVALUATE_HELP, epilog=EVALUATE_EPILOG
    )
    parse.add_argument(
        "--checkpoint", metavar="FILE", type=Path, required=True, help="Checkpoint to evaluate."
    )
    parse.add_argument(
        "--model",
        metavar="NAME",
        required=True,
        help="Model line to compare with (its production result and baseline).",
    )
    parse.add_argument(
        "--evalset",
        metavar="NAME",
        action="append",
        help="Evalset of the model's binding; repeat for several (default: all it is bound to).",
    )
    parse.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N.")
    parse.add_argument(
        "--new-model",
        action="store_true",
        help="MODEL starts a new model line (else an unknown MODEL is refused).",
    )
    parse.add_argument(
        "--revalidate",
        action="store_true",
        help="Run the expectation suite even if a passed result for the same evalset, suite and "
        "Great Expectations version is stored (files are re-hashed either way).",
    )
    parse.add_argument("--html", metavar="FILE", type=Path, help=HTML_HELP)
    return _with_ci_options(parse)


def _parse(parse: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """The parsed options, or the exit code of ``--help`` (0) or a usage error (2), printed."""
    try:
        return parse.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def gate(argv: Sequence[str]) -> int:
    """Run ``evalsentry gate`` with ``argv`` (its options); the exit code.

    Raises:
        EvalsentryError: unusable input (the caller prints its one line).
    """
    args = _parse(gate_parser(), argv)
    if isinstance(args, int):
        return args
    title = (
        "gate"
        + (f" {args.model}" if args.model else "")
        + (f" on {args.evalset}" if args.evalset else "")
    )
    review = review_of(args, "gate", [args.evalset] if args.evalset else [], title)
    with reported(review):
        from evalsentry.gate import gate_week
        from evalsentry.weeks import check_week

        settings, history = project(args.config)
        report = gate_week(
            history,
            check_week(args.week) if args.week is not None else None,
            settings.gate,
            model=args.model,
            evalset=args.evalset,
            evalsets_dir=settings.evalsets_dir,
        )
        if review is not None:
            review = replace(review, title=f"{report.week} {title}")
        return emit_gate(
            report,
            args.markdown,
            args.junit,
            args.slices,
            args.strict,
            review=review,
            history=history,
        )


def evaluate(argv: Sequence[str]) -> int:
    """Run ``evalsentry evaluate`` with ``argv`` (its options); the exit code.

    Raises:
        EvalsentryError: unusable input (the caller prints its one line).
    """
    args = _parse(evaluate_parser(), argv)
    if isinstance(args, int):
        return args
    title = f"{args.model} candidate {args.checkpoint.name}"
    review = review_of(args, "evaluate", args.evalset or [], title)
    with reported(review):
        from evalsentry.candidate import candidate_evalsets, evaluate_candidate

        settings, history = project(args.config)
        names = candidate_evalsets(
            args.model, settings, history, args.evalset, new_model=args.new_model
        )
        run = evaluate_candidate(
            args.checkpoint,
            args.model,
            names,
            settings,
            history,
            device=args.device,
            strict=args.strict,
            revalidate=args.revalidate,
        )
        html = None
        if args.html is not None:
            html = (args.html, lambda report: candidate_html(history, run, report))
        return emit_gate(
            run.report,
            args.markdown,
            args.junit,
            args.slices,
            review=review,
            history=history,
            html=html,
        )


#: The commands ``evalsentry.cli.main`` runs without Typer, by name.
COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {"gate": gate, "evaluate": evaluate}


def settings_of(config: Path | None) -> Config:
    """The project's settings: ``--config``'s file, else the project's (found from here up).

    A ``--config`` that names no file is refused naming the option.
    """
    from evalsentry.config import load_config

    if config is not None and not config.exists():
        raise UsageError(f"--config {config}: file not found; give the project's evalsentry.yaml")
    return load_config(config)


def project(config: Path | None) -> tuple[Config, History]:
    """The project's settings and history; a ``store:`` naming a file fails here, first."""
    from evalsentry.history import History

    settings = settings_of(config)
    history = History(settings.store_url)
    history.check_root()
    return settings, history


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
    from evalsentry.ci_github import comment_marker

    marker = comment_marker(command, args.model, evalsets)
    return Review(github, comment, marker, title, args.report_url)


def candidate_html(history: History, run: CandidateRun, report: GateReport) -> str:
    """The candidate's HTML report (``--html``)."""
    from evalsentry.candidate_report import render_candidate

    return render_candidate(history, run, report)


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
    from evalsentry.ci_github import error_report, run_url

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


def _write_output(option: str, path: Path, text: str) -> None:
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


def emit_gate(
    report: GateReport,
    markdown: Path | None,
    junit: Path | None,
    show_slices: bool,
    strict: bool = False,
    *,
    review: Review | None = None,
    history: History | None = None,
    html: tuple[Path, Callable[[GateReport], str]] | None = None,
) -> int:
    """Write the CI files, print the table and the verdict; the gate's exit code.

    The files are written first, whole or not at all, their folders created as needed: a path
    that cannot be written is unusable input (exit 2), whatever the gate found. ``strict``
    (``--strict``, or ``gate.strict`` in the config) makes an INCONCLUSIVE verdict exit 1.
    ``review`` adds the pull request's outputs: the comment file, and on GitHub the job
    summary and annotations; ``history`` lists the flipped examples in them.
    """
    from evalsentry.report import HEADERS, comparison_rows, gate_junit, gate_markdown

    if strict and not report.strict:
        report = replace(report, strict=True)
    outputs: list[tuple[str, Path | None, Callable[[GateReport], str]]] = [
        ("--markdown", markdown, gate_markdown),
        ("--junit", junit, gate_junit),
    ]
    if html is not None:
        outputs.append(("--html", *html))
    summary = None
    if review is not None:
        summary = _review_outputs(report, review, history, outputs)
    for option, path, render in outputs:
        if path is not None:
            _write_output(option, path, render(report))
    if summary is not None:
        _append_summary(summary)
    if review is not None:
        _say_where(review, summary)

    shown = [c for c in report.comparisons if show_slices or not c.slice]
    print_table(f"evalsentry gate {report.week}: {report.verdict}", HEADERS, comparison_rows(shown))
    if review is not None and review.github:
        from evalsentry.ci_github import workflow_annotations

        for line in workflow_annotations(report):
            echo(line)
    if report.exit_code:
        echo("error: " + report.message().replace("\n", "\n  "), err=True)
    else:
        echo(report.message())
    return int(report.exit_code)


def _review_outputs(
    report: GateReport,
    review: Review,
    history: History | None,
    outputs: list[tuple[str, Path | None, Callable[[GateReport], str]]],
) -> Callable[[int], str] | None:
    """Add the comment to ``outputs``; the job summary's renderer (given its byte budget)."""
    from evalsentry.ci_github import pr_comment, run_url, step_summary
    from evalsentry.flips import report_flips

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


def _append_summary(render: Callable[[int], str]) -> None:
    """Append the job summary to ``$GITHUB_STEP_SUMMARY``, within what the step has left."""
    from evalsentry.ci_github import SUMMARY_FLOOR, SUMMARY_LIMIT

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


def _say_where(review: Review, summary: Callable[[int], str] | None) -> None:
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
