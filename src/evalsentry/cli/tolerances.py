"""tolerance suggest: tolerances from the spread of a model line's seed reruns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evalsentry.cli._app import ConfigOption, _config, app
from evalsentry.cli.output import echo, print_table
from evalsentry.errors import UsageError

if TYPE_CHECKING:
    from evalsentry.gate.retrains import Suggestion

tolerance_app = typer.Typer(
    help="Tolerances from what the line's retrains do.", no_args_is_help=True
)
app.add_typer(tolerance_app, name="tolerance")


@tolerance_app.command("suggest")
def tolerance_suggest(
    model: Annotated[str, typer.Option(help="The model line whose seed reruns to measure.")],
    probability: Annotated[
        float,
        typer.Option(help="How often an honest retrain should stay within the tolerance."),
    ] = 0.95,
    config: ConfigOption = None,
) -> None:
    """Measure the line's seed reruns and suggest a max_drop per evalset and metric.

    Seed reruns are registered versions whose lineage differs only in the seed (same code,
    data, config and factory): register a few for the purpose, let a weekly run (or
    `evalsentry evaluate`) evaluate them, then run this. It changes nothing: paste the printed
    `gate:` block into evalsentry.yaml if the numbers suit you.
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.gate.retrains import as_yaml, described, seed_reruns, suggest
    from evalsentry.history.store import History

    if not 0.5 < probability < 1:
        raise UsageError(f"--probability: {probability} is not between 0.5 and 1, e.g. 0.95")
    settings = _config(config)
    entries = Registry(settings.registry_url).list(model)
    reruns = seed_reruns(entries)
    if not reruns:
        raise UsageError(
            f"model {model!r}: no two of its {len(entries)} version(s) differ only in the seed; "
            "register seed reruns (the same code, data and config, trained with another seed) "
            "to measure what a retrain does"
        )
    found = suggest(settings, History(settings.store_url), model, reruns, probability)
    echo(
        f"evalsentry tolerance suggest {model}: {len(reruns)} seed reruns ({described(reruns)}); "
        f"an honest retrain stays within each suggestion with probability {probability:g}"
    )
    _print_suggestions(found)
    echo(f"paste into {Path(settings.trust.config_file).name} to use them (the larger of the two):")
    echo(as_yaml(found))


def _print_suggestions(found: list[Suggestion]) -> None:
    """One row per evalset and metric: the spread, the suggestion, what the evalset resolves."""
    print_table(
        "per evalset and metric (drops in the metric's own units):",
        [
            "evalset",
            "metric",
            "versions",
            "seed spread (sd)",
            "suggested max_drop",
            "evalset resolves",
            "configured",
        ],
        [
            [
                s.evalset,
                s.metric,
                len(s.values),
                f"{s.spread:.4g}",
                f"{s.suggested:.4g}",
                f"{s.resolvable:.4g}" if s.resolvable is not None else "unknown",
                s.configured,
            ]
            for s in found
        ],
    )
