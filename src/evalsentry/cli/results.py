"""gate, evaluate, history, cost, report and baseline: reading and judging results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from evalsentry.cli import ci
from evalsentry.cli._app import (
    ConfigOption,
    app,
    baseline_app,
    history_app,
)
from evalsentry.cli.output import echo, print_table
from evalsentry.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.config import Config
    from evalsentry.history.store import History


def _forward(name: str, help_text: str, epilog: str) -> None:
    """List the CI command ``name`` in ``evalsentry --help``, forwarding to :mod:`.ci`.

    ``main`` runs the CI commands without Typer; this serves where the app is called directly.
    """

    def command(ctx: typer.Context) -> None:
        raise typer.Exit(ci.COMMANDS[name](ctx.args))

    app.command(
        name,
        help=f"{help_text}\n\n{epilog}",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(command)


_forward("gate", ci.GATE_HELP, ci.GATE_EPILOG)
_forward("evaluate", ci.EVALUATE_HELP, ci.EVALUATE_EPILOG)


@history_app.command("forget")
def history_forget(
    file: Annotated[str, typer.Argument(help="A history file, as an error named it.")],
    config: ConfigOption = None,
) -> None:
    """Drop a damaged or lost history file from the history; its rows leave every view.

    For a file the history refuses (missing, or changed since it was published) when no backup
    has it. The ledger records that it was dropped; run the week it held again.
    """
    from evalsentry.storage import filesystem

    _, store = ci.project(config)
    _, path = filesystem(file)
    entry = store.ledger.forget(path)
    echo(f"forgot {entry.file} (sha256 {entry.sha256[:12]}); run the week it held again")


@history_app.command("compact")
def history_compact(config: ConfigOption = None) -> None:
    """Merge each history table's small files into one (no row is dropped)."""
    _, store = ci.project(config)
    for table in ("evaluations", "metrics", "comparisons", "drift"):
        files, rows = store.compact(table)
        echo(
            f"{table}: {files} file(s) -> 1 ({rows} rows)"
            if rows
            else f"{table}: nothing to compact"
        )
    merged = store.ledger.compact()
    echo(f"ledger: {merged} file(s) -> 1" if merged > 1 else "ledger: nothing to compact")


def _last_weeks(evaluations: pd.DataFrame, weeks: int) -> pd.DataFrame:
    """The rows of the last ``weeks`` weeks that have any (ordered as dates, not as text)."""
    from evalsentry.weeks import weeks_in_order

    return evaluations[evaluations["week"].isin(weeks_in_order(evaluations["week"])[-weeks:])]


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
    """Show the current results, one row per week, model, evalset and metric.

    An evaluation that produced nothing (it failed, or could not run) is one row with its error.
    """
    if ctx.invoked_subcommand is not None:
        return
    from evalsentry.history.frames import records, results_view

    _, store = ci.project(config)
    if output not in ("table", "csv", "json"):
        raise UsageError(f"--format: {output!r} is not table, csv or json")
    evaluations = store.evaluations(model=model, evalset=evalset)
    if weeks is not None:
        evaluations = _last_weeks(evaluations, weeks)
    joined = results_view(store, evaluations, metric)
    if joined.empty:
        echo("no results recorded yet", err=True)
        return
    if output == "csv":
        echo(joined.to_csv(index=False), nl=False)
    elif output == "json":
        echo(joined.to_json(orient="records", indent=2))
    else:
        shown = ["week", "kind", "model", "version", "stage", "evalset", "metric"]
        rows = [
            [
                *("-" if r[c] is None else str(r[c]) for c in shown),
                "" if r["value"] is None else f"{r['value']:.4f}",
                "" if r["ci_low"] is None else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]",
                "" if r["n"] is None else r["n"],
                r["status"] if r["status"] == "ok" else f"error: {r['error']}",
            ]
            for r in records(joined)
        ]
        print_table("History", [*shown, "value", "95% CI", "n", "status"], rows)


@app.command()
def cost(
    weeks: Annotated[int | None, typer.Option(help="Only the last N weeks.")] = None,
    by: Annotated[str, typer.Option(help="Group by model, device or week.")] = "week",
    lifetime: Annotated[
        bool,
        typer.Option(
            "--lifetime",
            help="Each model line's whole bill: training, evaluation, serving, declared costs.",
        ),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """The bill: evaluations' device time, energy, CO2 and money per week, model or device.

    With --lifetime, each model line's bill to date instead: training (from its checkpoints'
    lineage), evaluation, serving (its declared traffic at the measured cost per prediction) and
    the declared cost.recurring items, each part's share, and the serving forecast per month.
    """
    from evalsentry.cost import units
    from evalsentry.cost.meter import ledger

    settings, store = ci.project(config)
    if lifetime:
        _print_lifetime(settings, store)
        return
    evaluations = store.evaluations()
    if evaluations.empty:
        raise UsageError("the history holds no evaluation yet; nothing to bill")
    if weeks is not None:
        evaluations = _last_weeks(evaluations, weeks)
    bill = ledger(evaluations, by)
    with_tokens = bool(bill["tokens"].notna().any())
    rows = [
        [
            getattr(r, by),
            r.evaluations,
            units.device_hours(r.device_hours),
            units.energy(r.kwh),
            units.carbon(r.co2_kg),
            units.money(r.cost, r.currency),
            *(_token_cells(r) if with_tokens else ()),
        ]
        for r in bill.itertuples(index=False)
    ]
    columns = [by, "evaluations", "device time", "energy", "CO2", "money"]
    columns += ["tokens", "tokens/s", "per 1M tokens"] if with_tokens else []
    print_table(f"Cost by {by}", columns, rows)


def _token_cells(row: Any) -> list[str]:
    """A ledger row's tokens, tokens/s and money per 1M tokens; "-" where no row counted any."""
    from evalsentry.cost import units

    def known(value: float) -> bool:
        return not math.isnan(value)  # NaN: not a token task, which is not zero tokens

    return [
        units.count(row.tokens) if known(row.tokens) else "-",
        units.count(row.tokens_per_s) if known(row.tokens_per_s) else "-",
        (
            units.money(row.cost_per_million_tokens, row.currency)
            if known(row.cost_per_million_tokens)
            else "-"
        ),
    ]


def _print_lifetime(settings: Config, store: History) -> None:
    from evalsentry.reports.bill import lifetime, lifetime_table

    bill = lifetime(store, settings)
    if bill.empty:
        raise UsageError(
            "nothing to bill yet: no evaluation in the history, no training cost in the "
            "registry's lineage and no cost.recurring item"
        )
    print_table("Lifetime bill to date", *lifetime_table(bill.lines))
    for line in bill.lines:
        echo(line.in_words())
    for words in bill.levers:  # the serving variants weighed: what serving them would change
        echo(words)
    for note in bill.notes:
        echo(f"note: {note}")


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
    from evalsentry.gate.week import gate_week
    from evalsentry.reports.bill import lifetime
    from evalsentry.reports.html_report import render_report
    from evalsentry.storage import filesystem, join, probe_writable, write_atomic
    from evalsentry.weeks import check_week

    settings, store = ci.project(config)
    fs, root = filesystem(str(out.resolve()) if out is not None else settings.store_url)
    where = root if out is not None else join(root, "reports")
    folder = where.rsplit("/", 1)[0] if out is not None else where
    problem = "a folder stands there" if out is not None and out.is_dir() else None
    problem = problem or probe_writable(fs, folder)  # before the report is rendered, not after
    if problem:
        raise UsageError(
            f"{f'--out {out}' if out is not None else where}: cannot write the report there "
            f"({problem}); give a file path in a folder you can write to"
        )
    gated = gate_week(
        store,
        check_week(week) if week is not None else None,
        settings.gate,
        evalsets_dir=settings.evalsets_dir,
        drift=settings.drift,
        registry_url=settings.registry_url,
    )
    week = gated.week
    html = render_report(store, gated, bill=lifetime(store, settings, until=week))
    path = where if out is not None else join(where, f"weekly-eval-{week}.html")
    try:
        write_atomic(fs, path, html.encode())
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the report ({exc.strerror or exc})") from None
    echo(f"report {week}: {fs.unstrip_protocol(path) if out is None else out}")


@app.command("serve-reports")
def serve_reports(
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback: only this host's browser).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8470,
    config: ConfigOption = None,
) -> None:
    """Serve <store>/reports over HTTP, read-only, so the Prefect UI's report links open.

    The weekly run's link artifact points at http://127.0.0.1:8470/<report>, or under
    `reports_url` in evalsentry.yaml when you serve them elsewhere. Ctrl-C stops it.
    """
    from evalsentry.reports.serve import report_server
    from evalsentry.storage import filesystem, is_local, join

    settings, _ = ci.project(config)
    fs, root = filesystem(settings.store_url)
    if not is_local(fs):
        raise UsageError(
            f"{settings.store_url}: the store is not a local folder; its report links are "
            "presigned URLs (or set reports_url to where your web server publishes them)"
        )
    folder = Path(join(root, "reports"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        server = report_server(folder, host, port)
    except OSError as exc:
        raise UsageError(f"{host}:{port}: cannot listen there ({exc.strerror or exc})") from None
    echo(f"serving {folder} at http://{host}:{server.server_port}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@baseline_app.command("set")
def baseline_set(
    model: Annotated[str, typer.Option(help="Model line.")],
    week: Annotated[str, typer.Option(help="ISO week whose result becomes the baseline.")],
    config: ConfigOption = None,
) -> None:
    """Pin a recorded week as the baseline every later week is also compared with."""
    _, store = ci.project(config)
    store.set_baseline(model, week)
    echo(f"baseline of {model} is now {week}")


@baseline_app.command("show")
def baseline_show(
    model: Annotated[str, typer.Option(help="Model line.")],
    config: ConfigOption = None,
) -> None:
    """Show the baseline week of a model line (pinned, or the first recorded week)."""
    from evalsentry.names import WEEKLY_RUN

    _, store = ci.project(config)
    week, pinned = store.baseline(model, store.evaluations(model=model, kind=WEEKLY_RUN)["week"])
    if week is None:
        raise UsageError(f"no evaluation of {model!r} is recorded yet")
    echo(f"{model}: baseline {week} ({'pinned' if pinned else 'first recorded week'})")
