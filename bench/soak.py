"""Soak: 52 consecutive weekly runs (backfills) of the weekly-eval flow, 3 models, digits.

    python -m bench.soak [--weeks 52]

Checks that the history holds exactly the expected rows, that verdicts stay stable (the same
checkpoints every week: PASS with no flips), and that the gate's read time stays flat.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.gate.week import Verdict, gate_week
from evalsentry.history.store import History
from examples.digits.train import train

EVALSETS = Path(__file__).parents[1] / "evalsets"
MODELS = ("digits-a", "digits-b", "digits-c")


def run(weeks: int = 52) -> dict[str, float]:
    """Run the soak; raise if rows or verdicts are off; return timings."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "evalsentry.yaml"
        config.write_text(
            f"store: store\nregistry: registry\nevalsets: {EVALSETS}\n"
            "trusted_factories: [examples.digits.model]\n"
        )
        settings = load_config(config)
        registry = Registry(str(root / "registry"))
        for seed, model in enumerate(MODELS, start=1):
            registry.register(
                train(root / f"{model}.pt", seed=seed, epochs=5),
                model,
                stage="production",
                trust=settings.trust,
            )
        history = History(settings.store_url)
        run_times, gate_times, verdicts = [], [], []
        for week in range(1, weeks + 1):
            name = f"2025-W{week:02d}"
            start = time.perf_counter()
            state = weekly_eval(week=name, config_path=str(config), return_state=True)
            run_times.append(time.perf_counter() - start)
            if not state.is_completed():
                raise RuntimeError(f"{name}: {state.name} {state.message}")
            start = time.perf_counter()
            report = gate_week(history, name, settings.gate, evalsets_dir=settings.evalsets_dir)
            gate_times.append(time.perf_counter() - start)
            verdicts.append(report.verdict)
        rows = len(history.evaluations())
        if rows != weeks * len(MODELS):
            raise RuntimeError(f"expected {weeks * len(MODELS)} evaluation rows, found {rows}")
        if verdicts[0] != Verdict.BASELINE or any(v != Verdict.PASS for v in verdicts[1:]):
            raise RuntimeError(f"unstable verdicts: {verdicts}")
        flips = history.comparisons()["newly_wrong"].fillna(0).sum()
        if flips:
            raise RuntimeError(f"{flips} flips between identical checkpoints")
    head, tail = slice(1, 6), slice(-5, None)
    return {
        "soak_weeks": weeks,
        "soak_evaluation_rows": rows,
        "soak_run_s_first5": statistics.mean(run_times[head]),
        "soak_run_s_last5": statistics.mean(run_times[tail]),
        "soak_gate_s_first5": statistics.mean(gate_times[head]),
        "soak_gate_s_last5": statistics.mean(gate_times[tail]),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--weeks", type=int, default=52)
    args = parser.parse_args()
    for key, value in run(args.weeks).items():
        print(f"{key:28s} {value:10.3f}")
