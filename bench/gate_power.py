"""The gate's error rates, measured: false alarms, power and detectable drops against an exact oracle.

    python -m bench.gate_power [--quick] [--trials-scale 1.0] [--workers 2]

Simulated retrains (``tests.synthetic.simulated_pair``): n examples, base accuracy 0.9, ten
classes, all five default classification metrics, each example newly wrong with probability
``churn / 2 + drop`` and newly right with ``churn / 2``. Every trial runs the real comparison
(:func:`evalsentry.comparison.measure` and :func:`~evalsentry.comparison.decide`, default
config: tolerances, alpha 0.05, 2000 sign flips) and, on the same pair, the exact oracle: accuracy
alone, ``b - c > tolerance * n`` in integers and the exact McNemar p below alpha.

Tables:
1. family-wise false FAIL under the null (drop 0), default tolerances and zero tolerances;
2. accuracy's power, gate vs oracle (and Holm over the same p-values, the old correction);
3. the detectable drop an INCONCLUSIVE message states (accuracy, and nll as a sign-flip
   secondary) vs the simulated 80%-power point;
4. the exact false-PASS rate of the non-inferiority bound when the true drop equals the tolerance.
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import stats

from evalsentry.comparison import Unit, decide, measure
from evalsentry.config import GatePolicy, Tolerance
from evalsentry.stats import holm, mcnemar_p, within_tolerance
from evalsentry.verdicts import Verdict
from tests.synthetic import simulated_pair

FIVE = ["accuracy", "macro_f1", "nll", "ece", "top5_accuracy"]
CLASSES = 10
ACCURACY = 0.9
ALPHA = 0.05
TOLERANCE = Fraction("0.01")  # the default accuracy tolerance
OVERALL = [Unit("", None, "gate")]
SIZES = (360, 1000)
CHURNS = (0.0, 0.01, 0.03, 0.05)
RELATIVE_DROPS = (0.02, 0.05, 0.08)


def _zero_policy() -> GatePolicy:
    zero = Tolerance(max_drop=0.0)
    return GatePolicy(default=zero, metrics=dict.fromkeys(FIVE, zero))


Job = tuple[int, float, float, bool, int, int, float]


def _trial_batch(job: Job) -> dict[str, int]:
    """Run ``trials`` simulated comparisons of one cell; count FAILs of the gate and the oracle.

    ``shift`` adds that much to every current loss: an nll drop with accuracy unchanged.
    """
    n, churn, drop, zero, trials, seed, shift = job
    policy = _zero_policy() if zero else GatePolicy()
    allowed = Fraction(0) if zero else TOLERANCE * n
    rng = np.random.default_rng(seed)
    counts = {"any": 0, "accuracy": 0, "nll": 0, "oracle": 0, "holm": 0}
    for _ in range(trials):
        ref, cur = simulated_pair(rng, n, churn, drop, ACCURACY)
        cur = {**cur, "loss": cur["loss"] + shift}
        measured = measure(ref, cur, FIVE, OVERALL, policy, CLASSES)
        decided = decide(measured, policy)
        fails = [d.verdict == Verdict.FAIL for d in decided]
        accuracy = measured[0]
        b, c = accuracy.newly_wrong or 0, accuracy.newly_right or 0
        oracle = b - c > allowed and float(mcnemar_p(b, b + c)) < ALPHA
        adjusted = holm([m.p_value for m in measured])
        counts["any"] += any(fails)
        counts["accuracy"] += fails[0]
        counts["nll"] += fails[FIVE.index("nll")]
        counts["oracle"] += oracle
        counts["holm"] += accuracy.beyond and adjusted[0] < ALPHA
    return counts


def _run_cells(
    cells: list[tuple[int, float, float, bool, int]],
    workers: int,
    shifts: list[float] | None = None,
) -> list[dict[str, int]]:
    """Each cell split into batches over the worker processes; the counts summed per cell."""
    jobs: list[Job] = []
    owners = []
    for index, (n, churn, drop, zero, trials) in enumerate(cells):
        shift = shifts[index] if shifts else 0.0
        batches = max(1, min(workers, trials // 50))
        for batch in range(batches):
            size = trials // batches + (batch < trials % batches)
            seed = hash((n, churn, drop, zero, batch, shift)) % 2**32
            jobs.append((n, churn, drop, zero, size, seed, shift))
            owners.append(index)
    totals: list[dict[str, int]] = [{} for _ in cells]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for owner, counts in zip(owners, pool.map(_trial_batch, jobs), strict=True):
            for key, value in counts.items():
                totals[owner][key] = totals[owner].get(key, 0) + value
    return totals


def _se(rate: float, trials: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-12) / trials)


def false_alarms(trials: int, workers: int) -> tuple[list[str], float]:
    """Table 1 and the worst family-wise false FAIL rate minus alpha, in Monte Carlo SEs."""
    cells = [(n, c, 0.0, zero, trials) for zero in (False, True) for n in SIZES for c in CHURNS[1:]]
    counts = _run_cells(cells, workers)
    lines = [
        "| tolerances | n | churn | gate: any of 5 metrics FAILs | oracle: accuracy alone |",
        "|---|---|---|---|---|",
    ]
    worst = -math.inf
    for (n, churn, _, zero, t), count in zip(cells, counts, strict=True):
        rate, oracle = count["any"] / t, count["oracle"] / t
        worst = max(worst, (rate - ALPHA) / _se(ALPHA, t))
        lines.append(
            f"| {'zero' if zero else 'default'} | {n} | {churn:.0%} | {rate:.3f} | {oracle:.3f} |"
        )
    limit = ALPHA + 2 * _se(ALPHA, trials)
    lines.append(f"\n{trials} trials a row: alpha + 2 SE = {limit:.3f}.")
    return lines, worst


def power(trials: int, workers: int) -> tuple[list[str], float]:
    """Table 2 and the largest shortfall of accuracy's power against the oracle."""
    cells = [
        (n, c, ACCURACY * r, False, trials) for n in SIZES for c in CHURNS for r in RELATIVE_DROPS
    ]
    counts = _run_cells(cells, workers)
    lines = [
        "| n | churn | relative drop | oracle | gate (family) | gate - oracle | Holm (old correction) |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for (n, churn, drop, _, t), count in zip(cells, counts, strict=True):
        oracle, gate, old = count["oracle"] / t, count["accuracy"] / t, count["holm"] / t
        worst = max(worst, oracle - gate)
        lines.append(
            f"| {n} | {churn:.0%} | {drop / ACCURACY:.0%} | {oracle:.3f} | {gate:.3f} "
            f"| {gate - oracle:+.3f} | {old:.3f} |"
        )
    return lines, worst


def _old_formula(n: int) -> float:
    """The detectable drop the gate used to state: z * sqrt(2 p (1 - p) / n), unadjusted."""
    z = stats.norm.isf(ALPHA) + stats.norm.isf(0.2)
    return max(
        z * math.sqrt(2 * ACCURACY * (1 - ACCURACY) / n), math.ceil(math.log2(1 / ALPHA)) / n
    )


STATEMENTS = 30  # null comparisons whose stated drops are summarised by their median


def _stated(n: int, churn: float, metric: str) -> float:
    """The detectable drop a comparison of this size and churn states for ``metric``: the median
    over ``STATEMENTS`` simulated null comparisons, each with its own churn and family level.

    A single comparison estimates the churn (and, for nll, the loss's spread) from its own few
    discordant examples, so one statement varies around this median (at n = 360 by about a
    fifth for nll).
    """
    from evalsentry.comparison import detectable_of
    from evalsentry.multiplicity import effective_levels

    policy = GatePolicy()
    rng = np.random.default_rng(n + round(churn * 1000))
    index = FIVE.index(metric)
    drops = []
    for _ in range(STATEMENTS):
        measured = measure(*simulated_pair(rng, n, churn, 0.0), FIVE, OVERALL, policy, CLASSES)
        null_p = np.stack([m.null_p for m in measured], axis=1)
        level = effective_levels(null_p, primary=0, share=policy.secondary_share, alpha=ALPHA)
        drops.append(detectable_of(measured[index], level[index]) or math.nan)
    return float(np.nanmedian(drops))


def _check(
    settings: list[tuple[int, float]], metric: str, trials: int, workers: int
) -> tuple[list[str], float]:
    """Rows of stated vs simulated 80%-power drops for ``metric``, and the largest error.

    Accuracy drops are simulated as extra newly wrong examples; nll drops as every current
    loss shifted up by the drop (accuracy unchanged, so nll is judged as a secondary).
    """
    factors = (0.8, 0.9, 1.0, 1.1, 1.2)
    stated = {setting: _stated(*setting, metric) for setting in settings}
    cells, shifts = [], []
    for n, churn in settings:
        for f in factors:
            drop = stated[(n, churn)] * f
            cells.append((n, churn, drop if metric == "accuracy" else 0.0, False, trials))
            shifts.append(0.0 if metric == "accuracy" else drop)
    counts = _run_cells(cells, workers, shifts)
    lines, worst = [], 0.0
    for i, (n, churn) in enumerate(settings):
        drop = stated[(n, churn)]
        rates = np.array([counts[len(factors) * i + j][metric] for j in range(len(factors))])
        rates = rates / trials
        # A probit line through all five points: every trial informs the 80% point.
        probits = stats.norm.ppf(np.clip(rates, 0.5 / trials, 1 - 0.5 / trials))
        slope, intercept = np.polyfit(np.array(factors) * drop, probits, 1)
        simulated = float((stats.norm.ppf(0.8) - intercept) / slope) if slope > 0 else math.nan
        error = simulated / drop - 1
        worst = max(worst, abs(error))
        old = f" {_old_formula(n):.4f} |" if metric == "accuracy" else " |"
        lines.append(
            f"| {metric} | {n} | {churn:.0%} | {drop:.4f} | {simulated:.4f} | {error:+.1%} "
            f"| {rates[2]:.3f} |{old}"
        )
    return lines, worst


def detectable(trials: int, workers: int, sizes: tuple[int, ...]) -> tuple[list[str], float]:
    """Table 3 and the largest relative error of the stated drop against the simulated 80% point."""
    head = [
        "| metric | n | churn | stated (median) | simulated 80% point | error | power at stated "
        "| old formula |",
        "|---|---|---|---|---|---|---|---|",
    ]
    settings = [(n, c) for n in sizes for c in (0.01, 0.03) if n < 5000 or c == 0.03]
    accuracy, worst = _check(settings, "accuracy", trials, workers)
    nll, nll_worst = _check([(360, 0.03), (1000, 0.03)], "nll", trials, workers)
    return [*head, *accuracy, *nll], max(worst, nll_worst)


def false_pass(sizes: tuple[int, ...] = (72, 360, 1000, 5000)) -> tuple[list[str], float]:
    """Table 4: P(PASS) when the true drop equals the tolerance, summed exactly over (b, c)."""
    lines = ["| n | churn 0% | churn 1% | churn 3% | churn 5% |", "|---|---|---|---|---|"]
    worst = 0.0
    tolerance = float(TOLERANCE)
    for n in sizes:
        row = []
        for churn in CHURNS:
            p_b, p_c = churn / 2 + tolerance, churn / 2
            top = min(n, int(n * p_b + 12 * math.sqrt(n * p_b + 1)) + 5)
            b = np.arange(top + 1)
            total = 0.0
            for wrong, weight in zip(b, stats.binom.pmf(b, n, p_b), strict=True):
                if weight < 1e-14:
                    continue
                c = np.arange(0, n - wrong + 1)
                law = (
                    stats.binom.pmf(c, n - wrong, p_c / (1 - p_b))
                    if p_c > 0
                    else (c == 0).astype(float)
                )
                keep = law > 1e-14
                passed = [
                    within_tolerance(int(wrong), int(x), n, tolerance, ALPHA) for x in c[keep]
                ]
                total += weight * float((law[keep] * np.array(passed)).sum())
            worst = max(worst, total)
            row.append(f"{total:.4f}")
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return lines, worst


def run(quick: bool = False, scale: float = 1.0, workers: int = 2) -> dict[str, Any]:
    """Print the four tables; return the headline numbers for `make bench`."""
    start = time.perf_counter()
    null_trials = int((300 if quick else 600) * scale)
    power_trials = int((100 if quick else 250) * scale)
    detect_trials = int((80 if quick else 200) * scale)
    print("\n## Family-wise false FAIL under the null (exchangeable retrains)\n")
    table, fwer = false_alarms(null_trials, workers)
    print("\n".join(table))
    print(
        f"\n## Accuracy's power, gate vs the exact single-metric oracle ({power_trials} trials)\n"
    )
    table, gap = power(power_trials, workers)
    print("\n".join(table))
    print(f"\n## Detectable drop stated vs simulated 80%-power point ({detect_trials} trials)\n")
    table, error = detectable(detect_trials, workers, (360, 1000) if quick else (360, 1000, 5000))
    print("\n".join(table))
    print("\n## False PASS when the true drop equals the tolerance (exact)\n")
    table, worst_pass = false_pass((72, 360, 1000) if quick else (72, 360, 1000, 5000))
    print("\n".join(table))
    elapsed = time.perf_counter() - start
    print(f"\n{elapsed:.0f} s")
    return {
        "gate_fwer_worst_excess_se": fwer,
        "gate_power_worst_gap": gap,
        "gate_detectable_worst_error": error,
        "gate_false_pass_worst": float(worst_pass),
        "gate_power_bench_s": elapsed,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and sizes")
    parser.add_argument(
        "--trials-scale", type=float, default=1.0, help="multiply every trial count"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    run(args.quick, args.trials_scale, args.workers)
