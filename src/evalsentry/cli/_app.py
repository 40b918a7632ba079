"""The Typer application, its sub-commands' groups, and helpers the commands share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from evalsentry.cli.ci import CONFIG_HELP
from evalsentry.errors import UsageError

if TYPE_CHECKING:
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.config import Config

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
    typer.Option("--config", help=CONFIG_HELP),
]


def _config(path: Path | None) -> Config:
    from evalsentry.cli.ci import settings_of

    return settings_of(path)


def _registry(config: Path | None) -> Registry:
    from evalsentry.checkpoints.registry import Registry

    return Registry(_config(config).registry_url)


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


history_app = typer.Typer(help="Show or maintain the metric history.", invoke_without_command=True)
app.add_typer(history_app, name="history")
