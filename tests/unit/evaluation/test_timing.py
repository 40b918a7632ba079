"""Paired timing: real models timed in one process, and the rule that turns rounds into a WARN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Outcome
from evalsentry.evaluation.speed import MIN_EXAMPLES, PairedTiming, time_pair
from evalsentry.evaluation.timing import ServingBill, TimingPair, slowdown_comparison
from evalsentry.gate.verdicts import Verdict
from tests.models import SlowNet, TinyNet

THRESHOLD = 0.25


def timing_pair() -> TimingPair:
    row: dict[str, Any] = {
        "evaluation_id": "e2",
        "week": "2026-W41",
        "model": "m",
        "version": 2,
        "evalset": "toy",
        "status": "ok",
    }
    previous = {"evaluation_id": "e1", "week": "2026-W40", "version": 1}
    return TimingPair(Outcome(row, [], None), previous)


def _timing(current: list[float]) -> PairedTiming:
    return PairedTiming([1.0] * len(current), current, 1000, "cpu")


def test_consistently_slower_rounds_are_a_warn_with_the_numbers() -> None:
    comparison = slowdown_comparison(timing_pair(), _timing([1.5] * 6 + [0.9]), THRESHOLD)
    assert comparison.verdict == Verdict.WARN
    assert comparison.reason.startswith(
        "1.50x the time per example of v1 on cpu (1,500 µs vs 1,000 µs; median of 7 paired rounds"
    )
    assert comparison.reason.endswith("serving costs 1.50x as much")
    assert (comparison.reference_value, comparison.value) == pytest.approx((1000.0, 1500.0))
    assert comparison.tolerance == pytest.approx(250.0)  # microseconds per example
    assert comparison.reference_week == "2026-W40"
    assert comparison.metric == "microseconds_per_example"
    assert comparison.describe().startswith(
        "WARN m@v2 on toy: microseconds_per_example vs previous-week: 1000.0000 -> 1500.0000"
    )


@pytest.mark.parametrize(
    "current",
    [
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0],  # one unlucky round
        [1.3, 1.3, 1.3, 1.3, 1.0, 1.0, 1.3],  # slower by the median, but not in every round
        [1.2] * 7,  # consistently, but within the threshold
    ],
)
def test_noise_or_a_small_slowdown_is_no_warn(current: list[float]) -> None:
    comparison = slowdown_comparison(timing_pair(), _timing(current), THRESHOLD)
    assert comparison.verdict == Verdict.PASS and comparison.reason.startswith("no slowdown: ")


def test_consistently_faster_rounds_say_cheaper_and_what_a_month_of_traffic_costs() -> None:
    """0.6x the time in all rounds but one: a PASS that says cheaper, and the month at traffic."""
    serving = ServingBill(requests_per_day=100_000, per_device_hour=3.0, currency="USD")
    comparison = slowdown_comparison(
        timing_pair(), _timing([0.6] * 6 + [1.1]), THRESHOLD, serving=serving
    )
    assert comparison.verdict == Verdict.PASS
    assert comparison.reason.startswith(
        "cheaper: 0.60x the time per example of v1 on cpu (600 µs vs 1,000 µs; median of 7 "
        "paired rounds (0.60x to 1.10x) over 1,000 examples, 6 faster by over 12%)"
    )
    # 1 ms an example, 100,000 a day for 30.4375 days: 0.845 hours at 3 USD, 2.54 USD; 0.6x: 1.52.
    assert comparison.reason.endswith(
        "serving costs 0.60x as much; at 100,000 requests/day: 2.54 -> 1.52 USD/month"
    )
    assert serving.month(0.001) == pytest.approx(0.001 * 100_000 * 365.25 / 12 / 3600 * 3.0)


def test_faster_in_only_some_rounds_is_not_called_cheaper() -> None:
    comparison = slowdown_comparison(timing_pair(), _timing([0.6] * 5 + [1.0] * 2), THRESHOLD)
    assert comparison.reason.startswith("no slowdown: ")


def test_a_timing_that_could_not_run_says_so() -> None:
    comparison = slowdown_comparison(timing_pair(), None, THRESHOLD, "checkpoint v1 is missing")
    assert comparison.verdict == Verdict.WARN
    assert comparison.reason == "paired timing against v1 could not run: checkpoint v1 is missing"


def test_real_models_timed_in_one_process(toy_evalset: Path) -> None:
    """A model doing four times the work is found slower; the same model against itself is not."""
    evalset = load_evalset(toy_evalset)
    torch.manual_seed(0)
    fast = TinyNet()
    slow = SlowNet()
    slow.load_state_dict(fast.state_dict())
    slower = time_pair(fast, slow, evalset, device="cpu", rounds=5)
    assert slower.ratio > 2
    assert slowdown_comparison(timing_pair(), slower, THRESHOLD).verdict == Verdict.WARN
    same = time_pair(fast, TinyNet(), evalset, device="cpu", rounds=5)
    assert slowdown_comparison(timing_pair(), same, THRESHOLD).verdict == Verdict.PASS
    assert same.examples == len(evalset)  # per pass; a round keeps its fastest pass


class CountingNet(TinyNet):
    """TinyNet that counts its forwards and takes ``pause`` seconds more over each."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause, self.calls = pause, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        self.calls += 1
        time.sleep(self.pause)
        return super().forward(x)


def test_a_fast_models_pass_count_never_runs_a_slow_one(toy_evalset: Path) -> None:
    """A 20-ms model timed against a microsecond one: each round of the slow one stops after
    MAX_ROUND_S, so it runs a handful of passes a round, not the fast one's thousand (which
    took minutes a week). Counted in forwards, not timed: one forward is one pass here."""
    from evalsentry.evaluation.speed import MAX_ROUND_S

    evalset = load_evalset(toy_evalset)
    fast, slow = CountingNet(0.0), CountingNet(0.02)
    timed = time_pair(fast, slow, evalset, device="cpu", rounds=3, batch_size=len(evalset))
    assert timed.ratio > 1
    per_round = MAX_ROUND_S / 0.02 + 1  # a round stops once it has lasted MAX_ROUND_S
    assert slow.calls <= 2 + 3 * per_round  # its two warm-up passes, then three rounds
    assert fast.calls > slow.calls  # the fast one still repeats its pass to fill a round


def test_a_timing_that_would_overrun_its_budget_is_cut_to_fit_and_says_so(
    toy_evalset: Path,
) -> None:
    """A 0.6 s pass (30 batches of 20 ms) against a 0.5 s budget: the warm-up passes say the
    rounds would take 2.4 s, so the sample is cut in proportion, and the verdict's reason
    names the budget; within the budget nothing is cut."""
    evalset = load_evalset(toy_evalset)
    fast, slow = CountingNet(0.0), CountingNet(0.02)
    timed = time_pair(fast, slow, evalset, device="cpu", rounds=3, batch_size=10, budget_s=0.5)
    assert MIN_EXAMPLES <= timed.examples < len(evalset) // 2 and timed.budget_s == 0.5
    reason = slowdown_comparison(timing_pair(), timed, THRESHOLD).reason
    assert (
        f"over {timed.examples:,} examples (the sample cut to fit the 0.5 s timing budget)"
        in reason
    )
    whole = time_pair(fast, TinyNet(), evalset, device="cpu", rounds=3, batch_size=10)
    assert whole.examples == len(evalset) and whole.budget_s is None
    assert "timing budget" not in slowdown_comparison(timing_pair(), whole, THRESHOLD).reason
