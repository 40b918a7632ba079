"""run and demo: starting the Prefect flows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalsentry.cli._app import (
    app,
)
from evalsentry.errors import EXIT_CHECK_FAILED


@app.command()
def run(
    week: Annotated[
        str | None, typer.Option(help="ISO week to run or backfill (default: this week).")
    ] = None,
    model: Annotated[list[str] | None, typer.Option(help="Only these models.")] = None,
    evalset: Annotated[list[str] | None, typer.Option(help="Only these evalsets.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    config: Annotated[Path, typer.Option("--config", help="evalsentry.yaml to use.")] = Path(
        "evalsentry.yaml"
    ),
) -> None:
    """Run the weekly-eval Prefect flow now (ephemeral Prefect unless PREFECT_API_URL is set).

    Exit 0 when the flow run Completed, 1 when it Failed (a regression or an error).
    """
    from evalsentry.names import check_week
    from evalsentry.orchestration import ensure_prefect_api, import_flow

    if week is not None:
        check_week(week)
    ensure_prefect_api()
    weekly_eval = import_flow("flows.weekly_eval", "weekly_eval")
    state = weekly_eval(
        week=week,
        models=model,
        evalsets=evalset,
        device=device,
        config=str(config),
        return_state=True,
    )
    typer.echo(f"flow run {state.name}: {state.message or ''}".rstrip(": "))
    raise typer.Exit(EXIT_CHECK_FAILED if state.is_failed() else 0)


@app.command()
def demo(
    folder: Annotated[
        Path, typer.Option("--dir", help="Fresh demo project folder (replaced).")
    ] = Path(".demo"),
) -> None:
    """Tell the whole story on the shipped digits example: three weeks, a caught regression."""
    from evalsentry.orchestration import ensure_prefect_api, import_flow

    ensure_prefect_api()
    story = import_flow("examples.digits.demo", "run_demo")
    raise typer.Exit(story(folder))
