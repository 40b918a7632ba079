"""The CI candidate path on the digits example: ``evalsentry evaluate`` against its own evaluation.

    python -m bench.bench_candidate [--rounds 3]

A temporary project holds a copy of ``evalsets/digits`` and one digits checkpoint. The first
``evaluate`` validates the suite in full (Great Expectations); later ones reuse the stored
result (files re-hashed), and ``--revalidate`` ones validate in full again; the kinds alternate.
Overhead is the command's wall time minus the evaluation's own ``wall_s`` in the history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from bench.bench_cold_start import installed_env, timed
from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.history.store import History
from evalsentry.names import CANDIDATE_CHECK
from examples.digits.model import DigitsCNN

REPO = Path(__file__).parents[1]


def project(root: Path) -> Path:
    """A project with the digits evalset and a (random-weight) digits checkpoint; its checkpoint."""
    shutil.copytree(REPO / "evalsets" / "digits", root / "evalsets" / "digits")
    (root / "evalsentry.yaml").write_text(
        "store: store\nregistry: registry\nevalsets: evalsets\n"
        "trusted_factories:\n  - examples.digits.model\n"
    )
    torch.manual_seed(0)
    return save_checkpoint(
        DigitsCNN(channels=16),
        root / "candidate.pt",
        metrics={},
        config={"bench": True},
        seed=0,
        data=REPO / "examples" / "digits" / "data" / "train.parquet",
        factory="examples.digits.model:DigitsCNN",
        factory_kwargs={"channels": 16},
        git_sha="0" * 40,
    )


def run(rounds: int = 3) -> dict[str, float]:
    """Median wall, evaluation and overhead seconds of reused and full validations; peak RSS."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint = project(root)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
        )
        command = [sys.executable, "-m", "evalsentry.cli", "evaluate"]
        command += ["--checkpoint", str(checkpoint), "--model", "digits-cnn", "--new-model"]
        env = installed_env(root / "bytecode")  # as installed: see bench_cold_start
        timed(command, str(root), env)  # the first run stores the full validation and bytecode
        walls: dict[str, list[float]] = {"reused": [], "full": []}
        peak = 0.0
        for _ in range(rounds):
            for kind, extra in (("reused", []), ("full", ["--revalidate"])):
                seconds, rss = timed([*command, *extra], str(root), env)
                walls[kind].append(seconds)
                peak = max(peak, rss)
        rows = History(str(root / "store")).evaluations(
            kind=CANDIDATE_CHECK, include_superseded=True
        )
        evaluation = float(statistics.median(rows["wall_s"]))
    for kind, values in walls.items():
        wall = statistics.median(values)
        results[f"candidate_{kind}_validation_wall_s"] = wall
        results[f"candidate_{kind}_validation_overhead_s"] = wall - evaluation
    results["candidate_evaluation_s"] = evaluation
    results["candidate_peak_rss_mib"] = peak
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for key, value in run(args.rounds).items():
        print(f"{key:45s} {value:10.3f}")
