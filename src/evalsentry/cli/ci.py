"""The CI commands, ``evalsentry gate`` and ``evaluate``, on a lean path; the gate's output.

They run in every CI build, so their start-up is part of every build's wall time: they are
parsed with argparse and print plain text, importing neither Typer nor Rich (about 0.2 s of
imports and command building before anything runs). ``bench/bench_cold_start.py`` and
``bench/bench_candidate.py`` measure them. ``evalsentry --help`` lists them through forwarding
commands (``cli/results.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from evalsentry.cli.output import echo, print_table
from evalsentry.cli.review import (
    COMMENT_FILE,
    Output,
    Review,
    append_summary,
    reported,
    review_of,
    review_outputs,
    say_where,
    write_output,
)
from evalsentry.errors import EvalsentryError, UsageError
from evalsentry.names import NO_EVALSET

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evaluation.candidate import CandidateRun
    from evalsentry.gate.verdicts import GateReport
    from evalsentry.history.store import History

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
    parse.add_argument(
        "--without-suspects",
        action="store_true",
        help="Also print the week's verdict with each evalset's label-error suspects left out, "
        "labelled as such, after the full one (which alone sets the exit code).",
    )
    parse.add_argument(
        "--without-leaks",
        metavar="TRAIN",
        help="Also print the week's verdict with the examples found in this training data "
        "(as evalset leak-check finds them) left out, labelled as such, after the full one.",
    )
    return _with_ci_options(parse)


def evaluate_parser() -> argparse.ArgumentParser:
    """The arguments of ``evalsentry evaluate``."""
    parse = argparse.ArgumentParser(
        prog="evalsentry evaluate", description=EVALUATE_HELP, epilog=EVALUATE_EPILOG
    )
    which = parse.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", metavar="FILE", type=Path, help="Checkpoint to evaluate.")
    which.add_argument(
        "--version",
        metavar="N",
        type=int,
        help="A registered version of MODEL to evaluate (a candidate, or a serving variant).",
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
        from evalsentry.weeks import check_week

        settings, history = project(args.config)
        week = check_week(args.week) if args.week is not None else None
        # Read before any verdict is printed: training data not there is one line, exit 2.
        without_leaks = args.without_leaks and leaks_left_out(args.without_leaks)
        report = _gate_week(history, settings, week, args)
        if review is not None:
            review = replace(review, title=f"{report.week} {title}")
        code = emit_gate(
            report,
            args.markdown,
            args.junit,
            args.slices,
            args.strict,
            review=review,
            history=history,
        )
        if args.without_suspects:
            print_without(
                settings, report, args, "label-error suspects", suspects_left_out(settings)
            )
        if without_leaks:
            what = f"examples in {args.without_leaks}"
            print_without(settings, report, args, what, without_leaks)
        return code


def evaluate(argv: Sequence[str]) -> int:
    """Run ``evalsentry evaluate`` with ``argv`` (its options); the exit code.

    Raises:
        EvalsentryError: unusable input (the caller prints its one line).
    """
    args = _parse(evaluate_parser(), argv)
    if isinstance(args, int):
        return args
    title = f"{args.model} candidate " + (
        args.checkpoint.name if args.checkpoint is not None else f"v{args.version}"
    )
    review = review_of(args, "evaluate", args.evalset or [], title)
    with reported(review):
        from evalsentry.evaluation.candidate import candidate_evalsets, evaluate_candidate

        settings, history = project(args.config)
        if args.checkpoint is None:
            args.checkpoint = registered_file(settings, args.model, args.version)
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


def registered_file(settings: Config, model: str, version: int) -> Path:
    """The file registered as ``model`` version ``version`` (a local registry's).

    Raises:
        NotRegistered, VersionNotRegistered: with a did-you-mean.
        UsageError: the file lives on remote storage (pass a local copy with --checkpoint).
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.errors import CheckpointChanged
    from evalsentry.storage import sha256_file

    entry = Registry(settings.registry_url).show(model, version)
    if "://" in entry.uri:
        raise UsageError(
            f"--version {version}: {entry.ref} is stored at {entry.uri}; copy it here and pass "
            "it with --checkpoint (evaluate reads a local file)"
        )
    path = Path(entry.uri)
    found = sha256_file(path)[0] if path.is_file() else None
    if found is not None and found != entry.sha256:
        raise CheckpointChanged(path, entry.sha256, found)
    return path


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
    from evalsentry.history.store import History

    settings = settings_of(config)
    history = History(settings.store_url)
    history.check_root()
    return settings, history


def candidate_html(history: History, run: CandidateRun, report: GateReport) -> str:
    """The candidate's HTML report (``--html``)."""
    from evalsentry.reports.candidate_report import render_candidate

    return render_candidate(history, run, report)


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
    from evalsentry.reports.report import HEADERS, comparison_rows, gate_junit, gate_markdown

    if strict and not report.strict:
        report = replace(report, strict=True)
    outputs: list[Output] = [
        ("--markdown", markdown, gate_markdown),
        ("--junit", junit, gate_junit),
    ]
    if html is not None:
        outputs.append(("--html", *html))
    summary = None
    if review is not None:
        summary = review_outputs(report, review, history, outputs)
    for option, path, render in outputs:
        if path is not None:
            write_output(option, path, render(report))
    if summary is not None:
        append_summary(summary)
    if review is not None:
        say_where(review, summary)

    shown = [c for c in report.comparisons if show_slices or not c.slice]
    print_table(f"evalsentry gate {report.week}: {report.verdict}", HEADERS, comparison_rows(shown))
    if review is not None and review.github:
        from evalsentry.reports.ci_github import workflow_annotations

        for line in workflow_annotations(report):
            echo(line)
    if report.exit_code:
        echo("error: " + report.message().replace("\n", "\n  "), err=True)
    else:
        echo(report.message())
    return int(report.exit_code)


#: What an evalset's left-out examples are: their ids, and a line saying how many and why.
LeftOut = Callable[["Evalset"], tuple[set[str], str]]


def suspects_left_out(settings: Config) -> LeftOut:
    """Each evalset's label-error suspects (``--without-suspects``)."""

    def left_out(evalset: Evalset) -> tuple[set[str], str]:
        from evalsentry.gate.suspects import find_suspects
        from evalsentry.history.store import History

        found = find_suspects(History(settings.store_url), evalset)
        ids = {s.example_id for s in found.suspects}
        return ids, (
            f"{len(ids):,} of {found.examples:,} examples of {found.evalset} left out "
            f"({found.method}, from {len(found.checkpoints)} checkpoint(s))"
        )

    return left_out


def leaks_left_out(train: str) -> LeftOut:
    """Each evalset's examples found in the training data at ``train`` (``--without-leaks``).

    The training data is read now, once for every evalset.

    Raises:
        EvalsetError: nothing at ``train``, or files that cannot be read.
    """
    from evalsentry.evalsets.leaks import check_leaks, read_training

    table = read_training(train)

    def left_out(evalset: Evalset) -> tuple[set[str], str]:
        found = check_leaks(evalset, train, table=table)
        ids = {leak.example_id for leak in found.leaks}
        return ids, f"{len(ids):,} of {found.examples:,} examples of {found.evalset} left out"

    return left_out


def print_without(
    settings: Config, full: GateReport, args: argparse.Namespace, what: str, find: LeftOut
) -> None:
    """The week's verdict with some examples of each evalset left out, labelled as such.

    Printed after the full verdict, which stands: it alone sets the exit code and is recorded.
    An evalset whose examples cannot be found (no probabilities, other inputs) is left whole.
    """
    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.gate.suspects import HistoryWithout
    from evalsentry.reports.report import HEADERS, comparison_rows

    excluded: dict[str, set[str]] = {}
    for name in sorted({c.evalset for c in full.comparisons} - {NO_EVALSET}):
        try:
            excluded[name], said = find(load_evalset(name, evalsets_dir=settings.evalsets_dir))
        except EvalsentryError as exc:
            echo(f"without {what}: {name} is left whole ({exc})")
            continue
        echo(f"without {what}: {said}")
    report = _gate_week(HistoryWithout(settings.store_url, excluded), settings, full.week, args)
    shown = [c for c in report.comparisons if args.slices or not c.slice]
    title = f"evalsentry gate {report.week} WITHOUT {what} (the verdict above stands)"
    print_table(f"{title}: {report.verdict}", HEADERS, comparison_rows(shown))
    echo(f"without {what}: {report.message()}".replace("\n", "\n  "))


def _gate_week(
    history: History, settings: Config, week: str | None, args: argparse.Namespace
) -> GateReport:
    """``evalsentry gate``'s report of ``week`` from ``history``, as its options ask."""
    from evalsentry.gate.week import gate_week

    return gate_week(
        history,
        week,
        settings.gate,
        model=args.model,
        evalset=args.evalset,
        evalsets_dir=settings.evalsets_dir,
        drift=settings.drift,
        registry_url=settings.registry_url,
    )
