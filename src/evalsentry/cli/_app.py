"""The Typer application, its sub-commands' groups, and helpers the commands share."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evalsentry.errors import UsageError

app = typer.Typer(
    name="evalsentry",
    help="Weekly evaluation of registered PyTorch checkpoints, with a regression gate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
registry_app = typer.Typer(
    help="List, show and promote registered checkpoints.", no_args_is_help=True
)
app.add_typer(registry_app, name="registry")
evalset_app = typer.Typer(
    help="Freeze, verify, list and show evaluation sets.", no_args_is_help=True
)
app.add_typer(evalset_app, name="evalset")
baseline_app = typer.Typer(
    help="Pin or show the baseline week of a model line.", no_args_is_help=True
)
app.add_typer(baseline_app, name="baseline")

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="evalsentry.yaml to use (default: ./evalsentry.yaml)."),
]


def _config(path: Path | None) -> Any:
    from evalsentry.config import load_config

    return load_config(path)


def _registry(config: Path | None) -> Any:
    from evalsentry.registry import Registry

    return Registry(_config(config).registry_url)


def _print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    # Wide when piped, so tables in logs and CI output are not cut.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _json_arg(value: str | None, option: str) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{option}: not valid JSON ({exc.msg}); e.g. '{{\"channels\": 16}}'"
        ) from None
    if not isinstance(parsed, dict):
        raise UsageError(f"{option}: expected a JSON object of keyword arguments")
    return parsed


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _short(value: Any, width: int = 40) -> str:
    text = str(value) if value is not None else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _history(config: Path | None) -> tuple[Any, Any]:
    from evalsentry.history import History

    settings = _config(config)
    history = History(settings.store_url)
    history.check_root()  # a `store:` naming a file fails here, before any evaluation runs
    return settings, history


def _emit_gate(
    report: Any,
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

    from rich.markup import escape

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
    # Rich reads "[half=even]" in a slice's name as markup and would drop it.
    rows = [[escape(cell) for cell in row] for row in comparison_rows(shown)]
    _print_table(f"evalsentry gate {report.week}: {report.verdict}", HEADERS, rows)
    if report.exit_code:
        typer.echo("error: " + report.message().replace("\n", "\n  "), err=True)
    else:
        typer.echo(report.message())
    return int(report.exit_code)


MarkdownOption = Annotated[Path | None, typer.Option(help="Write a Markdown summary here.")]
JunitOption = Annotated[Path | None, typer.Option(help="Write JUnit XML here.")]
SlicesOption = Annotated[bool, typer.Option("--slices", help="Show per-slice comparisons too.")]
StrictOption = Annotated[
    bool,
    typer.Option(
        "--strict", help="Exit 1 on INCONCLUSIVE too (the evalset could not tell); see gate.strict."
    ),
]


history_app = typer.Typer(help="Show or maintain the metric history.", invoke_without_command=True)
app.add_typer(history_app, name="history")
