"""Cold starts of the CI commands, as same-run ratios against bare Python importing pandas.

    python -m bench.bench_cold_start [--rounds 7]

Each round runs the baseline (``python -c "import pandas, pyarrow.parquet"``) and then
``evalsentry gate`` on a small synthetic history, alternating, so both see the same load; the
ratio is of the medians. Peak RSS comes from ``os.wait4``, the child's own rusage.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from evalsentry.history import History
from tests.synthetic import accuracy_mask, record_week

BASELINE = [sys.executable, "-c", "import pandas, pyarrow.parquet"]


#: A small Python that starts the command and reports its peak RSS. The command is not forked
#: from the benchmark itself: a forked child's peak RSS starts at its parent's, which here holds
#: torch and pandas (hundreds of MiB).
_LAUNCHER = """
import os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed(
    command: list[str], cwd: str | None = None, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of ``command`` (in ``env``); it must succeed.

    Both are the command's own, timed from its fork in the launcher; the peak is the largest
    single process of its tree (Linux counts reaped children in it).
    """
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed with {done.returncode}")
    elapsed, peak_kib = done.stdout.split()[-2:]
    return float(elapsed), int(peak_kib) / 1024


def alternate(commands: dict[str, list[str]], rounds: int, cwd: str) -> dict[str, list[float]]:
    """Run each command once per round, in turn; every command's wall times and peak RSS."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            seconds, peak = timed(command, cwd)
            times[name].append(seconds)
            rss[name].append(peak)
    return {**times, **{f"{name}_rss": values for name, values in rss.items()}}


def gate_history(root: Path) -> Path:
    """A two-week synthetic history of 10,000 examples, and a config naming it."""
    history = History(str(root / "store"))
    correct = accuracy_mask(10_000, 0.9)
    record_week(history, "2026-W40", correct)
    record_week(history, "2026-W41", correct)
    config = root / "evalsentry.yaml"
    config.write_text(f"store: {root / 'store'}\n")
    return config


def run(rounds: int = 7) -> dict[str, float]:
    """Median cold-start seconds of ``evalsentry gate`` and the baseline, their ratio, peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        config = gate_history(Path(tmp))
        gate = [sys.executable, "-m", "evalsentry.cli", "gate", "--model", "m"]
        found = alternate(
            {"baseline": BASELINE, "gate": [*gate, "--config", str(config)]}, rounds, tmp
        )
    baseline = statistics.median(found["baseline"])
    gate_s = statistics.median(found["gate"])
    return {
        "cold_start_baseline_import_pandas_s": baseline,
        "gate_cli_cold_start_s": gate_s,
        "gate_cli_cold_start_ratio": gate_s / baseline,
        "gate_cli_peak_rss_mib": max(found["gate_rss"]),
        "cold_start_baseline_peak_rss_mib": max(found["baseline_rss"]),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for key, value in run(args.rounds).items():
        print(f"{key:45s} {value:10.3f}")
