"""``evalsentry gate``, the CI regression gate, on a lean path; and the output of every gate.

The gate runs in every CI build, so its start-up is part of every build's wall time. This
command is parsed with argparse and prints plain text: it imports neither Typer nor Rich (tens
of milliseconds each before anything is gated) and reads the history once.
``bench/bench_cold_start.py`` measures it against the bare import of pandas and pyarrow.
``evalsentry --help`` lists it through a forwarding command (``cli/results.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evalsentry.cli.output import echo, print_table
from evalsentry.errors import UsageError

if TYPE_CHECKING:
    from evalsentry.verdicts import GateReport

HELP = "Gate a week's results against the previous week and the baseline (reads the history only)."
EPILOG = (
    "Exit 0 pass, warn or inconclusive; 1 a regression (or, with --strict, an inconclusive "
    "comparison); 2 not comparable or unusable input."
)
MARKDOWN_HELP = "Write a Markdown summary here."
JUNIT_HELP = "Write JUnit XML here."
SLICES_HELP = "Show per-slice comparisons too."
STRICT_HELP = "Exit 1 on INCONCLUSIVE too (the evalset could not tell); see gate.strict."
CONFIG_HELP = "evalsentry.yaml to use (default: ./evalsentry.yaml)."


def parser() -> argparse.ArgumentParser:
    """The arguments of ``evalsentry gate``."""
    parse = argparse.ArgumentParser(prog="evalsentry gate", description=HELP, epilog=EPILOG)
    parse.add_argument(
        "--week", metavar="WEEK", help="ISO week, e.g. 2026-W49 (default: the latest recorded)."
    )
    parse.add_argument("--model", metavar="NAME", help="Only this model.")
    parse.add_argument("--evalset", metavar="NAME", help="Only this evalset.")
    parse.add_argument("--junit", metavar="FILE", type=Path, help=JUNIT_HELP)
    parse.add_argument("--markdown", metavar="FILE", type=Path, help=MARKDOWN_HELP)
    parse.add_argument("--slices", action="store_true", help=SLICES_HELP)
    parse.add_argument("--strict", action="store_true", help=STRICT_HELP)
    parse.add_argument("--config", metavar="FILE", type=Path, help=CONFIG_HELP)
    return parse


def gate(argv: Sequence[str]) -> int:
    """Run ``evalsentry gate`` with ``argv`` (its options); the exit code.

    Raises:
        EvalsentryError: unusable input (the caller prints its one line).
    """
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    from evalsentry.config import load_config
    from evalsentry.gate import gate_week
    from evalsentry.history import History
    from evalsentry.weeks import check_week

    settings = load_config(args.config)
    history = History(settings.store_url)
    history.check_root()  # a `store:` naming a file fails here, before anything is read
    report = gate_week(
        history,
        check_week(args.week) if args.week is not None else None,
        settings.gate,
        model=args.model,
        evalset=args.evalset,
        evalsets_dir=settings.evalsets_dir,
    )
    return emit_gate(report, args.markdown, args.junit, args.slices, args.strict)


def emit_gate(
    report: GateReport,
    markdown: Path | None,
    junit: Path | None,
    show_slices: bool,
    strict: bool = False,
) -> int:
    """Write the CI files, print the table and the verdict; the gate's exit code.

    The files are written first, whole or not at all, their folders created as needed: a path
    that cannot be written is unusable input (exit 2), whatever the gate found. ``strict``
    (``--strict``, or ``gate.strict`` in the config) makes an INCONCLUSIVE verdict exit 1.
    """
    from dataclasses import replace

    from evalsentry.report import HEADERS, comparison_rows, gate_junit, gate_markdown
    from evalsentry.storage import filesystem, write_atomic

    if strict and not report.strict:
        report = replace(report, strict=True)
    for option, path, render in (
        ("--markdown", markdown, gate_markdown),
        ("--junit", junit, gate_junit),
    ):
        if path is None:
            continue
        fs, target = filesystem(str(path))
        try:
            write_atomic(fs, target, render(report).encode())
        except OSError as exc:
            blocked = isinstance(exc, FileExistsError | NotADirectoryError)
            reason = "a file stands where a folder is needed" if blocked else exc.strerror
            raise UsageError(
                f"{option} {path}: cannot write it ({reason or exc}); "
                "give a file path in a folder you can write to"
            ) from None
        # write_atomic's temporary file is private (0600); CI steps running as another user
        # read these files, so give them the mode a plain write would have had.
        umask = os.umask(0)
        os.umask(umask)
        with contextlib.suppress(OSError):
            Path(target).chmod(0o666 & ~umask)

    shown = [c for c in report.comparisons if show_slices or not c.slice]
    print_table(f"evalsentry gate {report.week}: {report.verdict}", HEADERS, comparison_rows(shown))
    if report.exit_code:
        echo("error: " + report.message().replace("\n", "\n  "), err=True)
    else:
        echo(report.message())
    return int(report.exit_code)
