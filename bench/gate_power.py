"""The gate's error rates, measured: FAIL at the tolerance, power, against an exact oracle.

    python -m bench --only gate_power         # runs it and writes bench/results/gate_power.md
    python -m bench.gate_power [--quick] [--workers 2]   # prints the tables only

Simulated retrains (``tests.synthetic.simulated_pair``): n examples, base accuracy 0.9, ten
classes, all five default classification metrics, each example newly wrong with probability
``churn / 2 + drop`` and newly right with ``churn / 2``. Every trial runs the real comparison
(:func:`evalsentry.gate.comparison.measure` and :func:`~evalsentry.gate.comparison.decide`, the default
config: tolerances, alpha 0.05, 2000 sign flips). The exact oracle is the exact margin test of
accuracy alone at full alpha (:mod:`evalsentry.gate.margin`): on the same draws, and summed exactly
over every outcome (no simulation error). Every cell has its own fixed seed.

Tables:
1. FAIL when the true drop equals the tolerance (1 point), beside the power at 1.5x and 2x it:
   n 360/1000/5000, churn 1/3/5%;
2. accuracy's power at n 360, churn 3%, drops of 2-3 points: the family against the oracle on
   the same draws (the gap is the family correction's cost);
3. how an honest retrain (no drop) reads: PASS, WARN, INCONCLUSIVE of each kind, FAIL, on this
   generator and on a second, independent one (``tests.synthetic.logit_pair``);
4. family-wise false FAIL with zero tolerances and no change: the family correction's own check;
5. the detectable drop an INCONCLUSIVE message states, against the simulated FAIL rate there;
6. false PASS when the true drop equals the tolerance (exact).
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from evalsentry.gate.comparison import Measurement, Unit, decide, detectable_of, measure
from evalsentry.gate.margin import margin_test
from evalsentry.gate.multiplicity import effective_levels
from evalsentry.gate.resolution import pass_probability
from evalsentry.gate.verdicts import Verdict
from evalsentry.sections import GatePolicy, Tolerance
from tests.synthetic import logit_pair, simulated_pair

FIVE = ["accuracy", "macro_f1", "nll", "ece", "top5_accuracy"]
CLASSES = 10
ACCURACY = 0.9
ALPHA = 0.05
TOLERANCE = 0.01  # the default accuracy tolerance
OVERALL = [Unit("", None, "gate")]
SIZES = (360, 1000, 5000)
CHURNS = (0.01, 0.03, 0.05)
MULTIPLES = (1.0, 1.5, 2.0)
SMALL_DROPS = (0.02, 0.025, 0.03)  # table 2: n 360, churn 3%
STATEMENTS = 15  # null comparisons whose stated detectable drops are summarised by their median
BATCH = 40  # trials per job

#: Trials per cell: (n <= 1000, n = 5000) at full size; --quick takes a quarter.
TRIALS = {
    "at_tolerance": (300, 120),
    "power": (100, 40),
    "small_drops": (500, 0),
    "honest": (200, 80),
    "honest_logits": (200, 80),
    "zero": (300, 0),
    "detectable": (200, 80),
}

Job = tuple[str, int, float, float, int, int]  # table, n, churn, drop, trials, seed


def _zero_policy() -> GatePolicy:
    zero = Tolerance(max_drop=0.0)
    return GatePolicy(default=zero, metrics=dict.fromkeys(FIVE, zero))


def _week(decided: list[Any]) -> str:
    """How the week reads: FAIL, INCONCLUSIVE (a possible regression), WARN or PASS."""
    verdicts = {d.verdict for d in decided}
    if Verdict.FAIL in verdicts:
        return "FAIL"
    if any(d.verdict == Verdict.INCONCLUSIVE and d.kind != "unresolved" for d in decided):
        return "INCONCLUSIVE"
    return "WARN" if Verdict.WARN in verdicts else "PASS"


def _trials(job: Job) -> Counter[str]:
    """Run one batch of simulated comparisons; count what the gate and the oracle said."""
    table, n, churn, drop, trials, seed = job
    policy = _zero_policy() if table == "zero" else GatePolicy()
    rng = np.random.default_rng(seed)
    counts: Counter[str] = Counter()
    for _ in range(trials):
        pair = logit_pair(rng, n) if table == "honest_logits" else simulated_pair(rng, n, churn, drop, ACCURACY)  # fmt: skip
        measured = measure(*pair, FIVE, OVERALL, policy, CLASSES)
        # Verdicts only: the detectable drop an INCONCLUSIVE states is table 5's own business.
        decided = decide(measured, policy, explain=False)
        accuracy, said = measured[0], decided[0]
        counts["trials"] += 1
        counts["fail_any"] += any(d.verdict == Verdict.FAIL for d in decided)
        counts["fail_accuracy"] += said.verdict == Verdict.FAIL
        counts["oracle"] += accuracy.beyond and accuracy.p_value < ALPHA
        counts[f"week_{_week(decided)}"] += 1
        counts["any_unresolved"] += any(d.kind == "unresolved" for d in decided)
        counts["any_inconclusive"] += any(d.verdict == Verdict.INCONCLUSIVE for d in decided)
    return counts


def _seed(*key: float) -> int:
    """A fixed seed per cell and batch (not Python's salted hash)."""
    return int(np.random.SeedSequence([round(k * 100_000) for k in key]).generate_state(1)[0])


def _run(cells: list[tuple[str, int, float, float, int]], workers: int) -> list[Counter[str]]:
    """Each cell split into batches over the worker processes; the counts summed per cell."""
    jobs: list[Job] = []
    owners: list[int] = []
    for index, (table, n, churn, drop, trials) in enumerate(cells):
        for batch, start in enumerate(range(0, trials, BATCH)):
            size = min(BATCH, trials - start)
            key = (float(sum(map(ord, table))), n, churn, drop, batch)
            jobs.append((table, n, churn, drop, size, _seed(*key)))
            owners.append(index)
    totals: list[Counter[str]] = [Counter() for _ in cells]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for owner, counts in zip(owners, pool.map(_trials, jobs), strict=True):
            totals[owner].update(counts)
    return totals


def _trials_for(table: str, n: int, scale: float) -> int:
    small, large = TRIALS[table]
    return max(1, round((large if n >= 5000 else small) * scale))


def _se(rate: float, trials: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-12) / trials)


def _oracle(n: int, churn: float, drop: float) -> float:
    """The exact FAIL probability of the margin test of accuracy alone at full alpha."""
    return margin_test(n, Fraction(str(TOLERANCE)) * n).power(churn / 2, drop, ALPHA)


def at_tolerance(scale: float, workers: int) -> tuple[list[str], dict[str, float]]:
    """Table 1: FAIL at drop == tolerance beside the power at 1.5x and 2x, gate and oracle."""
    cells = [
        ("at_tolerance" if k == 1.0 else "power", n, c, k * TOLERANCE, 0)
        for n in SIZES
        for c in CHURNS
        for k in MULTIPLES
    ]
    cells = [(t, n, c, d, _trials_for(t, n, scale)) for t, n, c, d, _ in cells]
    counts = _run(cells, workers)
    lines = [
        "| n | churn | drop | trials | gate: any metric FAILs | gate: accuracy | oracle, "
        "same draws | oracle, exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    worst_rate, worst_se, worst_exact, worst_gap = 0.0, -math.inf, 0.0, -math.inf
    for (_, n, churn, drop, trials), count in zip(cells, counts, strict=True):
        fail, accuracy = count["fail_any"] / trials, count["fail_accuracy"] / trials
        oracle, exact = count["oracle"] / trials, _oracle(n, churn, drop)
        if drop == TOLERANCE:
            worst_rate = max(worst_rate, fail)
            worst_se = max(worst_se, (fail - ALPHA) / _se(ALPHA, trials))
            worst_exact = max(worst_exact, exact)
        else:
            worst_gap = max(worst_gap, oracle - accuracy)
        lines.append(
            f"| {n} | {churn:.0%} | {drop / TOLERANCE:.1f}x ({drop * 100:.1f} pts) | {trials} "
            f"| {fail:.3f} | {accuracy:.3f} | {oracle:.3f} | {exact:.3f} |"
        )
    lines.append(
        f"\nalpha + 2 SE: {ALPHA + 2 * _se(ALPHA, _trials_for('at_tolerance', 360, scale)):.3f} "
        f"at {_trials_for('at_tolerance', 360, scale)} trials, "
        f"{ALPHA + 2 * _se(ALPHA, _trials_for('at_tolerance', 5000, scale)):.3f} at "
        f"{_trials_for('at_tolerance', 5000, scale)} (n = 5000)."
    )
    return lines, {
        "gate_fail_at_tolerance_worst": worst_rate,
        "gate_fail_at_tolerance_worst_excess_se": worst_se,
        "oracle_fail_at_tolerance_exact_worst": worst_exact,
        "gate_power_gap_worst": worst_gap,
    }


def small_drops(scale: float, workers: int) -> tuple[list[str], dict[str, float]]:
    """Table 2: n 360, churn 3%, drops 2-3 points: the family's power against the oracle's."""
    cells = [
        ("small_drops", 360, 0.03, d, _trials_for("small_drops", 360, scale)) for d in SMALL_DROPS
    ]
    counts = _run(cells, workers)
    lines = [
        "| drop | trials | oracle, exact | oracle, same draws | gate: accuracy | gate - oracle "
        "(paired SE) |",
        "|---|---|---|---|---|---|",
    ]
    worst = -math.inf
    for (_, n, churn, drop, trials), count in zip(cells, counts, strict=True):
        oracle, gate = count["oracle"] / trials, count["fail_accuracy"] / trials
        # The gate FAILs only where the oracle does: the gap is one-sided, its SE binomial.
        gap = gate - oracle
        worst = max(worst, -gap)
        lines.append(
            f"| {drop * 100:.1f} pts | {trials} | {_oracle(n, churn, drop):.3f} | {oracle:.3f} "
            f"| {gate:.3f} | {gap:+.3f} ({_se(-gap, trials):.3f}) |"
        )
    return lines, {"gate_power_gap_360_churn3": worst}


def honest(scale: float, workers: int) -> tuple[list[str], dict[str, float]]:
    """Table 3: how an honest retrain (no drop, churn about 3%) reads, per generator and n.

    ``simulated``: :func:`tests.synthetic.simulated_pair` (right and wrong drawn first);
    ``logits``: :func:`tests.synthetic.logit_pair` (every metric from one softmax per retrain).
    """
    cells = [
        (table, n, 0.03, 0.0, _trials_for(table, n, scale))
        for table in ("honest", "honest_logits")
        for n in SIZES
    ]
    counts = _run(cells, workers)
    lines = [
        "| generator | n | trials | week PASS | WARN | INCONCLUSIVE (a possible regression) | FAIL "
        "| some comparison unresolved (informational) | some comparison INCONCLUSIVE, either kind |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    results = {}
    for (table, n, _, _, trials), count in zip(cells, counts, strict=True):
        share = {k: count[k] / trials for k in count}
        generator = "logits" if table == "honest_logits" else "simulated"
        key = "honest_retrain_logits" if table == "honest_logits" else "honest_retrain"
        lines.append(
            f"| {generator} | {n} | {trials} | {share.get('week_PASS', 0):.3f} | {share.get('week_WARN', 0):.3f} "
            f"| {share.get('week_INCONCLUSIVE', 0):.3f} | {share.get('week_FAIL', 0):.3f} "
            f"| {share.get('any_unresolved', 0):.3f} | {share.get('any_inconclusive', 0):.3f} |"
        )
        results[f"{key}_pass_or_warn_{n}"] = share.get("week_PASS", 0.0) + share.get("week_WARN", 0.0)  # fmt: skip
        results[f"{key}_inconclusive_{n}"] = share.get("week_INCONCLUSIVE", 0.0)
        results[f"{key}_unresolved_{n}"] = share.get("any_unresolved", 0.0)
    return lines, results


def zero_tolerance(scale: float, workers: int) -> tuple[list[str], dict[str, float]]:
    """Table 4: family-wise false FAIL with zero tolerances when nothing changed."""
    cells = [("zero", n, 0.03, 0.0, _trials_for("zero", n, scale)) for n in SIZES[:2]]
    counts = _run(cells, workers)
    lines = ["| n | churn | trials | any of 5 metrics FAILs |", "|---|---|---|---|"]
    worst = 0.0
    for (_, n, churn, _, trials), count in zip(cells, counts, strict=True):
        rate = count["fail_any"] / trials
        worst = max(worst, rate)
        lines.append(f"| {n} | {churn:.0%} | {trials} | {rate:.3f} |")
    return lines, {"gate_fwer_zero_tolerance_worst": worst}


def _stated(n: int, churn: float) -> float:
    """The detectable drop an accuracy comparison of this size and churn states: the median over
    ``STATEMENTS`` simulated null comparisons, each with its own churn and family level."""
    policy = GatePolicy()
    rng = np.random.default_rng(n + round(churn * 1000))
    drops = []
    for _ in range(STATEMENTS):
        measured: list[Measurement] = measure(
            *simulated_pair(rng, n, churn, 0.0), FIVE, OVERALL, policy, CLASSES
        )
        null_p = np.stack([m.null_p for m in measured], axis=1)
        level = effective_levels(null_p, primary=0, share=policy.secondary_share, alpha=ALPHA)
        drops.append(detectable_of(measured[0], level[0]) or math.nan)
    return float(np.nanmedian(drops))


def detectable(scale: float, workers: int) -> tuple[list[str], dict[str, float]]:
    """Table 5: the stated detectable drop, and the simulated FAIL rate of accuracy there."""
    settings = [(n, 0.03) for n in SIZES]
    stated = {setting: _stated(*setting) for setting in settings}
    cells = [
        ("detectable", n, churn, stated[(n, churn)], _trials_for("detectable", n, scale))
        for n, churn in settings
    ]
    counts = _run(cells, workers)
    lines = [
        "| n | churn | stated (median) | trials | gate: accuracy FAILs | oracle, exact (full "
        "alpha) |",
        "|---|---|---|---|---|---|",
    ]
    rates = []
    for (_, n, churn, drop, trials), count in zip(cells, counts, strict=True):
        rate = count["fail_accuracy"] / trials
        rates.append(rate)
        lines.append(
            f"| {n} | {churn:.0%} | {drop:.4f} | {trials} | {rate:.3f} "
            f"| {_oracle(n, churn, drop):.3f} |"
        )
    return lines, {
        "gate_power_at_stated_detectable_min": min(rates),
        "gate_power_at_stated_detectable_max": max(rates),
    }


def false_pass(sizes: tuple[int, ...] = (72, *SIZES)) -> tuple[list[str], float]:
    """Table 6: P(PASS) when the true drop equals the tolerance, summed exactly."""
    lines = [
        "| n | " + " | ".join(f"churn {c:.0%}" for c in (0.0, *CHURNS)) + " |",
        "|---|---|---|---|---|",
    ]
    worst = 0.0
    for n in sizes:
        row = [pass_probability(n, c / 2, TOLERANCE, TOLERANCE, ALPHA) for c in (0.0, *CHURNS)]
        worst = max(worst, *row)
        lines.append(f"| {n} | " + " | ".join(f"{p:.4f}" for p in row) + " |")
    return lines, worst


def run(quick: bool = False, workers: int = 2, tables: Path | None = None) -> dict[str, Any]:
    """Print the six tables (and write them to ``tables``); return the headline numbers."""
    start = time.perf_counter()
    scale = 0.25 if quick else 1.0
    document = [
        "# Gate statistics: FAIL at the tolerance, power, honest retrains",
        "",
        f"Default config (alpha {ALPHA}, accuracy tolerance {TOLERANCE}, 2000 sign flips), five "
        f"metrics, base accuracy {ACCURACY}, ten classes; `python -m bench --only gate_power`.",
    ]
    results: dict[str, Any] = {}
    sections = [
        ("1. FAIL at a true drop equal to the tolerance, and power beyond it", at_tolerance),
        ("2. Accuracy's power at n = 360, churn 3%: family against oracle", small_drops),
        ("3. An honest retrain (no drop, churn 3%): how the week reads", honest),
        ("4. Family-wise false FAIL with zero tolerances, nothing changed", zero_tolerance),
        ("5. The stated detectable drop (accuracy) and the FAIL rate there", detectable),
    ]
    for title, table in sections:
        lines, numbers = table(scale, workers)
        document += ["", f"## {title}", "", *lines]
        results.update(numbers)
        print("\n".join(document[-len(lines) - 3 :]), flush=True)
    lines, worst_pass = false_pass()
    document += ["", "## 6. False PASS at a true drop equal to the tolerance (exact)", "", *lines]
    print("\n".join(document[-len(lines) - 3 :]))
    results["gate_false_pass_worst"] = worst_pass
    elapsed = time.perf_counter() - start
    results["gate_power_bench_s"] = elapsed
    document += ["", f"{elapsed:.0f} s on {workers} worker process(es)."]
    print(f"\n{elapsed:.0f} s")
    if tables is not None:
        tables.write_text("\n".join(document) + "\n")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the trials")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    run(args.quick, args.workers)
