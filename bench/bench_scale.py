"""How a week's cost grows with checkpoints: one evalset load, verification and validation,
then one inference per checkpoint. And the Dask runner against the thread runner.

    python -m bench.bench_scale

Dask is measured on the flow's own ``local_cluster`` of two single-threaded worker processes,
already running (as a real deployment's would be), on a synthetic 20k-image evalset so inference
dominates; the thread runner does the same week on the same data, in rounds that alternate the
two. Besides whole weeks, it reports the evaluations' own span (first start to last finish, as
the history records them), which the fixed costs of a week (validation, gate, report) leave out.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.flows.dask_cluster import local_cluster
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.trust import Trust
from examples.digits.model import DigitsCNN
from examples.digits.train import DATA, FACTORY

TRUSTED_MODULE = "examples.digits.model"  # where DigitsCNN is defined
TRUST = Trust([TRUSTED_MODULE])

EVALSETS = Path(__file__).parents[1] / "evalsets"


def _synthetic_evalsets(root: Path, rows: int = 20_000) -> Path:
    """An evalsets folder with one digits-shaped synthetic evalset of ``rows`` images."""
    import numpy as np
    import pyarrow as pa

    from evalsentry.evalsets.evalset import InputsSpec
    from evalsentry.evalsets.freeze import freeze_evalset

    rng = np.random.default_rng(0)
    values = (rng.random(rows * 64, dtype=np.float32) * 16).astype(np.float32)
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(values), 64),
            "y": rng.integers(0, 10, rows),
        }
    )
    freeze_evalset(
        table,
        root / "synthetic",
        name="synthetic",
        task="classification",
        target="y",
        inputs=InputsSpec(column="x", shape=[1, 8, 8]),
        classes=list(range(10)),
    )
    return root


def _project(root: Path, checkpoints: int, evalsets: Path = EVALSETS) -> Path:
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
            git_sha="0" * 40,  # a hex digest, as lineage requires: no commit made these weights
        )
        registry.register(path, f"model-{i}", stage="production", trust=TRUST)
    config = root / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {evalsets}\n"
        f"trusted_factories: [{TRUSTED_MODULE}]\n"
    )
    return config


def _week(config: Path, runner: str, address: str | None = None) -> float:
    start = time.perf_counter()
    state = weekly_eval(
        week="2026-W40",
        config_path=str(config),
        task_runner=runner,
        dask_address=address,
        return_state=True,
    )
    if not state.is_completed():
        raise RuntimeError(state.message)
    return time.perf_counter() - start


def _evaluation_span(config: Path) -> float:
    """Seconds from the week's first evaluation start to its last finish, from the history."""
    from evalsentry.config import load_config
    from evalsentry.history.store import History

    frame = History(load_config(config).store_url).evaluations()
    return float((frame["finished_at"].max() - frame["started_at"].min()).total_seconds())


def _dask_vs_threads(root: Path, checkpoints: int, rounds: int = 5) -> dict[str, float]:
    """``rounds`` weeks each way, interleaved, since this machine's speed drifts by 30% and more."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    evalsets = _synthetic_evalsets(root / "evalsets")
    weeks: dict[str, list[float]] = {"thread": [], "dask": []}
    spans: dict[str, list[float]] = {"thread": [], "dask": []}
    # the flow heartbeat thread sleeps in whole seconds and is joined at exit, so it rounds each
    # run's end up to a second: off here, as in the tests, or it rounds the difference away
    with (
        temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
        local_cluster() as cluster,
    ):
        address = cluster.scheduler_address
        # a running cluster has done a week before: imports and energy trackers are warm
        _week(_project(root / "dask-warm", checkpoints, evalsets), "dask", address)
        for i in range(rounds):
            for runner in ("thread", "dask"):
                config = _project(root / f"{runner}-{i}", checkpoints, evalsets)
                weeks[runner].append(_week(config, runner, address if runner == "dask" else None))
                spans[runner].append(_evaluation_span(config))
    results = {}
    for name, values in (("week", weeks), ("evaluations", spans)):
        pairs = list(zip(values["dask"], values["thread"], strict=True))
        results[f"{name}_{checkpoints}_checkpoints_20k_thread_s"] = statistics.median(
            values["thread"]
        )
        results[f"{name}_{checkpoints}_checkpoints_20k_dask_2_workers_s"] = statistics.median(
            values["dask"]
        )
        # each round's two runs are adjacent in time: their ratio is what the machine's drift spares
        results[f"{name}_dask_over_thread_median_of_rounds"] = statistics.median(
            d / t for d, t in pairs
        )
        results[f"{name}_rounds_dask_faster"] = sum(d < t for d, t in pairs)
    return results


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
        results.update(_dask_vs_threads(Path(tmp), largest))
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
