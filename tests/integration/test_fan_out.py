"""A fanned-out week on a real server: the parent on `default`, its children shared by the workers
of the `fan-out` queue, one child at a time each, all on this one host."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsentry.checkpoints.registry import Registry
from tests.integration.prefect_server import (
    SHARED_WORKER,
    read_week,
    trigger,
    wait_queue_ready,
    workers,
)
from tests.models import TRUST, TRUSTED_YAML

pytestmark = pytest.mark.integration

FAN_OUT = {name: ["--work-queue", "fan-out", "--limit", "1"] for name in ("gpu-a", "gpu-b")}


def fan_out_project(tmp_path: Path, toy_evalset: Path, checkpoints: dict[str, Path]) -> Path:
    """A project with two production model lines per toy checkpoint: four children a week."""
    config = tmp_path / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
    )
    registry = Registry(str(tmp_path / "registry"))
    for name, path in checkpoints.items():
        for line in (1, 2):
            registry.register(path, f"{name}-{line}", stage="production", trust=TRUST)
    return config


def test_fan_out_spreads_the_children_over_the_fan_out_workers(
    server: dict[str, str], tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """Each fan-out worker runs some of the week's children, none runs on the parent's worker (the
    shared server's, on `default`), and the parent gathers all four results under its run id and
    gates them."""
    from evalsentry.history.store import History

    config = fan_out_project(tmp_path, toy_evalset, toy_checkpoints)
    env = {**server, "PREFECT_WORKER_QUERY_SECONDS": "2"}
    with workers(env, tmp_path, FAN_OUT):
        wait_queue_ready(server, "gpu", "fan-out")
        week = read_week(server, trigger(server, "2026-W40", config, "--param", "fan_out=true"))
    assert week["state"] == "COMPLETED", week
    assert (week["worker"], week["queue"]) == (SHARED_WORKER, "default")
    children = week["children"]
    assert len(children) == 4 and {c["state"] for c in children} == {"COMPLETED"}, children
    assert {c["queue"] for c in children} == {"fan-out"}
    assert {c["worker"] for c in children} == set(FAN_OUT), children
    evaluations = History(str(tmp_path / "store")).evaluations()
    assert sorted(evaluations["model"]) == ["degraded-1", "degraded-2", "good-1", "good-2"]
    assert evaluations["run_id"].nunique() == 1  # the children recorded under the parent's run
