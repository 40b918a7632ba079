"""Evalset costs: hashing throughput vs plain hashlib, GX validation at 1M rows, digits load.

python -m bench.bench_evalsets [--gib 1.0]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evalsets.validation import run_suite, validation_frame
from evalsentry.storage import sha256_file

ROOT = Path(__file__).parents[1]


def _best(fn: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def plain_hashlib(path: Path) -> str:
    """The baseline: a single-stream hashlib loop with 1 MiB reads."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def bench_hash(gib: float) -> dict[str, float]:
    """Hash a file of ``gib`` GiB with evalsentry and with plain hashlib, alternating."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "blob.bin"
        block = os.urandom(1 << 24)
        with open(path, "wb") as handle:
            for _ in range(int(gib * 64)):
                handle.write(block)
        ours = _best(lambda: sha256_file(path))
        base = _best(lambda: plain_hashlib(path))
    size = gib * (1 << 30)
    return {
        "hash_gib": gib,
        "hash_evalsentry_mb_s": size / ours / 1e6,
        "hash_hashlib_mb_s": size / base / 1e6,
        "hash_throughput_ratio": base / ours,
    }


def bench_validation(rows: int) -> dict[str, float]:
    """Freeze a ``rows``-row tensor evalset, then time one full GX validation of it."""
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "id": pa.array(np.arange(rows).astype(str)),
            "x": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 16, np.float32)), 16),
            "label": rng.integers(0, 10, rows),
            "group": pa.array(rng.integers(0, 3, rows).astype(str)),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "big"
        freeze_evalset(
            table,
            folder,
            name="big",
            task="classification",
            target="label",
            inputs=InputsSpec(column="x", shape=[16]),
            id_column="id",
            slices=["group"],
        )
        import json

        suite = json.loads((folder / "expectations.json").read_text())
        run_suite(validation_frame(table, "x"), suite)  # warm GX's import and caches
        seconds = _best(lambda: run_suite(validation_frame(table, "x"), suite), repeat=2)
    return {f"gx_validation_{rows}_rows_s": seconds}


def bench_load() -> dict[str, float]:
    """Load the shipped digits evalset (verified; hashes cached after the first call)."""
    load_evalset("digits", evalsets_dir=ROOT / "evalsets")  # import torch, first hash
    cached = _best(lambda: load_evalset("digits", evalsets_dir=ROOT / "evalsets"), repeat=5)
    unverified = _best(
        lambda: load_evalset("digits", evalsets_dir=ROOT / "evalsets", verify=False), repeat=5
    )
    return {"digits_load_ms": cached * 1e3, "digits_load_unverified_ms": unverified * 1e3}


def run(gib: float = 1.0, rows: int = 1_000_000) -> dict[str, float]:
    """All evalset benchmarks."""
    results: dict[str, float] = {}
    results.update(bench_hash(gib))
    results.update(bench_validation(rows))
    results.update(bench_load())
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    for key, value in run(args.gib, args.rows).items():
        print(f"{key:32s} {value:12.3f}")
