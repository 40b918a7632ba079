"""`make bench`: every benchmark in one run, as Markdown and JSON under bench/results/.

    python -m bench [--quick] [--only pipeline,cold_start]

Ratios compare against baselines measured in the same run (these machines are noisy): each
benchmark's own. ``--only`` runs some again and keeps the others' latest results; every
benchmark's section says when it ran. ``gate_power`` also writes its tables to
``bench/results/gate_power.md``, ``levers`` its table to ``bench/results/levers.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    bench_candidate,
    bench_cold_start,
    bench_evalsets,
    bench_fan_out,
    bench_gate,
    bench_leaks,
    bench_levers,
    bench_metrics,
    bench_pipeline,
    bench_profile,
    bench_run,
    bench_scale,
    bench_suspects,
    bench_text,
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
    "text": lambda quick: bench_text.run(rounds=2 if quick else 5),
    "cold_start": lambda quick: bench_cold_start.run(rounds=3 if quick else 7),
    "candidate": lambda quick: bench_candidate.run(rounds=1 if quick else 3),
    "run": lambda quick: bench_run.run(rounds=1 if quick else 2),
    "gate": lambda quick: bench_gate.run(max_rows=100_000 if quick else 10_000_000),
    "gate_power": lambda quick: gate_power.run(
        quick=quick, tables=None if quick else RESULTS / "gate_power.md"
    ),
    "suspects": lambda quick: bench_suspects.run(seeds=2 if quick else 3),
    "leaks": lambda quick: bench_leaks.run(
        train_rows=100_000 if quick else 1_000_000, eval_rows=10_000 if quick else 100_000
    ),
    "leaks_tokens": lambda quick: bench_leaks.run_tokens(
        train_rows=20_000 if quick else 100_000, eval_rows=2_000 if quick else 10_000
    ),
    "scale": lambda quick: bench_scale.run(checkpoints=(1, 2) if quick else (1, 2, 4)),
    "fan_out": lambda quick: bench_fan_out.run(rounds=1 if quick else 3),
    "levers": lambda quick: bench_levers.run(quick=quick),
    "profile": lambda quick: bench_profile.run(rounds=1 if quick else 3),
    "gpu": lambda quick: gpu.run(quick=True),
}


def main() -> None:
    """Run the benchmarks (all, or ``--only`` some) and write their results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes, for a smoke run (printed only: the recorded results stay)",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated benchmarks to run, of: {', '.join(BENCHMARKS)} (default: all); "
        "the others' latest results are kept",
    )
    args = parser.parse_args()
    chosen = [b.strip() for b in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    sections = _kept_sections() if args.only and not args.quick else {}
    for name in chosen:
        results = BENCHMARKS[name](args.quick)
        sections[name] = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "results": results,
        }
        if not args.quick:
            write(sections)  # after each: a run cut short keeps what it measured
    print("\n".join(markdown(sections)))


def _kept_sections() -> dict[str, dict[str, Any]]:
    """The per-benchmark results of ``latest.json``, to keep beside a run of some benchmarks."""
    try:
        document = json.loads((RESULTS / "latest.json").read_text())
    except (OSError, ValueError):
        return {}
    kept = document.get("benchmarks")
    return dict(kept) if isinstance(kept, dict) else {}  # an older layout: start afresh


def write(sections: dict[str, dict[str, Any]]) -> list[str]:
    """``bench/results/latest.json`` and ``latest.md``: each benchmark's latest results, with
    when it ran (same-run ratios are within one benchmark's section); the Markdown lines."""
    RESULTS.mkdir(exist_ok=True)
    ordered = {name: sections[name] for name in BENCHMARKS if name in sections}
    document = {"machine": f"{platform.machine()} {platform.processor()}", "benchmarks": ordered}
    (RESULTS / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    lines = markdown(ordered)
    (RESULTS / "latest.md").write_text("\n".join(lines))
    return lines


def markdown(sections: dict[str, dict[str, Any]]) -> list[str]:
    """The results as Markdown lines: a section per benchmark, with when it ran."""
    lines = ["# Benchmarks", ""]
    for name, section in sections.items():
        lines += [f"## {name} ({section['when']})", "", "| benchmark | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in section["results"].items()]
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
