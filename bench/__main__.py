"""`make bench`: every benchmark in one run, as a Markdown table and JSON under bench/results/.

    python -m bench [--quick]

Ratios compare against baselines measured in the same run (these machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import UTC, datetime
from pathlib import Path

from bench import (
    bench_candidate,
    bench_cold_start,
    bench_evalsets,
    bench_fan_out,
    bench_gate,
    bench_metrics,
    bench_pipeline,
    bench_run,
    bench_scale,
    gate_power,
    gpu,
)

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    """Run the benchmarks and write their results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    results: dict[str, float] = {}
    results.update(
        bench_evalsets.run(
            gib=0.25 if args.quick else 1.0, rows=100_000 if args.quick else 1_000_000
        )
    )
    results.update(bench_metrics.run())
    results.update(bench_pipeline.run(seconds=2.0 if args.quick else 20.0))
    results.update(bench_cold_start.run(rounds=3 if args.quick else 7))
    results.update(bench_candidate.run(rounds=1 if args.quick else 3))
    results.update(bench_run.run(rounds=1 if args.quick else 2))
    results.update(bench_gate.run(max_rows=100_000 if args.quick else 10_000_000))
    results.update(gate_power.run(quick=args.quick))
    results.update(bench_scale.run(checkpoints=(1, 2) if args.quick else (1, 2, 4)))
    results.update(bench_fan_out.run(rounds=1 if args.quick else 3))
    results.update(gpu.run(quick=True))
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    document = {
        "when": stamp,
        "machine": f"{platform.machine()} {platform.processor()}",
        "results": results,
    }
    (RESULTS / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    table = ["| benchmark | value |", "|---|---|"] + [
        f"| {k} | {v:.4g} |" for k, v in results.items()
    ]
    (RESULTS / "latest.md").write_text(f"# Benchmarks ({stamp})\n\n" + "\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
