"""run and demo: starting the Prefect flows."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evalsentry.cli._app import ConfigOption, _config, app
from evalsentry.cli.output import echo

if TYPE_CHECKING:
    from evalsentry.config import Config


@app.command()
def run(
    week: Annotated[
        str | None, typer.Option(help="ISO week to run or backfill (default: this week).")
    ] = None,
    model: Annotated[list[str] | None, typer.Option(help="Only these models.")] = None,
    evalset: Annotated[list[str] | None, typer.Option(help="Only these evalsets.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    config: ConfigOption = None,
) -> None:
    """Run the weekly-eval Prefect flow now (ephemeral Prefect unless PREFECT_API_URL is set).

    Exits as `evalsentry gate` would on the week: 0 when the flow run Completed, 1 when it
    Failed on a regression, 2 on an ERROR, when it did not finish (crashed, cancelled), when
    there is nothing to evaluate (an empty registry, a mistyped model) or the input is unusable.
    """
    from evalsentry.weeks import check_begun

    if week is not None:
        check_begun(week)
    raise typer.Exit(_run_weeks(_config(config), [week], model, evalset, device))


@app.command()
def backfill(
    weeks: Annotated[
        str, typer.Argument(help="FROM..TO, e.g. 2026-W40..2026-W44 (both included).")
    ],
    model: Annotated[list[str] | None, typer.Option(help="Only these models.")] = None,
    evalset: Annotated[list[str] | None, typer.Option(help="Only these evalsets.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    config: ConfigOption = None,
) -> None:
    """Run the weekly-eval flow for each week from FROM to TO, one after another, in week order.

    Each week is recorded before the next starts, so each is gated against the latest earlier
    week with a result, as a weekly schedule would have gated it. Prints each week's verdict;
    exits with the worst week's code (as `evalsentry gate`: 0, 1 or 2).
    """
    from evalsentry.weeks import week_span

    listed = week_span(weeks)
    raise typer.Exit(_run_weeks(_config(config), listed, model, evalset, device))


def _run_weeks(
    settings: Config,
    weeks: Sequence[str | None],
    models: list[str] | None,
    evalsets: list[str] | None,
    device: str,
) -> int:
    """Run the weekly flow for each week in turn (None: this week); the worst exit code."""
    from evalsentry.evaluation.orchestration import ensure_prefect_api, import_flow

    temporary = ensure_prefect_api()
    _something_to_evaluate(settings, models, evalsets)
    if temporary:
        import_flow("evalsentry.flows.temporary_server", "tie_temporary_server")()
    weekly_eval = import_flow("evalsentry.flows.weekly_eval", "weekly_eval")
    outcome_line = import_flow("evalsentry.flows.runs", "outcome_line")
    exit_code = import_flow("evalsentry.flows.runs", "exit_code")
    worst = 0
    for week in weeks:
        state = weekly_eval(
            week=week,
            models=models,
            evalsets=evalsets,
            device=device,
            config_path=settings.trust.config_file,
            return_state=True,
        )
        echo(outcome_line(state))
        worst = max(worst, exit_code(state))
    return worst


def _something_to_evaluate(
    settings: Config, models: list[str] | None, evalsets: list[str] | None
) -> None:
    """Refuse, before any Prefect server starts, a run that could record nothing.

    A store that cannot be written, no checkpoint to evaluate (an empty registry, a mistyped
    model), a binding to a missing evalset, an unknown ``--evalset``, or no checkpoint bound to
    any evalset of the run: the run's own plan (``planning.plan_week``), made here first. A
    tolerance finer than an evalset can certify is a warning on stderr, one line each; the run
    goes on.
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.errors import NothingToEvaluate, UsageError, did_you_mean
    from evalsentry.evalsets.evalset import list_evalsets
    from evalsentry.evaluation.pipeline import new_run_id
    from evalsentry.evaluation.planning import plan_week, tolerance_warnings
    from evalsentry.history.store import History
    from evalsentry.weeks import iso_week

    history = History(settings.store_url)
    history.check_writable()  # before any server starts or any model runs
    available = list_evalsets(settings.evalsets_dir)
    for name in evalsets or ():
        if name not in available:
            raise UsageError(
                f"--evalset {name!r}: no such evalset under {settings.evalsets_dir}."
                f"{did_you_mean(name, available)}"
            )
    plan = plan_week(
        settings,
        Registry(settings.registry_url),
        history,
        week=iso_week(),
        run_id=new_run_id(),
        models=models,
        evalsets=evalsets,
    )
    if not plan.pairs:
        raise NothingToEvaluate(str(plan.errors[0].evaluation["error"]))
    # Once the run will go on (a refusal stays one line). The flow logs them too, for the
    # Prefect UI; the terminal shows a flow's logs only from ERROR up.
    for line in tolerance_warnings(settings, sorted({name for _, name in plan.pairs})):
        echo(f"warning: {line}", err=True)


@app.command()
def demo(
    folder: Annotated[
        Path, typer.Option("--dir", help="Fresh demo project folder (replaced).")
    ] = Path(".demo"),
) -> None:
    """Tell the whole story on the shipped digits example: three weeks, a caught regression."""
    import importlib.util

    from evalsentry.errors import UsageError
    from evalsentry.evaluation.orchestration import ensure_prefect_api, import_flow
    from evalsentry.trust import import_path

    # The program imports from no working folder (see `entry`); the demo is the one command
    # that runs the repository's own example code, so a checkout's root joins the path, after
    # the standard library, when the demo is there.
    root = Path.cwd()
    if (root / "examples" / "digits" / "demo.py").is_file():
        sys.path[:] = import_path([str(root), *sys.path])
    try:
        found = importlib.util.find_spec("examples.digits.demo") is not None
    except ModuleNotFoundError:  # no `examples` package here at all
        found = False
    if not found:
        raise UsageError(
            "the demo tells its story on the digits example of the evalsentry repository: run "
            "`make demo` in a checkout of it; in your own project start with `evalsentry init`"
        )
    if ensure_prefect_api():
        import_flow("evalsentry.flows.temporary_server", "tie_temporary_server")()
    story = import_flow("examples.digits.demo", "run_demo")
    raise typer.Exit(story(folder))
