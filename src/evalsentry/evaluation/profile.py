"""A serving profile: throughput and latency percentiles of one checkpoint at several batch sizes.

Measured in the evaluation's child process (:mod:`evalsentry.evaluation.isolation`), where the
checkpoint's code runs, on the evalset's own inputs: for each batch size, one warm-up call,
then calls of that many examples (rotating through the evalset, an evalset smaller than the
batch repeated) each timed alone, a CUDA device synchronised around it, until the batch size's
share of the budget is spent (at least :data:`MIN_CALLS` calls). Each call's inputs are on the
device before its clock starts. The latency of a call is what a request served in that batch
waits; the throughput is the examples served per second of calls. This is the plain PyTorch
loop a server runs (``model(batch)`` under ``torch.inference_mode``), so there is no harness
overhead to subtract.

A token evalset is served as requests arrive: each call takes the next rows in the evalset's
order (not sorted by length), padded to the longest with its attention mask, as the model's
keyword inputs (a multiple-choice row with its choices); each call also counts the real tokens
it served, for tokens per second.
"""

from __future__ import annotations

import functools
import math
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry.errors import UsageError

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets.evalset import Evalset

DEFAULT_BATCH_SIZES = (1, 8, 32, 128)
DEFAULT_BUDGET_S = 10.0
MIN_CALLS = 5
MAX_CALLS = 2000


@dataclass(frozen=True)
class BatchProfile:
    """One batch size's calls: each call's seconds, in the order made."""

    batch_size: int
    seconds: list[float]
    tokens: list[int] | None = None  # a token evalset's: the real tokens of each call

    @property
    def tokens_per_s(self) -> float | None:
        """Real tokens served per second of calls; None for tensor inputs."""
        return None if self.tokens is None else sum(self.tokens) / sum(self.seconds)

    def latency_ms(self, percentile: float) -> float:
        """The ``percentile`` (50, 95, 99) of the calls' latencies, in milliseconds."""
        return float(np.percentile(self.seconds, percentile)) * 1e3

    @property
    def throughput(self) -> float:
        """Examples served per second of calls."""
        return self.batch_size * len(self.seconds) / sum(self.seconds)


@dataclass(frozen=True)
class ServingProfile:
    """A checkpoint's profile: each batch size's calls, where, and the peak memory."""

    device: str
    batches: list[BatchProfile]
    peak_memory_bytes: int | None

    def cheapest(self, p99_ms: float | None = None) -> BatchProfile | None:
        """The batch size serving the most examples per second within a p99 latency budget.

        Any batch size without ``p99_ms``; None when none is within it.
        """
        within = [b for b in self.batches if p99_ms is None or b.latency_ms(99) <= p99_ms]
        return max(within, key=lambda b: b.throughput, default=None)


def profile_batches(
    model: torch.nn.Module,
    evalset: Evalset,
    *,
    device: str,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    budget_s: float = DEFAULT_BUDGET_S,
) -> ServingProfile:
    """``model``'s calls at each batch size on the evalset's inputs, within ``budget_s``.

    Raises:
        UsageError: a batch size below 1.
    """
    import torch

    from evalsentry.evaluation.inference import resolve_device, staged

    if not batch_sizes or min(batch_sizes) < 1:
        raise UsageError(f"--batch-sizes {list(batch_sizes)}: give sizes of at least 1")
    target = torch.device(resolve_device(device))
    model = model.to(target).eval()
    share = budget_s / len(batch_sizes)
    if target.type == "cuda":
        torch.cuda.reset_peak_memory_stats(target)
    if evalset.spec.inputs.is_tokens:
        from evalsentry.evaluation.sequences import check_served

        check_served(model, evalset, target)  # inputs it takes, ids within its vocabulary
        calls = [_calls(model, _requests(evalset, size, target), size, target, share) for size in batch_sizes]  # fmt: skip
    else:
        sample = staged(evalset, target)[0]
        calls = [_calls(model, _slices(sample, size, target), size, target, share) for size in batch_sizes]  # fmt: skip
    return ServingProfile(str(target), calls, _peak_memory(target))


#: The ``i``-th call's positional and keyword inputs, on the device, and its real tokens (None
#: for tensor inputs).
Prepare = Callable[[int], tuple[tuple[Any, ...], dict[str, Any], int | None]]


def _slices(sample: torch.Tensor, size: int, target: torch.device) -> Prepare:
    """Tensor inputs: ``size`` rows at a time, in order, the sample repeated when smaller."""
    rows = len(sample)
    pool = sample if rows >= size else sample.repeat((math.ceil(size / rows),) + (1,) * (sample.dim() - 1))  # fmt: skip
    starts = list(range(0, max(len(pool) - size, 0) + 1, size)) or [0]

    def prepare(i: int) -> tuple[tuple[Any, ...], dict[str, Any], None]:
        start = starts[i % len(starts)]
        return (pool[start : start + size].to(target),), {}, None

    return prepare


def _requests(evalset: Evalset, size: int, target: torch.device) -> Prepare:
    """Token inputs: the next ``size`` rows in the evalset's order, padded as one batch."""
    from evalsentry.evaluation.sequences import served_batch

    rows = len(evalset)

    def prepare(i: int) -> tuple[tuple[Any, ...], dict[str, Any], int]:
        return (), *served_batch(evalset, (np.arange(size) + i * size) % rows, target)

    return prepare


def _calls(
    model: torch.nn.Module, prepare: Prepare, size: int, target: torch.device, share: float
) -> BatchProfile:
    """One batch size's timed calls, after a warm-up call."""
    import torch

    wait = functools.partial(torch.cuda.synchronize, target) if target.type == "cuda" else None
    seconds: list[float] = []
    tokens: list[int] = []
    with torch.inference_mode():
        args, kwargs, _ = prepare(0)
        model(*args, **kwargs)  # warm-up: allocator, kernels, caches
        began = time.perf_counter()
        while len(seconds) < MAX_CALLS and (
            len(seconds) < MIN_CALLS or time.perf_counter() - began < share
        ):
            args, kwargs, count = prepare(len(seconds))
            if wait is not None:
                wait()
            tick = time.perf_counter()
            model(*args, **kwargs)
            if wait is not None:
                wait()
            seconds.append(time.perf_counter() - tick)
            tokens += [] if count is None else [count]
    return BatchProfile(size, seconds, tokens or None)


def _peak_memory(target: torch.device) -> int | None:
    """Bytes: the device's peak allocation on CUDA; on CPU the child process's peak RSS."""
    import torch

    if target.type == "cuda":
        return int(torch.cuda.max_memory_allocated(target))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)
