"""Split-leak check throughput: 1,000,000 training rows against a 100,000-row evalset.

    python -m bench.bench_leaks [--train-rows 1000000] [--eval-rows 100000] [--tokens]

Both tables hold 64 float32 features (an 8x8 image's size); 1% of the evalset's rows are
copied into the training data, half exactly and half moved by less than the rounding (values
on a 0.01 grid, moved by at most 0.003, rounded to 2 places). The
time is ``check_leaks``'s whole: reading the training Parquet file, hashing both, looking up,
confirming. The planted rows found are counted (all exact ones must be).

``--tokens`` (:func:`run_tokens`): 100,000 training texts of 128 token ids against a
10,000-text evalset; 1% of the evalset copied whole, 1% with one id changed in the middle (a
near duplicate: 5-gram Jaccard about 0.92) and 1% with a 20-id span inside a training text (a
13-gram). The time is the whole check, MinHash LSH included.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evalsets.leaks import LeakCheck, check_leaks

FEATURES = 64


def _table(values: np.ndarray, labels: np.ndarray) -> pa.Table:
    flat = pa.array(values.reshape(-1))
    return pa.table({"x": pa.FixedSizeListArray.from_arrays(flat, FEATURES), "y": labels})


def _timed_check(evaluation: pa.Table, train: pa.Table, **spec: Any) -> tuple[LeakCheck, float]:
    """Freeze ``evaluation`` as an evalset, write ``train``, time one ``check_leaks`` of them."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        freeze_evalset(evaluation, root / "bench", name="bench", **spec)
        pq.write_table(train, root / "train.parquet")
        evalset = load_evalset(root / "bench")
        started = time.perf_counter()
        found = check_leaks(evalset, str(root / "train.parquet"))
        return found, time.perf_counter() - started


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
    found, seconds = _timed_check(
        _table(evaluation, rng.integers(0, 10, eval_rows)),
        _table(train, rng.integers(0, 10, train_rows)),
        task="classification",
        target="y",
        inputs=InputsSpec(column="x", shape=[FEATURES]),
    )
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


def run_tokens(
    train_rows: int = 100_000, eval_rows: int = 10_000, length: int = 128
) -> dict[str, float]:
    """Seconds of one token check, texts per second, and the planted leaks found, by kind."""
    rng = np.random.default_rng(1)
    evaluation = rng.integers(1, 50_000, (eval_rows, length))
    train = rng.integers(1, 50_000, (train_rows, length))
    planted = rng.choice(eval_rows, 3 * (eval_rows // 100), replace=False)
    exact, near, span = np.array_split(planted, 3)
    train[: len(exact)] = evaluation[exact]
    changed = evaluation[near].copy()
    changed[:, length // 2] = 0  # an id no text holds
    train[len(exact) : len(exact) + len(near)] = changed
    at = len(exact) + len(near)
    train[at : at + len(span), 40:60] = evaluation[span, 10:30]
    found, seconds = _timed_check(
        pa.table({"ids": list(evaluation)}),
        pa.table({"ids": list(train)}),
        task="language_modeling",
        target="ids",
        inputs=InputsSpec(tokens="ids", pad_id=0, max_length=length),
    )
    kinds = {leak.row: leak.kind for leak in found.leaks}
    caught = {
        name: sum(kinds.get(int(row)) == kind for row in rows)
        for name, kind, rows in (("exact", "exact", exact), ("near", "near", near),
                                 ("span", "13-gram", span))
    }  # fmt: skip
    if caught["exact"] != len(exact):
        raise RuntimeError("an exact copy of a text was not found")
    return {
        "leaks_tokens_train_texts": train_rows,
        "leaks_tokens_eval_texts": eval_rows,
        "leaks_tokens_check_s": seconds,
        "leaks_tokens_training_texts_per_s": train_rows / seconds,
        "leaks_tokens_planted_each_kind": len(exact),
        "leaks_tokens_found_exact": caught["exact"],
        "leaks_tokens_found_near": caught["near"],
        "leaks_tokens_found_13_gram": caught["span"],
        "leaks_tokens_found_unplanted": len(kinds) - sum(caught.values()),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-rows", type=int, help="default: 1,000,000 rows; 100,000 texts")
    parser.add_argument("--eval-rows", type=int, help="default: 100,000 rows; 10,000 texts")
    parser.add_argument("--tokens", action="store_true", help="token texts (MinHash LSH, 13-grams)")
    args = parser.parse_args()
    measure = run_tokens if args.tokens else run
    sizes = {k: v for k, v in (("train_rows", args.train_rows), ("eval_rows", args.eval_rows)) if v}
    for key, value in measure(**sizes).items():
        print(f"{key:45s} {value:14.3f}")
