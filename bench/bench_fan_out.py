"""A fanned-out week against the same week on the thread runner, both as deployed runs.

    python -m bench.bench_fan_out [--rounds 3]

One real `prefect server` on this host with prefect.yaml deployed, a process worker on the `gpu`
pool's `default` queue and two on its `fan-out` queue with `--limit 1`, as the README sets them
up. Each round runs a 2-checkpoint week on the thread runner, then the same week fanned out (one
`evaluate-one` child flow run per checkpoint), each on a fresh project. A week's time is its
flow run's, Running to Completed, as the API records it; the median of each round's ratio is
quoted besides the medians, since this machine's speed drifts within minutes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.bench_scale import _project
from tests.integration.prefect_server import (
    prefect_server,
    read_week,
    trigger,
    wait_queue_ready,
    workers,
)

CHECKPOINTS = 2
WEEK = "2026-W40"
PARENT = {"parent": ["--work-queue", "default"]}
FAN_OUT = {name: ["--work-queue", "fan-out", "--limit", "1"] for name in ("fan-out-a", "fan-out-b")}
# as `make fan-out-worker` sets it: a free worker takes the next child within 5 s, not 10
FAN_OUT_ENV = {"PREFECT_WORKER_QUERY_SECONDS": "5"}


def _week(env: dict[str, str], root: Path, *extra: str) -> dict[str, Any]:
    """One deployed week on a fresh project; fails unless it and its children completed."""
    run = read_week(env, trigger(env, WEEK, _project(root, CHECKPOINTS), *extra), timeout_s=900)
    states = {run["state"], *(child["state"] for child in run["children"])}
    if states != {"COMPLETED"}:
        raise RuntimeError(f"week {run['name']} did not complete: {run}")
    return run


def run(rounds: int = 3) -> dict[str, float]:
    """Thread-runner and fanned-out weeks of 2 checkpoints, alternating, ``rounds`` of each."""
    weeks: dict[str, list[float]] = {"thread": [], "fan_out": []}
    children: list[float] = []
    latencies: list[float] = []
    spread: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with (
            prefect_server(root) as server,
            workers(server, root, PARENT),
            workers({**server, **FAN_OUT_ENV}, root, FAN_OUT),
        ):
            wait_queue_ready(server, "gpu", "fan-out")
            _week(server, root / "warm")  # the server's and the page cache's first run
            for i in range(rounds):
                thread = _week(server, root / f"thread-{i}")
                fan_out = _week(server, root / f"fan-out-{i}", "--param", "fan_out=true")
                weeks["thread"].append(thread["end"] - thread["start"])
                weeks["fan_out"].append(fan_out["end"] - fan_out["start"])
                children += [c["end"] - c["start"] for c in fan_out["children"]]
                latencies += [c["start"] - c["created"] for c in fan_out["children"]]
                spread.append(len({c["worker"] for c in fan_out["children"]}))
    ratios = [f / t for f, t in zip(weeks["fan_out"], weeks["thread"], strict=True)]
    thread_s, fan_out_s = statistics.median(weeks["thread"]), statistics.median(weeks["fan_out"])
    return {
        f"fan_out_week_{CHECKPOINTS}_checkpoints_thread_s": thread_s,
        f"fan_out_week_{CHECKPOINTS}_checkpoints_2_workers_s": fan_out_s,
        "fan_out_over_thread_median_of_rounds": statistics.median(ratios),
        "fan_out_over_thread_lowest_round": min(ratios),
        "fan_out_over_thread_highest_round": max(ratios),
        "fan_out_overhead_s": fan_out_s - thread_s,
        "fan_out_child_run_median_s": statistics.median(children),
        # created to Running: the worker's poll, a new process, its imports and pull step
        "fan_out_child_start_latency_median_s": statistics.median(latencies),
        "fan_out_rounds_both_workers_used": sum(n == 2 for n in spread),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for key, value in run(args.rounds).items():
        print(f"{key:48s} {value:10.3f}")
