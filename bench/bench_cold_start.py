"""Cold starts of the CI commands, as same-run ratios against bare Python importing pandas.

    python -m bench.bench_cold_start [--rounds 7]

Each round runs the baseline (``python -c "import pandas, pyarrow.parquet"``) and then
``evalsentry gate`` on a small synthetic history, on one whose comparisons are INCONCLUSIVE,
and on the demo's (``make demo``'s three weeks, its passing second week), alternating, so all
see the same load; each ratio is of the medians. Peak RSS comes from ``os.wait4``, the child's own rusage.

Both run from compiled bytecode, as an installed package does (pip compiles it at install):
where ``PYTHONDONTWRITEBYTECODE`` is set, evalsentry's own modules would otherwise be compiled
from source on every start while pandas' come compiled. :func:`installed_env` caches bytecode
in a folder of the run, and a first round, not counted, fills it; so it does the margin test's
critical values (:mod:`evalsentry.gate.critical_cache`), and the INCONCLUSIVE history's gate is
timed again with an empty cache each round: its first run on a new evalset size or tolerance.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from evalsentry.gate.critical_cache import CACHE_ENV
from evalsentry.history.store import History
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


def installed_env(cache: Path) -> dict[str, str]:
    """This environment, writing and reading compiled bytecode under ``cache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # The margin test's critical values are kept beside the bytecode: as warm as it is.
    return {**env, "PYTHONPYCACHEPREFIX": str(cache), CACHE_ENV: str(cache / "critical")}


def alternate(commands: dict[str, list[str]], rounds: int, cwd: str) -> dict[str, list[float]]:
    """Run each command once per round, in turn; every command's wall times and peak RSS.

    A first round, not counted, compiles and caches their bytecode (:func:`installed_env`).
    """
    env = installed_env(Path(cwd) / "bytecode")
    for command in commands.values():
        timed(command, cwd, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            seconds, peak = timed(command, cwd, env)
            times[name].append(seconds)
            rss[name].append(peak)
    return {**times, **{f"{name}_rss": values for name, values in rss.items()}}


def gate_history(root: Path) -> Path:
    """A two-week synthetic history of 10,000 examples, and a config naming it."""
    root.mkdir(parents=True, exist_ok=True)
    history = History(str(root / "store"))
    correct = accuracy_mask(10_000, 0.9)
    record_week(history, "2026-W40", correct)
    record_week(history, "2026-W41", correct)
    config = root / "evalsentry.yaml"
    config.write_text(f"store: {root / 'store'}\n")
    return config


def inconclusive_history(root: Path) -> Path:
    """Three weeks of 10,000 examples, each a retrain (6% churn) a little worse than the last.

    Its comparisons are INCONCLUSIVE, so the gate states detectable drops, exact margin p-values
    and bounds, the costly part: the cold start where the statistics cost most.
    """
    root.mkdir(parents=True, exist_ok=True)
    history = History(str(root / "store"))
    correct = accuracy_mask(10_000, 0.9)
    rng = np.random.default_rng(0)
    for version, drop in enumerate((0.0, 0.006, 0.006), start=1):
        right, wrong = np.flatnonzero(correct), np.flatnonzero(~correct)
        if drop:
            correct = correct.copy()
            correct[rng.choice(right, 300 + int(drop * correct.size), replace=False)] = False
            correct[rng.choice(wrong, 300, replace=False)] = True
        record_week(
            history,
            f"2026-W{39 + version}",
            correct,
            version=version,
            checkpoint=str(version) * 64,
            metrics=("accuracy", "nll", "macro_f1", "ece"),
        )
    config = root / "evalsentry.yaml"
    config.write_text(f"store: {root / 'store'}\n")
    return config


def demo_history(root: Path) -> list[str]:
    """The demo's three weeks (``make demo``) told in ``root``; the options gating its second.

    The second week is the retrain that PASSes (the third FAILs, which would exit 1).
    """
    import contextlib
    import io

    from examples.digits.demo import tell_story

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        weeks = tell_story(root)
    return ["--config", str(root / "evalsentry.yaml"), "--week", weeks[1][0]]


#: The gate through :func:`evalsentry.cli.main` with the interpreter's usual exit (teardown
#: included), to show what the program's early exit saves.
_GATE_USUAL_EXIT = "import sys; from evalsentry.cli import main; sys.exit(main(sys.argv[1:]))"


def run(rounds: int = 7) -> dict[str, float]:
    """Median cold-start seconds of ``evalsentry gate`` and the baseline, their ratio, peak RSS.

    Also the gate with the interpreter's usual exit (its teardown), as a ratio too.
    """
    with tempfile.TemporaryDirectory() as tmp:
        options = ["gate", "--model", "m", "--config", str(gate_history(Path(tmp) / "pass"))]
        worse = inconclusive_history(Path(tmp) / "inconclusive")
        demo = demo_history(Path(tmp) / "demo")
        commands = {
            "baseline": BASELINE,
            "gate": [sys.executable, "-m", "evalsentry.cli", *options],
            "usual_exit": [sys.executable, "-c", _GATE_USUAL_EXIT, *options],
            "inconclusive": [
                sys.executable,
                "-m",
                "evalsentry.cli",
                "gate",
                "--config",
                str(worse),
            ],
            "demo": [sys.executable, "-m", "evalsentry.cli", "gate", *demo],
        }
        found = alternate(commands, rounds, tmp)
        # The same gate where no run has kept the critical values yet (a new evalset size,
        # tolerance or evalsentry version): each round with an empty cache folder.
        empty = [
            timed(
                commands["inconclusive"],
                tmp,
                {**installed_env(Path(tmp) / "bytecode"), CACHE_ENV: str(Path(tmp) / f"e{i}")},
            )[0]
            for i in range(rounds)
        ]
    baseline = statistics.median(found["baseline"])
    gate_s = statistics.median(found["gate"])
    usual_s = statistics.median(found["usual_exit"])
    return {
        "cold_start_baseline_import_pandas_s": baseline,
        "gate_cli_cold_start_s": gate_s,
        "gate_cli_cold_start_ratio": gate_s / baseline,
        "gate_cli_cold_start_inconclusive_10k_s": statistics.median(found["inconclusive"]),
        "gate_cli_cold_start_inconclusive_10k_ratio": statistics.median(found["inconclusive"])
        / baseline,
        "gate_cli_cold_start_inconclusive_10k_empty_cache_s": statistics.median(empty),
        "gate_cli_cold_start_inconclusive_10k_empty_cache_ratio": statistics.median(empty)
        / baseline,
        "gate_cli_cold_start_demo_s": statistics.median(found["demo"]),
        "gate_cli_cold_start_demo_ratio": statistics.median(found["demo"]) / baseline,
        "gate_with_interpreter_teardown_s": usual_s,
        "gate_with_interpreter_teardown_ratio": usual_s / baseline,
        "gate_cli_peak_rss_mib": max(found["gate_rss"]),
        "cold_start_baseline_peak_rss_mib": max(found["baseline_rss"]),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for key, value in run(args.rounds).items():
        print(f"{key:45s} {value:10.3f}")
