"""import lm-eval, import inspect: a harness's per-example results recorded as a week's result."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evalsentry.cli import ci
from evalsentry.cli._app import ConfigOption, app
from evalsentry.cli.output import echo

if TYPE_CHECKING:
    from evalsentry.harnesses.run import HarnessRun

import_app = typer.Typer(
    help="Record an evaluation harness's per-example results as a week's evaluation.",
    no_args_is_help=True,
)
app.add_typer(import_app, name="import")

ModelOption = Annotated[
    str | None,
    typer.Option(help="Model line to record it under (default: the harness's model name)."),
]
EvalsetOption = Annotated[
    str | None, typer.Option(help="Evalset name (default: lm-eval.<task> or inspect.<task>).")
]
WeekOption = Annotated[
    str | None, typer.Option(help="ISO week, e.g. 2026-W49 (default: this one).")
]
ClusterOption = Annotated[
    str | None,
    typer.Option(
        help="Field whose equal values group examples (a shared passage): clustered tests."
    ),
]
AllowOption = Annotated[
    bool,
    typer.Option(
        "--allow-harness-change",
        help="Record it although the line's last result came from another harness version.",
    ),
]


@import_app.command("lm-eval")
def import_lm_eval(
    folder: Annotated[Path, typer.Argument(help="The run's folder (lm_eval --output_path).")],
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="A task of the run, or a task group (MMLU): its subtasks as one evalset with "
            "a slice per subtask. Repeat it for several, each its own evalset; needed when the "
            "run has several tasks."
        ),
    ] = None,
    filter_name: Annotated[
        str | None, typer.Option("--filter", help="The filter, when the task logs several.")
    ] = None,
    model: ModelOption = None,
    evalset: EvalsetOption = None,
    week: WeekOption = None,
    cluster: ClusterOption = None,
    allow_harness_change: AllowOption = False,
    config: ConfigOption = None,
) -> None:
    """Import a run of lm-evaluation-harness (lm_eval --log_samples), paired by doc_hash."""
    from evalsentry.errors import UsageError
    from evalsentry.harnesses.lm_eval_groups import read_lm_eval_tasks

    if evalset is not None and len(task or []) > 1:
        raise UsageError("--evalset names one evalset: give it with one --task, or leave it out")
    runs = read_lm_eval_tasks(folder, task or [], filter_name=filter_name, cluster=cluster)
    _record_all(runs, model, evalset, week, allow_harness_change, config)


@import_app.command("inspect")
def import_inspect(
    path: Annotated[str, typer.Argument(help="The Inspect log (.eval or .json; any fsspec URL).")],
    model: ModelOption = None,
    evalset: EvalsetOption = None,
    week: WeekOption = None,
    cluster: ClusterOption = None,
    allow_harness_change: AllowOption = False,
    config: ConfigOption = None,
) -> None:
    """Import an Inspect log, paired by sample id; epochs reduced as Inspect reduced them."""
    from evalsentry.harnesses.inspect_logs import read_inspect

    run = read_inspect(path, cluster=cluster)
    _record_all([run], model, evalset, week, allow_harness_change, config)


def _record_all(
    runs: list[HarnessRun],
    model: str | None,
    evalset: str | None,
    week: str | None,
    allow: bool,
    config: Path | None,
) -> None:
    """Record each run as the week's result of the line: all of them, or none if any is refused."""
    from evalsentry.harnesses.run import (
        check_same_harness,
        default_evalset,
        line_name,
        record_import,
    )
    from evalsentry.weeks import check_begun, iso_week

    settings, store = ci.project(config)
    week = check_begun(week) if week else iso_week()
    if not allow:
        for run in runs:
            line = model or line_name(run.model)
            check_same_harness(store, line, evalset or default_evalset(run), run)
    for run in runs:
        outcome = record_import(
            store, run, config=settings, model=model, evalset=evalset, week=week,
            allow_harness_change=allow,
        )  # fmt: skip
        row = outcome.evaluation
        metrics = outcome.metrics
        shown = ", ".join(f"{m['metric']} {m['value']:.4f}" for m in metrics if not m["slice"])
        echo(
            f"recorded {row['model']} v{row['version']} on {row['evalset']} in {row['week']}: "
            f"{row['n_examples']} examples, {shown} (from {run.harness} {run.harness_version}"
            f"{_absent(run)})"
        )
        for note in run.notes:
            echo(f"  note: {note}")


def _absent(run: HarnessRun) -> str:
    """``; no tokens or cost in its log``: what the bill will lack, said once at import."""
    missing = [
        name for name, value in (("tokens", run.input_tokens), ("cost", run.money)) if value is None
    ]
    return f"; no {' or '.join(missing)} in its log" if missing else ""


@import_app.command("pickup")
def import_pickup(
    week: WeekOption = None,
    model: Annotated[list[str] | None, typer.Option(help="Only these lines of imports:.")] = None,
    config: ConfigOption = None,
) -> None:
    """The import-results flow's pick-up, here: each `imports:` line's new run, then the gate.

    A run already in the history is skipped; of the new runs the newest becomes the week's
    result of its line. Then the week is gated for those lines. Exits as the flow ends: 1 on a
    FAIL, 2 on an ERROR or a run found but not importable, else 0.
    """
    from evalsentry.errors import UsageError
    from evalsentry.gate.week import gate_project_week
    from evalsentry.harnesses.pickup import IMPORT, REFUSED, import_found, plan_imports
    from evalsentry.weeks import check_begun, iso_week

    settings, store = ci.project(config)
    if not settings.imports:
        raise UsageError(
            f"{settings.trust.config_file}: imports: lists no line; add one (see the README, "
            "Weekly pick-up) or import a run by hand with `evalsentry import lm-eval|inspect`"
        )
    week = check_begun(week) if week else iso_week()
    found = plan_imports(store, settings, model)
    for item in found:
        if item.action == IMPORT:
            echo(f"imported {import_found(store, item, settings, week).describe()}")
        else:
            echo(item.describe())
    report = gate_project_week(store, week, settings, model or sorted(settings.imports))
    echo(report.headline())
    refused = any(item.action == REFUSED for item in found)
    raise typer.Exit(report.exit_code if report.failed or not refused else 2)
