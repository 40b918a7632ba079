"""profile: a registered version's serving profile, batch size by batch size."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evalsentry.cli import ci
from evalsentry.cli._app import ConfigOption, app
from evalsentry.cli.output import echo, print_table
from evalsentry.errors import UsageError

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.evaluation.profile import BatchProfile, ServingProfile

HEADERS = ["batch", "calls", "examples/s", "p50 ms", "p95 ms", "p99 ms", "per 1M requests"]
#: Added for a token evalset: real (unpadded) tokens served per second, and their price.
TOKEN_HEADERS = ["tokens/s", "per 1M tokens"]


@app.command()
def profile(
    model: Annotated[str, typer.Option(help="The model line.")],
    version: Annotated[int, typer.Option(help="The registered version (a serving variant too).")],
    evalset: Annotated[
        str | None, typer.Option(help="Whose inputs it serves (default: the line's first).")
    ] = None,
    batch_sizes: Annotated[
        str, typer.Option("--batch-sizes", help="Batch sizes, comma-separated.")
    ] = "1,8,32,128",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    budget_s: Annotated[
        float, typer.Option("--budget-s", help="Seconds of timed calls, shared by the sizes.")
    ] = 10.0,
    config: ConfigOption = None,
) -> None:
    """Serve a version's evalset inputs at each batch size: throughput, latency p50/p95/p99.

    In the evaluation's child process, as the checkpoint is evaluated (a variant with its
    transform). With `traffic.<line>.latency_p99_ms`, names the cheapest batch size within
    it, and exits 1 when none is; the cost per 1M requests is at `cost.per_device_hour`.
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.evaluation.candidate import candidate_evalsets
    from evalsentry.evaluation.isolation import request_isolated
    from evalsentry.evaluation.pipeline import Target
    from evalsentry.evaluation.timing import load_arguments_of

    sizes = _sizes(batch_sizes)
    if budget_s <= 0:
        raise UsageError(f"--budget-s {budget_s:g}: give a positive number of seconds")
    settings, store = ci.project(config)
    target = Target.from_entry(Registry(settings.registry_url).show(model, version))
    name = candidate_evalsets(model, settings, store, [evalset] if evalset else None)[0]
    data = load_evalset(name, evalsets_dir=settings.evalsets_dir)
    answer = request_isolated(
        "profile", target.uri, load_arguments_of(target, settings), data, device=device,
        timeout_s=settings.inference_timeout_s, batch_sizes=sizes, budget_s=budget_s,
    )  # fmt: skip
    found: ServingProfile = answer.result
    price = settings.cost.per_device_hour.get(found.device.split(":", maxsplit=1)[0])
    rows = [_row(b, price, settings.cost.currency) for b in found.batches]
    headers = HEADERS + (TOKEN_HEADERS if found.batches[0].tokens is not None else [])
    print_table(f"Serving profile of {target.label} on {name} ({found.device})", headers, rows)
    raise typer.Exit(_verdict(found, target.uri, model, settings))


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise UsageError(f"--batch-sizes {text!r}: give distinct whole numbers of at least 1, such as 1,8,32,128")  # fmt: skip
    return sizes


def _row(batch: BatchProfile, price: float | None, currency: str) -> list[str]:
    from evalsentry.cost.units import money

    def per_million(per_s: float) -> str:
        return money(1e6 / per_s / 3600 * price, currency) if price else "n/a"

    latencies = [_ms(batch.latency_ms(q)) for q in (50, 95, 99)]
    row = [str(batch.batch_size), str(len(batch.seconds)), f"{batch.throughput:,.0f}", *latencies, per_million(batch.throughput)]  # fmt: skip
    tokens = batch.tokens_per_s
    return row + ([] if tokens is None else [f"{tokens:,.0f}", per_million(tokens)])


def _ms(value: float) -> str:
    """Milliseconds to 3 significant digits, whole ones from 1,000 (``1,410``, not ``1.41e+03``)."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def _verdict(found: ServingProfile, uri: str, model: str, settings: Config) -> int:
    """What the profile says, in lines; 1 when no batch size meets the line's p99 budget."""
    from evalsentry.cost.units import money
    from evalsentry.errors import readable_bytes
    from evalsentry.evaluation.timing import serving_bill

    peak = readable_bytes(found.peak_memory_bytes) if found.peak_memory_bytes else "n/a"
    on_disk = readable_bytes(Path(uri).stat().st_size) if Path(uri).is_file() else "n/a"
    where = "the device's peak allocation" if found.device.startswith("cuda") else "the evaluation process's peak RSS"  # fmt: skip
    echo(f"size on disk: {on_disk}; peak memory: {peak} ({where})")
    traffic = settings.traffic.get(model)
    budget = traffic.latency_p99_ms if traffic is not None else None
    best = found.cheapest(budget)
    if best is None:
        echo(f"no batch size serves within p99 {budget:g} ms (traffic.{model}.latency_p99_ms)")
        return 1
    said = f"within p99 {budget:g} ms" if budget is not None else "with no latency budget set"
    echo(f"cheapest batch size {said}: {best.batch_size} ({best.throughput:,.0f} examples/s, p99 {_ms(best.latency_ms(99))} ms)")  # fmt: skip
    bill = serving_bill(settings, model, found.device)
    if bill is not None:
        month = money(bill.month(1 / best.throughput), settings.cost.currency)
        echo(f"at {bill.requests_per_day:,.0f} requests/day: {month}/month")
    if budget is None:
        echo(f"set traffic.{model}.latency_p99_ms to find the cheapest batch size within a latency budget")  # fmt: skip
    return 0
