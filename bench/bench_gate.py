"""The history's growth costs: append time and gate time at growing metric-row counts.

    python -m bench.bench_gate [--max-rows 1000000]

The history is filled with synthetic evaluations of 100 metric rows each, written in files of
many evaluations (as a compacted history would hold them), then two real weeks are appended and
gated. Also the cold start of `evalsentry gate` as a user runs it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from evalsentry.gate.week import gate_week
from evalsentry.history.schema import EVALUATIONS_SCHEMA, METRICS_SCHEMA
from evalsentry.history.store import History
from evalsentry.sections import GatePolicy
from tests.synthetic import accuracy_mask, record_week

ROWS_PER_EVALUATION = 100
EVALUATIONS_PER_FILE = 1000


def _fill(history: History, metric_rows: int) -> None:
    """Write ``metric_rows`` metric rows of old weeks for other models, in bulk files."""
    evaluations = metric_rows // ROWS_PER_EVALUATION
    for start in range(0, evaluations, EVALUATIONS_PER_FILE):
        count = min(EVALUATIONS_PER_FILE, evaluations - start)
        ids = [uuid.uuid4().hex for _ in range(count)]
        weeks = [f"2025-W{1 + (start + i) % 52:02d}" for i in range(count)]
        models = [f"model-{(start + i) % 97}" for i in range(count)]
        evaluation_rows = {
            "schema_version": [1] * count,
            "evaluation_id": ids,
            "run_id": ids,
            "week": weeks,
            "kind": ["scheduled"] * count,
            "status": ["ok"] * count,
            "model": models,
            "version": [1] * count,
            "stage": ["production"] * count,
            "evalset": ["toy"] * count,
            "evalset_sha256": ["e" * 64] * count,
            "checkpoint_sha256": ids,
        }
        history._publish(
            "evaluations",
            pa.table(
                {f.name: evaluation_rows.get(f.name, [None] * count) for f in EVALUATIONS_SCHEMA},
                schema=EVALUATIONS_SCHEMA,
            ),
            "bulk",
        )
        n = count * ROWS_PER_EVALUATION
        metric_rows_table = {
            "schema_version": np.ones(n, np.int32),
            "evaluation_id": np.repeat(ids, ROWS_PER_EVALUATION),
            "week": np.repeat(weeks, ROWS_PER_EVALUATION),
            "model": np.repeat(models, ROWS_PER_EVALUATION),
            "version": np.ones(n, np.int64),  # schema 2: each metric row names its owner
            "stage": ["production"] * n,
            "kind": ["scheduled"] * n,
            "evalset": ["toy"] * n,
            "metric": np.tile([f"m{i}" for i in range(ROWS_PER_EVALUATION)], count),
            "slice": [""] * n,
            "value": np.random.default_rng(start).random(n),
            "ci_low": np.zeros(n),
            "ci_high": np.ones(n),
            "n": np.full(n, 1000),
            "higher_is_better": np.ones(n, bool),
        }
        history._publish("metrics", pa.table(metric_rows_table, schema=METRICS_SCHEMA), "bulk")


def run(max_rows: int = 10_000_000) -> dict[str, float]:
    """Append and gate times at 10k ... ``max_rows`` metric rows, before and after compaction."""
    results: dict[str, float] = {}
    sizes = [s for s in (10_000, 100_000, 1_000_000, 10_000_000) if s <= max_rows]
    policy = GatePolicy()
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            history = History(str(Path(tmp) / "store"))
            _fill(history, size)
            correct = accuracy_mask(10_000, 0.9)
            record_week(history, "2026-W40", correct)
            start = time.perf_counter()
            record_week(history, "2026-W41", correct)
            results[f"append_at_{size}_rows_s"] = time.perf_counter() - start
            start = time.perf_counter()
            report = gate_week(history, "2026-W41", policy, model="m")
            results[f"gate_at_{size}_rows_s"] = time.perf_counter() - start
            assert report.comparisons, "the gate compared nothing"
            start = time.perf_counter()
            history.compact("metrics")
            history.compact("evaluations")
            results[f"compact_{size}_rows_s"] = time.perf_counter() - start
            start = time.perf_counter()
            gate_week(history, "2026-W41", policy, model="m")
            results[f"gate_at_{size}_rows_compacted_s"] = time.perf_counter() - start
            if size == sizes[-1]:
                config = Path(tmp) / "evalsentry.yaml"
                config.write_text(f"store: {Path(tmp) / 'store'}\n")
                start = time.perf_counter()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "evalsentry.cli",
                        "gate",
                        "--config",
                        str(config),
                        "--model",
                        "m",
                    ],
                    capture_output=True,
                    check=False,
                )
                results[f"gate_cli_cold_start_at_{size}_rows_s"] = time.perf_counter() - start
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-rows", type=int, default=10_000_000)
    args = parser.parse_args()
    for key, value in run(args.max_rows).items():
        print(f"{key:40s} {value:10.3f}")
