"""The ``evalsentry`` command line: a thin shell over the library.

Exit codes: 0 ok, 1 a check failed (integrity, regression), 2 unusable input. User errors print
one line and no traceback. Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evalsentry.errors import EXIT_CHECK_FAILED, EXIT_USAGE, EvalsentryError, UsageError

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


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@evalset_app.command("freeze")
def evalset_freeze(
    source: Annotated[Path, typer.Argument(help="Parquet or CSV file with the rows to freeze.")],
    name: Annotated[str, typer.Option(help="Evalset name (its folder under evalsets/).")],
    task: Annotated[str, typer.Option(help="classification or regression.")],
    target: Annotated[str, typer.Option(help="Target column.")],
    inputs: Annotated[str, typer.Option(help="Feature columns (a,b,c), or one list column.")],
    shape: Annotated[
        str | None, typer.Option(help="Shape of one example of a list column, e.g. 1,8,8.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="Tensor dtype of a list column.")] = "float32",
    id_column: Annotated[
        str | None, typer.Option("--id", help="Id column (default: a deterministic one is added).")
    ] = None,
    slices: Annotated[
        str | None, typer.Option(help="Columns to report metrics per value of.")
    ] = None,
    version: Annotated[int, typer.Option(help="Version number recorded in the manifest.")] = 1,
    description: Annotated[str, typer.Option(help="What the data is.")] = "",
    provenance: Annotated[str, typer.Option(help="Where it comes from.")] = "",
    license_: Annotated[str, typer.Option("--license", help="Its license.")] = "",
    config: ConfigOption = None,
) -> None:
    """Freeze a dataset into a hash-pinned evalset with a generated expectation suite."""
    from evalsentry.evalsets import InputsSpec, freeze_evalset, read_source

    columns = _csv(inputs)
    try:
        spec_inputs = (
            InputsSpec(column=columns[0], shape=[int(d) for d in _csv(shape)], dtype=dtype)
            if shape
            else InputsSpec(columns=columns)
        )
    except ValueError as exc:
        raise UsageError(f"--inputs/--shape: {exc}".splitlines()[0]) from None
    if task not in ("classification", "regression"):
        raise UsageError(f"--task: {task!r} is not classification or regression")
    dest = Path(_config(config).evalsets_dir) / name
    spec = freeze_evalset(
        read_source(source),
        dest,
        name=name,
        task=task,  # type: ignore[arg-type]
        target=target,
        inputs=spec_inputs,
        id_column=id_column,
        slices=_csv(slices),
        version=version,
        description=description,
        provenance=provenance,
        license=license_,
    )
    typer.echo(f"froze {spec.name} v{spec.version}: {spec.num_rows} rows -> {dest}")
    typer.echo(f"evalset_sha256 {spec.evalset_sha256}")


@evalset_app.command("verify")
def evalset_verify(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    config: ConfigOption = None,
) -> None:
    """Re-hash every file and run the expectation suite; exit 1 if anything fails."""
    from evalsentry.evalsets import validate_evalset

    summary = validate_evalset(name, _config(config).evalsets_dir)
    rows = [
        [
            "ok" if o.success else "FAILED",
            o.expectation,
            o.column or "",
            _short(o.observed),
            "" if o.unexpected_count is None else o.unexpected_count,
            _short(o.unexpected_examples) if o.unexpected_examples else "",
        ]
        for o in summary.outcomes
    ]
    columns = ["", "expectation", "column", "observed", "unexpected", "examples"]
    _print_table(f"Evalset {name}: files match the manifest", columns, rows)
    if not summary.success:
        typer.echo(
            f"error: evalset {name!r} fails {summary.failed} of {summary.evaluated} expectations",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"evalset {name!r} verified: {summary.evaluated} expectations pass")


def _short(value: Any, width: int = 40) -> str:
    text = str(value) if value is not None else ""
    return text if len(text) <= width else text[: width - 1] + "…"


@evalset_app.command("list")
def evalset_list(config: ConfigOption = None) -> None:
    """List the evalsets with version, rows and identity hash."""
    from evalsentry.evalsets import list_evalsets, read_spec
    from evalsentry.storage import join

    root = _config(config).evalsets_dir
    specs = [read_spec(join(root, name)) for name in list_evalsets(root)]
    rows = [
        [s.name, s.version, s.task, s.num_rows, s.evalset_sha256[:12], s.frozen_at] for s in specs
    ]
    _print_table(
        f"Evalsets in {root}", ["name", "version", "task", "rows", "sha256", "frozen"], rows
    )


@evalset_app.command("show")
def evalset_show(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    config: ConfigOption = None,
) -> None:
    """Print an evalset's manifest."""
    from evalsentry.evalsets import evalset_folder, read_manifest_text

    typer.echo(read_manifest_text(evalset_folder(name, _config(config).evalsets_dir)), nl=False)


def _history(config: Path | None) -> tuple[Any, Any]:
    from evalsentry.history import History

    settings = _config(config)
    return settings, History(settings.store_url)


def _emit_gate(report: Any, markdown: Path | None, junit: Path | None, show_slices: bool) -> int:
    from evalsentry.report import HEADERS, comparison_rows, gate_junit, gate_markdown

    shown = [c for c in report.comparisons if show_slices or not c.slice]
    _print_table(
        f"evalsentry gate {report.week}: {report.verdict}", HEADERS, comparison_rows(shown)
    )
    if markdown is not None:
        markdown.write_text(gate_markdown(report), encoding="utf-8")
    if junit is not None:
        junit.write_text(gate_junit(report), encoding="utf-8")
    if report.exit_code:
        typer.echo("error: " + report.message().replace("\n", "\n  "), err=True)
    else:
        typer.echo(report.message())
    return int(report.exit_code)


MarkdownOption = Annotated[Path | None, typer.Option(help="Write a Markdown summary here.")]
JunitOption = Annotated[Path | None, typer.Option(help="Write JUnit XML here.")]
SlicesOption = Annotated[bool, typer.Option("--slices", help="Show per-slice comparisons too.")]


@app.command()
def gate(
    week: Annotated[
        str | None, typer.Option(help="ISO week, e.g. 2026-W49 (default: the latest recorded).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    evalset: Annotated[str | None, typer.Option(help="Only this evalset.")] = None,
    junit: JunitOption = None,
    markdown: MarkdownOption = None,
    slices: SlicesOption = False,
    config: ConfigOption = None,
) -> None:
    """Gate a week's results against the previous week and the baseline (reads the history only).

    Exit 0 pass or warn, 1 a regression, 2 not comparable or unusable input.
    """
    from evalsentry.gate import gate_week
    from evalsentry.names import check_week

    settings, history = _history(config)
    if week is None:
        weeks = history.evaluations(model=model, evalset=evalset, kind="scheduled")["week"]
        if weeks.empty:
            raise UsageError(
                f"{settings.store_url}: the history holds no weekly evaluation yet; run one first"
            )
        week = str(weeks.max())
    report = gate_week(
        history,
        check_week(week),
        settings.gate,
        model=model,
        evalset=evalset,
        evalsets_dir=settings.evalsets_dir,
    )
    raise typer.Exit(_emit_gate(report, markdown, junit, slices))


@app.command("evaluate")
def evaluate_command(
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint file to evaluate.")],
    model: Annotated[
        str, typer.Option(help="Model line to compare with (its latest production result).")
    ],
    evalset: Annotated[list[str] | None, typer.Option(help="Evalset(s) (default: all).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    junit: JunitOption = None,
    markdown: MarkdownOption = None,
    slices: SlicesOption = False,
    config: ConfigOption = None,
) -> None:
    """Evaluate a candidate checkpoint and gate it against production, for CI.

    The result is recorded as a candidate evaluation, never as a week's production result.
    Exit 0 pass or warn, 1 a regression, 2 not comparable or unusable input.
    """
    from evalsentry.cost import CostMeter
    from evalsentry.evalsets import check_evalset, list_evalsets, load_evalset
    from evalsentry.gate import GateReport, gate_candidate
    from evalsentry.history import iso_week
    from evalsentry.names import check_name
    from evalsentry.pipeline import Target, evaluate_checkpoint, new_run_id, record

    settings, history = _history(config)
    check_name("model", model)
    names = evalset or list_evalsets(settings.evalsets_dir)
    if not names:
        raise UsageError(f"{settings.evalsets_dir}: no evalsets found; freeze one first")
    run_id, week, meter, comparisons = new_run_id(), iso_week(), CostMeter(), []
    try:
        for name in names:
            summary = check_evalset(name, settings.evalsets_dir)
            loaded = load_evalset(name, evalsets_dir=settings.evalsets_dir)
            outcome = evaluate_checkpoint(
                Target(model, str(checkpoint.resolve())),
                loaded,
                config=settings,
                run_id=run_id,
                week=week,
                kind="candidate",
                device=device,
                meter=meter,
                validation=summary.to_dict(),
            )
            record(history, [outcome])
            if not outcome.ok:
                raise UsageError(str(outcome.evaluation["error"]))
            import pandas as pd

            report = gate_candidate(
                history,
                pd.Series(outcome.evaluation),
                settings.gate,
                evalsets_dir=settings.evalsets_dir,
            )
            comparisons += report.comparisons
    finally:
        meter.close()
    raise typer.Exit(_emit_gate(GateReport(week, comparisons), markdown, junit, slices))


history_app = typer.Typer(help="Show or maintain the metric history.", invoke_without_command=True)
app.add_typer(history_app, name="history")


@history_app.command("compact")
def history_compact(config: ConfigOption = None) -> None:
    """Merge each history table's small files into one (no row is dropped)."""
    _, store = _history(config)
    for table in ("evaluations", "metrics", "comparisons", "drift"):
        files, rows = store.compact(table)
        typer.echo(
            f"{table}: {files} file(s) -> 1 ({rows} rows)"
            if rows
            else f"{table}: nothing to compact"
        )


@history_app.callback()
def history(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    evalset: Annotated[str | None, typer.Option(help="Only this evalset.")] = None,
    metric: Annotated[str | None, typer.Option(help="Only this metric.")] = None,
    weeks: Annotated[int | None, typer.Option(help="Only the last N weeks.")] = None,
    output: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    config: ConfigOption = None,
) -> None:
    """Show recorded results, one row per week, model, evalset and metric."""
    if ctx.invoked_subcommand is not None:
        return
    _, store = _history(config)
    if output not in ("table", "csv", "json"):
        raise UsageError(f"--format: {output!r} is not table, csv or json")
    evaluations = store.evaluations(model=model, evalset=evalset)
    if weeks is not None and not evaluations.empty:
        keep = sorted(set(evaluations["week"]))[-weeks:]
        evaluations = evaluations[evaluations["week"].isin(keep)]
    metrics = store.metrics(evaluations["evaluation_id"]) if not evaluations.empty else None
    if metrics is None or metrics.empty:
        typer.echo("no results recorded yet", err=True)
        return
    metrics = metrics[metrics["slice"] == ""]
    if metric is not None:
        metrics = metrics[metrics["metric"] == metric]
    columns = [
        "week",
        "kind",
        "model",
        "version",
        "stage",
        "evalset",
        "metric",
        "value",
        "ci_low",
        "ci_high",
        "n",
        "status",
    ]
    joined = metrics.drop(columns=["week", "model", "evalset"]).merge(
        evaluations, on="evaluation_id"
    )[columns]
    joined = joined.sort_values(["week", "model", "evalset", "metric"])
    if output == "csv":
        typer.echo(joined.to_csv(index=False), nl=False)
    elif output == "json":
        typer.echo(joined.to_json(orient="records", indent=2))
    else:
        rows = [
            [*(str(v) for v in r[:7]), f"{r[7]:.4f}", f"[{r[8]:.4f}, {r[9]:.4f}]", r[10], r[11]]
            for r in joined.itertuples(index=False)
        ]
        _print_table("History", [*columns[:8], "95% CI", "n", "status"], rows)


@app.command()
def cost(
    weeks: Annotated[int | None, typer.Option(help="Only the last N weeks.")] = None,
    by: Annotated[str, typer.Option(help="Group by model, device or week.")] = "week",
    config: ConfigOption = None,
) -> None:
    """The bill: device-hours, kWh, kg CO2 and money per week, model or device, with totals."""
    from evalsentry.cost import ledger

    _, store = _history(config)
    evaluations = store.evaluations()
    if evaluations.empty:
        raise UsageError("the history holds no evaluation yet; nothing to bill")
    if weeks is not None:
        keep = sorted(set(evaluations["week"]))[-weeks:]
        evaluations = evaluations[evaluations["week"].isin(keep)]
    bill = ledger(evaluations, by)
    rows = [
        [
            getattr(r, by),
            r.evaluations,
            f"{r.device_hours:.4f}",
            f"{r.kwh:.3e}",
            f"{r.co2_kg:.3e}",
            f"{r.cost:.3g} {r.currency}",
        ]
        for r in bill.itertuples(index=False)
    ]
    _print_table(
        f"Cost by {by}", [by, "evaluations", "device-hours", "kWh", "kg CO2", "money"], rows
    )


@app.command()
def report(
    week: Annotated[
        str | None, typer.Option(help="ISO week (default: the latest recorded).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="HTML file to write (default: under the store).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Write one self-contained HTML report: trends, verdicts, slices, flips, drift, lineage, cost."""
    from evalsentry.html_report import render_report
    from evalsentry.names import check_week
    from evalsentry.storage import filesystem, join, write_atomic

    settings, store = _history(config)
    if week is None:
        recorded = store.evaluations(kind="scheduled")["week"]
        if recorded.empty:
            raise UsageError(f"{settings.store_url}: the history holds no weekly evaluation yet")
        week = str(recorded.max())
    html = render_report(store, check_week(week), settings)
    if out is not None:
        out.write_text(html, encoding="utf-8")
        target = str(out)
    else:
        fs, root = filesystem(settings.store_url)
        path = join(root, "reports", f"weekly-eval-{week}.html")
        write_atomic(fs, path, html.encode())
        target = fs.unstrip_protocol(path)
    typer.echo(f"report {week}: {target}")


@baseline_app.command("set")
def baseline_set(
    model: Annotated[str, typer.Option(help="Model line.")],
    week: Annotated[str, typer.Option(help="ISO week whose result becomes the baseline.")],
    config: ConfigOption = None,
) -> None:
    """Pin a recorded week as the baseline every later week is also compared with."""
    _, store = _history(config)
    store.set_baseline(model, week)
    typer.echo(f"baseline of {model} is now {week}")


@baseline_app.command("show")
def baseline_show(
    model: Annotated[str, typer.Option(help="Model line.")],
    config: ConfigOption = None,
) -> None:
    """Show the baseline week of a model line (pinned, or the first recorded week)."""
    _, store = _history(config)
    pinned = store.baseline_week(model)
    if pinned:
        typer.echo(f"{model}: baseline {pinned} (pinned)")
        return
    weeks = store.evaluations(model=model, kind="scheduled")["week"]
    if weeks.empty:
        raise UsageError(f"no evaluation of {model!r} is recorded yet")
    typer.echo(f"{model}: baseline {weeks.min()} (first recorded week)")


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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map evalsentry errors to one line on stderr and an exit code."""
    # Like `python -m`: the current folder is importable, so model factories and flows of the
    # project the command runs in resolve.
    # Library warnings (a checkpoint recorded as failed, an out-of-memory retry) go to stderr
    # only when asked for: a user error stays one line. EVALSENTRY_LOG_LEVEL=INFO shows them.
    handler = logging.StreamHandler()
    handler.setLevel(os.environ.get("EVALSENTRY_LOG_LEVEL", "ERROR").upper())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=handler.level, handlers=[handler])
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
