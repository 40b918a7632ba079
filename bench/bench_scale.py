"""How a week's cost grows with checkpoints: one evalset load, verification and validation,
then one inference per checkpoint. And the Dask runner against the thread runner.

    python -m bench.bench_scale
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from evalsentry.checkpoint import save_checkpoint
from evalsentry.registry import Registry
from examples.digits.model import DigitsCNN
from examples.digits.train import DATA, FACTORY
from flows.weekly_eval import weekly_eval

EVALSETS = Path(__file__).parents[1] / "evalsets"


def _project(root: Path, checkpoints: int) -> Path:
    """A project with ``checkpoints`` production models (untrained weights: inference cost only)."""
    registry = Registry(str(root / "registry"))
    for i in range(checkpoints):
        torch.manual_seed(i)
        path = save_checkpoint(
            DigitsCNN(channels=64, hidden=256),
            root / f"m{i}.pt",
            metrics={},
            config={},
            seed=i,
            data=DATA,
            factory=FACTORY,
            factory_kwargs={"channels": 64, "hidden": 256},
            git_sha="bench",
        )
        registry.register(path, f"model-{i}", stage="production")
    config = root / "evalsentry.yaml"
    config.write_text(f"store: store\nregistry: registry\nevalsets: {EVALSETS}\n")
    return config


def _week(config: Path, runner: str) -> float:
    start = time.perf_counter()
    state = weekly_eval(week="2026-W40", config=str(config), task_runner=runner, return_state=True)
    if not state.is_completed():
        raise RuntimeError(state.message)
    return time.perf_counter() - start


def run(checkpoints: tuple[int, ...] = (1, 2, 4)) -> dict[str, float]:
    """Weekly-run time for N checkpoints x 1 evalset; thread vs Dask at the largest N."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        _week(_project(Path(tmp) / "warm", 1), "thread")  # imports, the temporary Prefect server
        for n in checkpoints:
            results[f"week_{n}_checkpoints_thread_s"] = _week(
                _project(Path(tmp) / f"n{n}", n), "thread"
            )
        largest = checkpoints[-1]
        results[f"week_{largest}_checkpoints_dask_s"] = _week(
            _project(Path(tmp) / "dask", largest), "dask"
        )
    first, last = checkpoints[0], checkpoints[-1]
    results["marginal_s_per_checkpoint"] = (
        results[f"week_{last}_checkpoints_thread_s"] - results[f"week_{first}_checkpoints_thread_s"]
    ) / max(1, last - first)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    for key, value in run(tuple(args.checkpoints)).items():
        print(f"{key:36s} {value:10.3f}")
