"""Split-leak check throughput: 1,000,000 training rows against a 100,000-row evalset.

    python -m bench.bench_leaks [--train-rows 1000000] [--eval-rows 100000]

Both tables hold 64 float32 features (an 8x8 image's size); 1% of the evalset's rows are
copied into the training data, half exactly and half moved by less than the rounding (values
on a 0.01 grid, moved by at most 0.003, rounded to 2 places). The
time is ``check_leaks``'s whole: reading the training Parquet file, hashing both, looking up,
confirming. The planted rows found are counted (all exact ones must be).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evalsets.leaks import check_leaks

FEATURES = 64


def _table(values: np.ndarray, labels: np.ndarray) -> pa.Table:
    flat = pa.array(values.reshape(-1))
    return pa.table({"x": pa.FixedSizeListArray.from_arrays(flat, FEATURES), "y": labels})


def run(train_rows: int = 1_000_000, eval_rows: int = 100_000) -> dict[str, float]:
    """Seconds of one check, rows per second, and the planted leaks found."""
    rng = np.random.default_rng(0)
    # Values on a 0.01 grid; a near copy moves each by at most 0.003: equal after rounding to 2.
    evaluation = rng.normal(size=(eval_rows, FEATURES)).round(2).astype(np.float32)
    train = rng.normal(size=(train_rows, FEATURES)).round(2).astype(np.float32)
    planted = rng.choice(eval_rows, eval_rows // 100, replace=False)
    half = len(planted) // 2
    train[:half] = evaluation[planted[:half]]
    moved = rng.uniform(-0.003, 0.003, (len(planted) - half, FEATURES)).astype(np.float32)
    train[half : len(planted)] = evaluation[planted[half:]] + moved
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        freeze_evalset(
            _table(evaluation, rng.integers(0, 10, eval_rows)),
            root / "big",
            name="big",
            task="classification",
            target="y",
            inputs=InputsSpec(column="x", shape=[FEATURES]),
        )
        pq.write_table(_table(train, rng.integers(0, 10, train_rows)), root / "train.parquet")
        evalset = load_evalset(root / "big")
        started = time.perf_counter()
        found = check_leaks(evalset, str(root / "train.parquet"), decimals=2)
        seconds = time.perf_counter() - started
    exact = {leak.row for leak in found.leaks if leak.kind == "exact"}
    if not set(planted[:half].tolist()) <= exact:
        raise RuntimeError("an exact copy was not found")
    return {
        "leaks_train_rows": train_rows,
        "leaks_eval_rows": eval_rows,
        "leaks_check_s": seconds,
        "leaks_training_rows_per_s": train_rows / seconds,
        "leaks_planted": len(planted),
        "leaks_found_exact": len(exact),
        "leaks_found_near": sum(leak.kind == "near" for leak in found.leaks),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-rows", type=int, default=1_000_000)
    parser.add_argument("--eval-rows", type=int, default=100_000)
    args = parser.parse_args()
    for key, value in run(args.train_rows, args.eval_rows).items():
        print(f"{key:45s} {value:14.3f}")
