"""The weekly flow's evaluations on a Dask cluster of processes give the thread runner's results."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from evalsentry.config import load_config
from evalsentry.history import History
from evalsentry.registry import Registry
from flows.weekly_eval import weekly_eval


def _metrics(config: Path) -> pd.DataFrame:
    history = History(load_config(config).store_url)
    evaluations = history.evaluations()
    metrics = history.metrics(evaluations["evaluation_id"]).merge(
        evaluations[["evaluation_id", "model"]], on="evaluation_id", suffixes=("_m", "")
    )
    return metrics.sort_values(["model", "metric", "slice"])[
        ["model", "metric", "slice", "value", "ci_low", "ci_high"]
    ]


def test_dask_local_cluster_matches_the_thread_runner(
    tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """Two stores, one run each way: every metric value and interval is identical."""
    configs = {}
    for runner in ("thread", "dask"):
        folder = tmp_path / runner
        folder.mkdir()
        config = folder / "evalsentry.yaml"
        config.write_text(f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n")
        registry = Registry(load_config(config).registry_url)
        registry.register(toy_checkpoints["good"], "good", stage="production")
        registry.register(toy_checkpoints["degraded"], "degraded", stage="production")
        state = weekly_eval(
            week="2026-W40", config=str(config), task_runner=runner, return_state=True
        )
        assert state.is_completed(), state.message
        configs[runner] = config
    thread, dask = _metrics(configs["thread"]), _metrics(configs["dask"])
    assert len(thread) > 0
    pd.testing.assert_frame_equal(thread.reset_index(drop=True), dask.reset_index(drop=True))


def test_unknown_task_runner_fails_the_run(toy_project: Path) -> None:
    """A task runner other than thread or dask is refused with a clear message."""
    state = weekly_eval(
        week="2026-W40", config=str(toy_project), task_runner="ray", return_state=True
    )
    assert state.is_failed() and "use thread or dask" in state.message
