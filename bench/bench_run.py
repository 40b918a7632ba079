"""Where the seconds of ``evalsentry run`` go around a one-checkpoint week of the digits example.

    python -m bench.bench_run [--rounds 2]

Three measurements, in one temporary project (the digits evalset, one registered checkpoint):

- ``evalsentry run`` with Prefect's temporary server (no ``PREFECT_API_URL``): wall and peak RSS;
- the same against a ``prefect server`` already running (started here, its start timed): wall and
  peak RSS;
- the peak resident memory of each process of a run against the running server, by role (the
  flow engine, its evaluation child), and of Prefect's temporary server (``bench.memory``);
- the running server's record of that flow run: its own span and each task's, summed by task
  name, so the command's seconds split into Python start-up and client set-up (wall minus the
  flow run), the flow engine (the flow run minus its tasks) and each task; the evaluation's own
  seconds come from the history.

Peak RSS is the largest single process of the command's tree (``os.wait4``); the server's own
process is not counted in the running-server case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.bench_candidate import REPO, project
from bench.bench_cold_start import timed
from bench.memory import tree_peaks
from evalsentry.checkpoints.registry import Registry
from evalsentry.history.store import History
from evalsentry.trust import Trust
from tests.integration.prefect_server import prefect_server

WEEK = "2026-W10"
#: The week after: a new production version, so the week's paired timing runs.
NEXT_WEEK = "2026-W11"

#: The last flow run on the server: its span and each task run's (name, seconds), as JSON.
_READ_SPANS = """
import json
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId
from prefect.client.schemas.sorting import FlowRunSort
with get_client(sync_client=True) as client:
    run = client.read_flow_runs(sort=FlowRunSort.START_TIME_DESC, limit=1)[0]
    tasks = client.read_task_runs(
        task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[run.id]))
    )
    print(json.dumps({
        "flow": (run.end_time - run.start_time).total_seconds(),
        "tasks": [[t.task_key.rsplit("-", 1)[0], (t.end_time - t.start_time).total_seconds()]
                  for t in tasks if t.start_time and t.end_time],
    }))
"""


def _project(root: Path) -> None:
    """The digits evalset and one registered production checkpoint of ``digits-cnn``."""
    checkpoint = project(root)
    settings = (root / "evalsentry.yaml").read_text()
    Registry(str(root / "registry")).add(
        checkpoint,
        "digits-cnn",
        trust=Trust(factories=("examples.digits.model",)),
        stage="production",
    )
    (root / "evalsentry.yaml").write_text(settings)


def _timed_week(root: Path, env: dict[str, str]) -> dict[str, float]:
    """A week with a new production version: its flow run, and the paired timing's share of it.

    The week without the timing is the same run less that task (it runs alone, after the
    evaluations: the thread runner submits one task at a time).
    """
    import torch

    from evalsentry.checkpoints.checkpoint import save_checkpoint
    from examples.digits.model import DigitsCNN

    torch.manual_seed(1)
    newer = save_checkpoint(
        DigitsCNN(channels=16),
        root / "v2.pt",
        metrics={},
        config={"bench": True, "seed": 1},
        seed=1,
        data=REPO / "examples" / "digits" / "data" / "train.parquet",
        factory="examples.digits.model:DigitsCNN",
        factory_kwargs={"channels": 16},
        git_sha="0" * 40,
    )
    registry = Registry(str(root / "registry"))
    entry = registry.add(
        newer, "digits-cnn", trust=Trust(factories=("examples.digits.model",)), stage="candidate"
    ).entry
    registry.promote("digits-cnn", entry.version, "production")
    command = [sys.executable, "-m", "evalsentry.cli", "run", "--week", NEXT_WEEK]
    wall, _ = timed(command, str(root), env=env)
    spans = _spans(env)
    timing = sum(v for k, v in spans.items() if k.replace("-", "_") == "time_against_previous_week")
    return {
        "run_timed_week_wall_s": wall,
        "run_timed_week_flow_s": spans["flow"],
        "run_timed_week_paired_timing_s": timing,
        "run_timed_week_without_timing_s": wall - timing,
        "run_timed_week_timing_share_of_wall": timing / wall,
    }


def _spans(env: dict[str, str]) -> dict[str, float]:
    """The last flow run's span and its tasks' summed seconds by task name."""
    out = subprocess.run(
        [sys.executable, "-c", _READ_SPANS], env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    spans: dict[str, float] = defaultdict(float)
    for name, seconds in found["tasks"]:
        spans[name] += seconds
    return {"flow": found["flow"], **spans}


def run(rounds: int = 2) -> dict[str, float]:
    """Median seconds and peak RSS of ``evalsentry run`` both ways, and where the seconds go."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _project(root)
        base = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        base.pop("PREFECT_API_URL", None)
        command = [sys.executable, "-m", "evalsentry.cli", "run", "--week", WEEK]
        temporary_env = {**base, "PREFECT_HOME": str(root / "temporary-home")}
        walls: dict[str, list[float]] = {"temporary": [], "running": []}
        peaks: dict[str, float] = {"temporary": 0.0, "running": 0.0}
        spans: dict[str, list[float]] = defaultdict(list)
        for _ in range(rounds):
            seconds, rss = timed(command, str(root), env=temporary_env)
            walls["temporary"].append(seconds)
            peaks["temporary"] = max(peaks["temporary"], rss)
        temporary = tree_peaks(command, str(root), temporary_env)
        results["run_temporary_server_process_peak_rss_mib"] = temporary["server"]
        (root / "server").mkdir()
        started = time.perf_counter()
        with prefect_server(root / "server", base, deploy=False) as env:
            results["run_server_start_s"] = time.perf_counter() - started
            for _ in range(rounds):
                seconds, rss = timed(command, str(root), env=env)
                walls["running"].append(seconds)
                peaks["running"] = max(peaks["running"], rss)
                for name, value in _spans(env).items():
                    spans[name].append(value)
            roles = tree_peaks(command, str(root), env)
            results.update(_timed_week(root, env))
        results["run_engine_peak_rss_mib"] = roles["engine"]
        results["run_evaluation_child_peak_rss_mib"] = roles["evaluation_child"]
        evaluation = History(str(root / "store")).evaluations(include_superseded=True)["wall_s"]
    for kind, values in walls.items():
        results[f"run_{kind}_server_wall_s"] = statistics.median(values)
        results[f"run_{kind}_server_peak_rss_mib"] = peaks[kind]
    flow = statistics.median(spans.pop("flow"))
    tasks = {name: statistics.median(values) for name, values in spans.items()}
    results["run_startup_and_client_s"] = results["run_running_server_wall_s"] - flow
    # Tasks of a week run one after another (the thread runner submits one evaluation at a time).
    results["run_flow_engine_s"] = flow - sum(tasks.values())
    for name, seconds in sorted(tasks.items(), key=lambda item: -item[1]):
        results[f"run_task_{name.replace('-', '_')}_s"] = seconds
    results["run_evaluation_s"] = float(statistics.median(evaluation))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for key, value in run(args.rounds).items():
        print(f"{key:45s} {value:10.3f}")
