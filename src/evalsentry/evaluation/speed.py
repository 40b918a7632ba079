"""Paired timing: two checkpoints timed in one process on the same examples, round after round.

Both run alternately (ABBA), after a warm-up each; a round repeats its pass over the examples
for about ``MIN_ROUND_S`` and keeps the fastest pass, since another process can only add time.
This runs in the evaluation's child process (``evalsentry.evaluation.isolation``), where the
checkpoints' code runs; ``evalsentry.evaluation.timing`` judges what it measured.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets.evalset import Evalset

ROUNDS = 7
EXAMPLES = 2048
#: A token evalset is timed on its first rows (in id order) up to this many tokens, choices
#: included: its own lengths and padding, at a cost that does not grow with the evalset.
TOKENS = 16384
#: A round repeats a model's pass over the examples until it lasts about this long, and keeps
#: the fastest pass. Each model's pass count is sized from its own warm-up pass, and a round
#: stops once it has lasted ``MAX_ROUND_S`` (a pass slower than its warm-up): a week's timing
#: is about ``ROUNDS * 2 * MIN_ROUND_S``, whatever the two models' speeds.
MIN_ROUND_S = 0.05
MAX_ROUND_S = 2 * MIN_ROUND_S
MAX_PASSES = 1000
#: Seconds a pair's timing may take (``cost.timing_budget_s``): where the warm-up passes say
#: the rounds would take longer, the sample is cut to fit (never below ``MIN_EXAMPLES``).
DEFAULT_BUDGET_S = 5.0
MIN_EXAMPLES = 32


@dataclass(frozen=True)
class PairedTiming:
    """Seconds each checkpoint took over the same examples: its fastest pass in each round."""

    reference_s: list[float]  # per round, the fastest of its passes over the examples
    current_s: list[float]
    examples: int  # per pass
    device: str
    budget_s: float | None = None  # the sample was cut to fit this budget

    @property
    def ratios(self) -> list[float]:
        """Each round's current time over the reference's."""
        return [c / r for c, r in zip(self.current_s, self.reference_s, strict=True) if r > 0]

    @property
    def ratio(self) -> float:
        """The median round's ratio."""
        return float(statistics.median(self.ratios))

    def per_example(self) -> tuple[float, float]:
        """Median seconds per example: reference, current."""
        return (
            statistics.median(self.reference_s) / self.examples,
            statistics.median(self.current_s) / self.examples,
        )


def time_pair(
    reference: torch.nn.Module,
    current: torch.nn.Module,
    evalset: Evalset,
    *,
    device: str,
    rounds: int = ROUNDS,
    examples: int = EXAMPLES,
    batch_size: int = 512,
    budget_s: float = DEFAULT_BUDGET_S,
) -> PairedTiming:
    """Time both models over the evalset's first ``examples`` inputs, ``rounds`` times each.

    A token evalset is timed on its first rows up to ``TOKENS`` tokens, in length-sorted padded
    batches, as it is evaluated. Where the warm-up passes say the whole would take more than
    ``budget_s``, the sample is cut in proportion, and the result says so: the timing then
    takes about ``budget_s`` (more only where one warm-up pass of each model already does).
    """
    import torch

    from evalsentry.evaluation.inference import resolve_device

    target = torch.device(resolve_device(device))
    models = [m.to(target).eval() for m in (reference, current)]
    run, size = _runner(evalset, target, examples, batch_size)

    def once(model: torch.nn.Module) -> float:
        return _pass(run, model, target)

    # Warm-up (allocator, kernels, caches), which also says what the rounds would cost: a pass
    # each to size them and at least one a round. Over the budget left, the sample is cut so
    # that those and a second warm-up (the batches' shapes change) fit.
    warm = sum(once(m) for m in models)
    left = budget_s - warm
    cut = (rounds + 1) * warm > left and size > MIN_EXAMPLES
    if cut:
        share = max(left, 0.0) / ((rounds + 2) * warm)
        kept = max(MIN_EXAMPLES, int(size * share))
        run, size = _runner(evalset, target, examples, batch_size, cut_to=kept)
        for model in models:
            once(model)  # warm again: the batches' shapes changed
    # How many passes make each model's round last MIN_ROUND_S: sized by its own pass, so a
    # fast model's count never runs a slow one.
    passes = [max(1, min(MAX_PASSES, math.ceil(MIN_ROUND_S / max(once(m), 1e-6)))) for m in models]
    seconds: tuple[list[float], list[float]] = ([], [])
    for round_ in range(rounds):
        for which in (0, 1) if round_ % 2 == 0 else (1, 0):
            seconds[which].append(_fastest(run, models[which], target, passes[which]))
    return PairedTiming(seconds[0], seconds[1], size, str(target), budget_s if cut else None)


def _pass(run: Callable[[torch.nn.Module], None], model: torch.nn.Module, target: Any) -> float:
    """Seconds of one pass of ``model`` over the sample (a CUDA device synchronised around it)."""
    import torch

    if target.type == "cuda":
        torch.cuda.synchronize(target)
    start = time.perf_counter()
    run(model)
    if target.type == "cuda":
        torch.cuda.synchronize(target)
    return time.perf_counter() - start


def _fastest(
    run: Callable[[torch.nn.Module], None], model: torch.nn.Module, target: Any, passes: int
) -> float:
    """The fastest of up to ``passes`` passes, stopping after ``MAX_ROUND_S``.

    The fastest: another process can only add time to a pass, never take it away.
    """
    best, start = math.inf, time.perf_counter()
    for _ in range(passes):
        best = min(best, _pass(run, model, target))
        if time.perf_counter() - start > MAX_ROUND_S:
            break
    return best


def _runner(
    evalset: Evalset,
    target: torch.device,
    examples: int,
    batch_size: int,
    cut_to: int | None = None,
) -> tuple[Callable[[torch.nn.Module], None], int]:
    """One timed pass of a model over the evalset's sample, and how many examples it reads.

    The sample: the first ``examples`` inputs (a token evalset: its rows up to ``TOKENS``
    tokens), or the first ``cut_to`` of those.
    """
    import torch

    from evalsentry.evaluation.inference import staged
    from evalsentry.evaluation.sequences import forward_tokens

    if evalset.spec.inputs.is_tokens:
        rows = token_sample(evalset)[:cut_to]

        def tokens(model: torch.nn.Module) -> None:
            forward_tokens(
                model,
                model,
                evalset,
                target,
                batch_size=batch_size,
                precision="fp32",
                progress=None,
                only=rows,
            )

        return tokens, len(rows)
    sample = staged(evalset, target)[0][:examples][:cut_to]

    def tensors(model: torch.nn.Module) -> None:
        with torch.inference_mode():
            for i in range(0, len(sample), batch_size):
                model(sample[i : i + batch_size].to(target, non_blocking=True, copy=True))

    return tensors, len(sample)


def token_sample(evalset: Evalset, budget: int = TOKENS) -> np.ndarray:
    """The first rows of a token evalset holding at most ``budget`` tokens (at least one row).

    A multiple-choice row counts its context once per choice, plus its choices.
    """
    inputs = evalset.token_inputs()
    cost = inputs.tokens.lengths.astype(np.int64)
    if inputs.choices is not None and inputs.choice_rows is not None:
        counts = np.diff(inputs.choice_rows)
        owner = np.repeat(np.arange(len(cost)), counts)
        cost = cost * counts + np.bincount(owner, inputs.choices.lengths, len(cost)).astype(
            np.int64
        )
    kept = int(np.searchsorted(np.cumsum(cost), budget, side="right"))
    return np.arange(max(1, min(kept, len(cost))))
