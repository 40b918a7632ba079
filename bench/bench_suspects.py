"""Label-error suspects on planted errors: precision, recall and time, on the digits evalset.

    python -m bench.bench_suspects [--share 0.03] [--seeds 3]

A copy of the shipped digits evalset has ``--share`` of its labels changed (each to another
class, at random) and is frozen again. ``--seeds`` digits CNNs are trained on the shipped
training split (which holds none of the evalset's rows), each evaluated on the planted copy
and recorded in a fresh history, as a weekly run would. ``find_suspects`` then names the
suspects: precision is the share of them that were planted, recall the share of the planted
found. Where the digits evalset's own labels are wrong, a true error counts against precision.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.bench_candidate import REPO
from evalsentry.checkpoints.checkpoint import load_checkpoint
from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.inference import run_inference
from evalsentry.gate.suspects import find_suspects
from evalsentry.history.store import History
from evalsentry.trust import Trust
from examples.digits.train import train
from tests.synthetic import record_week

TRUST = Trust(factories=("examples.digits.model",))


def run(share: float = 0.03, seeds: int = 3) -> dict[str, float]:
    """Precision, recall and seconds of the suspects on a planted copy of digits."""
    table = pq.read_table(REPO / "evalsets" / "digits" / "data" / "part-000.parquet")
    labels = table.column("label").to_numpy().copy()
    rng = np.random.default_rng(20261206)
    planted = rng.choice(len(labels), round(share * len(labels)), replace=False)
    labels[planted] = (labels[planted] + rng.integers(1, 10, len(planted))) % 10
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        freeze_evalset(
            table.set_column(table.schema.get_field_index("label"), "label", [labels]),
            root / "planted",
            name="planted",
            task="classification",
            target="label",
            id_column="id",
            inputs=InputsSpec(column="pixels", shape=[1, 8, 8]),
            classes=list(range(10)),
        )
        evalset = load_evalset(root / "planted")
        history = History(str(root / "store"))
        for seed in range(1, seeds + 1):
            path = train(root / f"digits-{seed}.pt", seed=seed, epochs=10)
            model = load_checkpoint(path, trust=TRUST).model
            columns = run_inference(model, evalset, device="cpu").columns
            correct = columns["prediction"] == columns["target"]
            record_week(
                history,
                "2026-W40",
                correct,
                version=seed,
                checkpoint=str(seed) * 64,
                columns=columns,
                evalset="planted",
                evalset_sha=evalset.sha256,
                num_classes=10,
            )
        started = time.perf_counter()
        found = find_suspects(history, evalset)
        seconds = time.perf_counter() - started
    rows = {s.row for s in found.suspects}
    hits = len(rows & set(planted.tolist()))
    return {
        "suspects_planted": len(planted),
        "suspects_found": len(rows),
        "suspects_precision": hits / len(rows) if rows else 0.0,
        "suspects_recall": hits / len(planted),
        "suspects_find_s": seconds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--share", type=float, default=0.03)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    for key, value in run(args.share, args.seeds).items():
        print(f"{key:45s} {value:10.3f}")
