"""The serving profile against a hand-written PyTorch loop, batch size by batch size.

    python -m bench.bench_profile [--rounds 3]

Both serve the digits evalset's pixels to the digits CNN in calls of 1, 8, 32 and 128 rows,
each call timed alone: the loop is what an engineer writes by hand (slice, call, clock);
the profile is ``evaluation.profile.profile_batches`` (the code behind ``evalsentry profile``)
with the same share of seconds per batch size. Rounds alternate which goes first and the best
median call of each is kept (a median, since a call another process delays is not the
model's time), so machine noise hits both alike. Overhead is the profile's median call over
the loop's, minus one: the profile should measure the model, not itself.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.profile import MIN_CALLS, profile_batches
from examples.digits.model import DigitsCNN

REPO = Path(__file__).parents[1]
SIZES = (1, 8, 32, 128)
SHARE_S = 0.5


def raw_loop(model: torch.nn.Module, pixels: torch.Tensor, size: int) -> float:
    """The median call's seconds: ``size`` rows at a time, each call timed alone."""
    starts = range(0, len(pixels) - size + 1, size)
    seconds: list[float] = []
    with torch.inference_mode():
        model(pixels[:size])
        began = time.perf_counter()
        while len(seconds) < MIN_CALLS or time.perf_counter() - began < SHARE_S:
            start = starts[len(seconds) % len(starts)]
            batch = pixels[start : start + size]
            tick = time.perf_counter()
            model(batch)
            seconds.append(time.perf_counter() - tick)
    return statistics.median(seconds)


def run(rounds: int = 3) -> dict[str, float]:
    """Each one's best median call at each batch size, and the profile's overhead over the loop."""
    torch.manual_seed(0)
    model = DigitsCNN().eval()
    evalset = load_evalset("digits", evalsets_dir=str(REPO / "evalsets"))
    table = pq.read_table(REPO / "evalsets" / "digits" / "data", columns=["pixels"])
    flat = table.column("pixels").combine_chunks().flatten().to_numpy()
    pixels = torch.from_numpy(flat.reshape(-1, 1, 8, 8).astype("float32"))
    best: dict[tuple[str, int], float] = {}
    for round_ in range(rounds):
        for who in ("loop", "profile") if round_ % 2 == 0 else ("profile", "loop"):
            if who == "loop":
                found = {size: raw_loop(model, pixels, size) for size in SIZES}
            else:
                served = profile_batches(model, evalset, device="cpu", batch_sizes=SIZES, budget_s=SHARE_S * len(SIZES))  # fmt: skip
                found = {b.batch_size: b.latency_ms(50) / 1e3 for b in served.batches}
            for size, seconds in found.items():
                best[who, size] = min(best.get((who, size), float("inf")), seconds)
    results: dict[str, float] = {}
    for size in SIZES:
        results[f"profile_batch_{size}_p50_ms"] = best["profile", size] * 1e3
        results[f"raw_loop_batch_{size}_p50_ms"] = best["loop", size] * 1e3
        results[f"profile_overhead_batch_{size}"] = best["profile", size] / best["loop", size] - 1
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for name, value in run(args.rounds).items():
        print(f"{name:45s} {value:12.4f}")
