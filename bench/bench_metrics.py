"""Times bootstrap metric computation on a synthetic 100k-example evaluation set.

Run with ``python bench/bench_metrics.py``; prints timings, asserts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from evalsentry.gate.metrics import compute_metrics, default_metrics, get_metric
from evalsentry.gate.resampling import swap_values

N_EXAMPLES = 100_000
N_RESAMPLES = 1000
N_SWAPS = 2000  # the gate's default sign flips
NUM_CLASSES = 10
ACCURACY = 0.8
REPEATS = 3


def _classification_columns(rng: np.random.Generator) -> dict[str, np.ndarray]:
    target = rng.integers(0, NUM_CLASSES, N_EXAMPLES)
    hit = rng.random(N_EXAMPLES) < ACCURACY
    prediction = np.where(
        hit, target, (target + rng.integers(1, NUM_CLASSES, N_EXAMPLES)) % NUM_CLASSES
    )
    rank = np.where(hit, 0, rng.integers(1, NUM_CLASSES, N_EXAMPLES))
    confidence = np.clip(rng.normal(ACCURACY, 0.1, N_EXAMPLES), 1.0 / NUM_CLASSES, 1.0)
    return {
        "target": target,
        "prediction": prediction,
        "loss": rng.exponential(0.5, N_EXAMPLES),
        "confidence": confidence,
        "target_rank": rank,
    }


def _regression_columns(rng: np.random.Generator) -> dict[str, np.ndarray]:
    target = rng.normal(size=N_EXAMPLES)
    prediction = target + rng.normal(scale=0.3, size=N_EXAMPLES)
    return {"target": target, "prediction": prediction, "loss": (prediction - target) ** 2}


def _swaps(ref: dict[str, np.ndarray], cur: dict[str, np.ndarray], names: list[str]) -> object:
    """The gate's joint sign flips of ``names`` (every example differs: the worst case)."""
    metrics = [get_metric(name) for name in names]
    return swap_values(metrics, ref, cur, num_classes=NUM_CLASSES, n_swaps=N_SWAPS)


def _time(label: str, run: Callable[[], object]) -> float:
    timings = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    print(f"{label:<55s} best {min(timings):6.3f} s   all {[round(t, 3) for t in timings]}")
    return min(timings)


def run() -> dict[str, float]:
    """The headline figures for `make bench`: bootstrap CIs at 100k examples x 1000 resamples."""
    rng = np.random.default_rng(0)
    cls = _classification_columns(rng)
    names = default_metrics("classification", NUM_CLASSES)
    worse = {**cls, "loss": cls["loss"] * 1.01}
    return {
        "bootstrap_ci_100k_x1000_s": _time(
            "classification metrics with CIs",
            lambda: compute_metrics(cls, names, num_classes=NUM_CLASSES, n_resamples=N_RESAMPLES),
        ),
        "paired_sign_flips_100k_x2000_s": _time(
            "paired sign flips, five metrics",
            lambda: _swaps(cls, worse, list(names)),
        ),
    }


def main() -> None:
    """Prints best-of-N timings for the default metric sets."""
    rng = np.random.default_rng(0)
    cls = _classification_columns(rng)
    reg = _regression_columns(rng)
    cls_names = default_metrics("classification", NUM_CLASSES)
    print(f"n={N_EXAMPLES}, resamples={N_RESAMPLES}")
    _time(
        f"classification {cls_names}",
        lambda: compute_metrics(cls, cls_names, num_classes=NUM_CLASSES, n_resamples=N_RESAMPLES),
    )
    for name in cls_names:
        _time(
            f"  {name} alone",
            lambda name=name: compute_metrics(
                cls, [name], num_classes=NUM_CLASSES, n_resamples=N_RESAMPLES
            ),
        )
    _time(
        "regression ('mae', 'rmse', 'r2')",
        lambda: compute_metrics(
            reg, default_metrics("regression"), num_classes=None, n_resamples=N_RESAMPLES
        ),
    )
    worse = {**cls, "loss": cls["loss"] * 1.01}
    _time(f"paired sign flips nll, {N_SWAPS} swaps", lambda: _swaps(cls, worse, ["nll"]))
    _time(f"paired sign flips macro_f1, {N_SWAPS} swaps", lambda: _swaps(cls, worse, ["macro_f1"]))
    half = rng.random(N_EXAMPLES) < 0.5
    _time(
        "classification, 50% mask",
        lambda: compute_metrics(
            cls, cls_names, num_classes=NUM_CLASSES, n_resamples=N_RESAMPLES, mask=half
        ),
    )


if __name__ == "__main__":
    main()
