"""register and registry list|show|promote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from evalsentry.cli._app import (
    ConfigOption,
    _config,
    _json_arg,
    _print_table,
    _registry,
    app,
    registry_app,
)
from evalsentry.errors import UsageError


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
    """Register a checkpoint: pin its sha256, size and model factory, record its lineage.

    The model is rebuilt now, as evaluation will: only by a factory in trusted_factories.
    """
    from evalsentry.registry import Registry

    if factory_kwargs is not None and factory is None:
        raise UsageError(
            "--factory-kwargs: given without --factory, it would be ignored; pass both "
            "(the kwargs are those of --factory)"
        )
    settings = _config(config)
    entry = Registry(settings.registry_url).register(
        checkpoint,
        model,
        trust=settings.trust,
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
    """List registered versions with their stage, pinned factory and lineage."""
    entries = _registry(config).list(model)
    rows = [
        [
            e.ref,
            e.stage,
            e.lineage["model"]["factory"],
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
    columns = [
        "version",
        "stage",
        "factory",
        "sha256",
        "git",
        "data",
        "seed",
        "trained",
        "registered",
    ]
    _print_table("Registered checkpoints", columns, rows)


@registry_app.command("show")
def registry_show(
    model: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[int | None, typer.Option(help="Version number.")] = None,
    stage: Annotated[str | None, typer.Option(help="Newest version in this stage.")] = None,
    config: ConfigOption = None,
) -> None:
    """Print one registry entry as JSON (default: the newest version).

    lineage.model is what evaluation runs: the factory and kwargs pinned at registration.
    """
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
