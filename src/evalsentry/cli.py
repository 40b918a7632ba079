"""The ``evalsentry`` command line: a thin shell over the library.

Exit codes: 0 ok, 1 a check failed (integrity, regression), 2 unusable input. User errors print
one line and no traceback. Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evalsentry.errors import EXIT_USAGE, EvalsentryError, UsageError

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


@app.command()
def register(
    checkpoint: Annotated[Path, typer.Argument(help="Checkpoint file written by save_checkpoint.")],
    model: Annotated[
        str, typer.Option(help="Model name (the model line this version belongs to).")
    ],
    stage: Annotated[str, typer.Option(help="candidate, production or archived.")] = "candidate",
    factory: Annotated[
        str | None, typer.Option(help="package.module:callable, for checkpoints without one.")
    ] = None,
    factory_kwargs: Annotated[
        str | None, typer.Option(help="JSON keyword arguments for --factory.")
    ] = None,
    copy: Annotated[bool, typer.Option("--copy", help="Store a copy inside the registry.")] = False,
    config: ConfigOption = None,
) -> None:
    """Register a checkpoint: pin its sha256 and size, record its lineage."""
    entry = _registry(config).register(
        checkpoint,
        model,
        stage=stage,
        factory=factory,
        factory_kwargs=_json_arg(factory_kwargs, "--factory-kwargs"),
        copy=copy,
    )
    typer.echo(f"registered {entry.ref} ({entry.stage}) sha256 {entry.sha256[:12]} -> {entry.uri}")


@registry_app.command("list")
def registry_list(
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    config: ConfigOption = None,
) -> None:
    """List registered versions with their stage and lineage."""
    entries = _registry(config).list(model)
    rows = [
        [
            e.ref,
            e.stage,
            e.sha256[:12],
            str(e.lineage.get("git_sha", ""))[:10]
            + ("+dirty" if e.lineage.get("git_dirty") else ""),
            str(e.lineage.get("data_sha", ""))[:12],
            e.lineage.get("seed", ""),
            str(e.lineage.get("timestamp_utc", ""))[:19],
            e.registered_at[:19],
        ]
        for e in entries
    ]
    columns = ["version", "stage", "sha256", "git", "data", "seed", "trained", "registered"]
    _print_table("Registered checkpoints", columns, rows)


@registry_app.command("show")
def registry_show(
    model: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[int | None, typer.Option(help="Version number.")] = None,
    stage: Annotated[str | None, typer.Option(help="Newest version in this stage.")] = None,
    config: ConfigOption = None,
) -> None:
    """Print one registry entry as JSON (default: the newest version)."""
    registry = _registry(config)
    if version is not None:
        entry = registry.show(model, version)
    elif stage is not None:
        entry = registry.resolve(model, stage)
    else:
        entries = registry.list(model)
        if not entries:
            registry.show(model, 1)  # raises NotRegistered with a did-you-mean
        entry = entries[-1]
    typer.echo(json.dumps(entry.model_dump(mode="json"), indent=2, sort_keys=True))


@registry_app.command("promote")
def registry_promote(
    model: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[int, typer.Argument(help="Version number.")],
    stage: Annotated[str, typer.Option(help="Target stage.")] = "production",
    config: ConfigOption = None,
) -> None:
    """Move a version to a stage; promoting to production archives the previous one."""
    entry = _registry(config).promote(model, version, stage)
    typer.echo(f"{entry.ref} is now {entry.stage}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map evalsentry errors to one line on stderr and an exit code."""
    # Like `python -m`: the current folder is importable, so model factories and flows of the
    # project the command runs in resolve.
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        app(args=argv, prog_name="evalsentry")  # click's standalone mode ends in SystemExit
    except EvalsentryError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
