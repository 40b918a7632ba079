"""`make bench`: every benchmark in one run, as a Markdown table and JSON under bench/results/.

    python -m bench [--quick]

Ratios compare against baselines measured in the same run (these machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
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

#: Each benchmark, run at full size or ``--quick``, in the order ``make bench`` runs them.
BENCHMARKS: dict[str, Callable[[bool], dict[str, float]]] = {
    "evalsets": lambda quick: bench_evalsets.run(
        gib=0.25 if quick else 1.0, rows=100_000 if quick else 1_000_000
    ),
    "metrics": lambda quick: bench_metrics.run(),
    "pipeline": lambda quick: bench_pipeline.run(seconds=2.0 if quick else 20.0),
    "cold_start": lambda quick: bench_cold_start.run(rounds=3 if quick else 7),
    "candidate": lambda quick: bench_candidate.run(rounds=1 if quick else 3),
    "run": lambda quick: bench_run.run(rounds=1 if quick else 2),
    "gate": lambda quick: bench_gate.run(max_rows=100_000 if quick else 10_000_000),
    "gate_power": lambda quick: gate_power.run(quick=quick),
    "scale": lambda quick: bench_scale.run(checkpoints=(1, 2) if quick else (1, 2, 4)),
    "fan_out": lambda quick: bench_fan_out.run(rounds=1 if quick else 3),
    "gpu": lambda quick: gpu.run(quick=True),
}


def main() -> None:
    """Run the benchmarks (all, or ``--only`` some) and write their results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--only",
        help=f"comma-separated benchmarks to run, of: {', '.join(BENCHMARKS)} (default: all)",
    )
    args = parser.parse_args()
    chosen = [b.strip() for b in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    results: dict[str, float] = {}
    for done, name in enumerate(chosen, 1):
        results.update(BENCHMARKS[name](args.quick))
        table = write(results, chosen[:done])  # after each: a run cut short keeps what it measured
    print("\n".join(table))


def write(results: dict[str, float], ran: list[str]) -> list[str]:
    """``bench/results/latest.json`` and ``latest.md`` for the benchmarks that ran; the table."""
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    document = {
        "when": stamp,
        "benchmarks": ran,
        "machine": f"{platform.machine()} {platform.processor()}",
        "results": results,
    }
    (RESULTS / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    table = ["| benchmark | value |", "|---|---|"] + [
        f"| {k} | {v:.4g} |" for k, v in results.items()
    ]
    heading = f"# Benchmarks ({stamp}): {', '.join(ran)}"
    (RESULTS / "latest.md").write_text(heading + "\n\n" + "\n".join(table) + "\n")
    return table


if __name__ == "__main__":
    main()
