"""The weekly flow's evaluations on a Dask cluster of processes give the thread runner's results."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.dask_cluster import TRIM_ENV, WORKER_CONFIG, current_api_url, local_cluster
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from tests.flows.api import task_runs
from tests.models import TRUST, TRUSTED_YAML


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
    configs, states = {}, {}
    for runner in ("thread", "dask"):
        folder = tmp_path / runner
        folder.mkdir()
        config = folder / "evalsentry.yaml"
        config.write_text(
            f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
        )
        registry = Registry(load_config(config).registry_url)
        registry.register(toy_checkpoints["good"], "good", stage="production", trust=TRUST)
        registry.register(toy_checkpoints["degraded"], "degraded", stage="production", trust=TRUST)
        state = weekly_eval(
            week="2026-W40", config_path=str(config), task_runner=runner, return_state=True
        )
        assert state.is_completed(), state.message
        configs[runner], states[runner] = config, state
    thread, dask = _metrics(configs["thread"]), _metrics(configs["dask"])
    assert len(thread) > 0
    pd.testing.assert_frame_equal(thread.reset_index(drop=True), dask.reset_index(drop=True))
    # the workers reported their task runs to this run's API, under the weekly run itself
    runs = task_runs(states["dask"].state_details.flow_run_id)
    assert sorted(
        r.name for r in runs if r.name.startswith("evaluate-") and r.state.is_completed()
    ) == [
        "evaluate-degraded-v1-on-toy",
        "evaluate-good-v1-on-toy",
    ]


def test_local_cluster_workers_get_the_api_and_the_default_allocator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers see this process's Prefect API and no malloc trim threshold; our env is untouched."""
    from distributed import Client

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # as an earlier Dask cluster leaves it
    before = dict(os.environ)
    with local_cluster(n_workers=1) as cluster, Client(cluster) as client:
        seen = client.run(lambda: {k: os.environ.get(k) for k in ("PREFECT_API_URL", TRIM_ENV)})
    assert list(seen.values()) == [{"PREFECT_API_URL": current_api_url(), TRIM_ENV: None}]
    assert current_api_url().startswith("http://127.0.0.1:")
    assert dict(os.environ) == before


def test_shipped_worker_config_is_what_the_local_cluster_uses() -> None:
    """``flows/dask-worker.yaml`` (for clusters of your own) sets exactly WORKER_CONFIG."""
    import dask.config

    folder = Path(__file__).parents[2] / "flows"
    loaded = dask.config.collect(paths=[str(folder)], env={})
    assert {key: dask.config.get(key, config=loaded) for key in WORKER_CONFIG} == WORKER_CONFIG


def test_unknown_task_runner_fails_the_run(toy_project: Path) -> None:
    """A task runner other than thread or dask is refused by the parameter's enum."""
    state = weekly_eval(
        week="2026-W40",
        config_path=str(toy_project),
        task_runner="ray",  # type: ignore[arg-type]
        return_state=True,
    )
    assert state.is_failed() and "task_runner: Input should be 'thread' or 'dask'" in state.message
