"""The three-week story on the shipped digits data, end to end (`make demo`).

Week 1: the first model is in production; its result becomes the baseline.
Week 2: a good retrain is promoted; the gate compares it with week 1 and finds no regression
        (accuracy PASSes; nll is INCONCLUSIVE, unresolved: 719 rows cannot show a retrain's
        loss within 10% of 0.067, which the week reads as PASS and reports without failing).
Week 3: a retrain on mislabelled data (a broken labelling batch on three classes) is promoted;
        the weekly flow run ends Failed and names the drop.

Every week also compares a live sample of "production" inputs (real digits with a changed
class mix and scanner noise, `live/week-sample.parquet`) with the frozen evalset: the drift is
reported (WARN/FAIL verdicts and events) without failing the run.
"""

from __future__ import annotations

import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.runs import outcome_line
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.weeks import iso_week, now_utc
from examples.digits.train import train

EVALSETS = Path(__file__).parents[2] / "evalsets"
LIVE_SAMPLE = Path(__file__).parent / "live" / "week-sample.parquet"
MODEL = "digits"
TRUSTED_MODULE = "examples.digits.model"  # the one module whose models the demo may build


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def tell_story(folder: Path) -> list[tuple[str, Any]]:
    """Train, register and run the three weeks in a fresh ``folder``; return (week, state) pairs."""
    folder = folder.resolve()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = folder / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {EVALSETS}\n"
        f"trusted_factories: [{TRUSTED_MODULE}]\n"
        f"drift:\n  live:\n    digits: {LIVE_SAMPLE}\n"
        # Pixels: the share of bright ones is a feature worth watching besides the defaults.
        "  features:\n    digits: [mean, std, min, max, share_above_half_max]\n"
        # What the lifetime bill needs beyond the meters: expected traffic, declared costs.
        "traffic:\n  digits:\n    requests_per_day: 1000000\n"
        "cost:\n  recurring:\n"
        "    - {name: labelling refresh, amount: 20, per: month, model: digits}\n"
        "    - {name: monitoring, amount: 5, per: month}\n"
    )
    settings = load_config(config)
    registry = Registry(settings.registry_url)

    _say("Training three checkpoints on the shipped digits data")
    checkpoints = folder / "checkpoints"
    rates = settings.cost  # the demo project's rates price its training runs too
    first = train(checkpoints / "digits-1.pt", seed=1, rates=rates)
    retrain = train(checkpoints / "digits-2.pt", seed=2, rates=rates)
    broken = train(
        checkpoints / "digits-3.pt",
        seed=3,
        corrupt_classes=(3, 5, 8),
        corrupt_fraction=0.6,
        rates=rates,
    )
    registry.register(first, MODEL, trust=settings.trust, stage="production")
    registry.register(retrain, MODEL, trust=settings.trust)
    registry.register(broken, MODEL, trust=settings.trust)

    weeks = [iso_week(now_utc() - timedelta(days=7 * back)) for back in (2, 1, 0)]
    results = []
    for number, (week, version) in enumerate(zip(weeks, (1, 2, 3), strict=True), start=1):
        registry.promote(MODEL, version, "production")
        _say(f"Week {number} ({week}): {MODEL}@v{version} in production")
        state = weekly_eval(
            week=week,
            models=[MODEL],
            stages=("production",),
            config_path=str(config),
            return_state=True,
        )
        print(outcome_line(state))
        results.append((week, state))
    return results


def run_demo(folder: Path) -> int:
    """Tell the story and summarise it; return 0 when it ends as it should (Failed in week 3)."""
    start = time.perf_counter()
    results = tell_story(folder)
    caught = [state.is_failed() for _, state in results] == [False, False, True]
    config = folder.resolve() / "evalsentry.yaml"
    _say("Summary")
    for week, state in results:
        print(f"  weekly-eval-{week}: {state.name}")
    print(
        f"\n  The regression in {results[-1][0]} was {'caught' if caught else 'NOT caught as expected'}."
    )
    reports = folder.resolve() / "store" / "reports"
    print(f"  Report:   {reports / f'weekly-eval-{results[-1][0]}.html'} (the week's latest run)")
    print(f"  Each run: {reports}/weekly-eval-<week>-<kind>-<run id>.html")
    print(f"  Registry: evalsentry registry list --config {config}")
    print(f"  History:  evalsentry history --config {config} --metric accuracy")
    print(f"  Gate:     evalsentry gate --config {config}")
    print(f"  Bill:     evalsentry cost --config {config} --by week")
    print(f"  Lifetime: evalsentry cost --config {config} --lifetime")
    print(f"  Took {time.perf_counter() - start:.0f} s.")
    return 0 if caught else 1
