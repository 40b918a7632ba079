"""Running a model over token sequences: length-sorted batches, padded to their longest row.

Rows are sorted by length (stably, so ties keep the evalset's order) and cut into batches, each
padded with the evalset's ``pad_id`` to its own longest row; the model is called with keyword
inputs (``model(input_ids=..., attention_mask=..., **named)``) and every result is written back
to its row, so what follows sees the evalset's order. A multiple-choice row becomes one sequence
per continuation (context then continuation); its rows are sorted by context plus longest
continuation.

What each task takes from the output (floating logits, or an object with a ``logits`` tensor,
as Hugging Face models return):

- classification, regression, multi-label: ``[B, C]`` / ``[B]`` as for fixed inputs;
- language modelling: ``[B, T, V]`` next-token logits; position ``t`` predicts token ``t + 1``;
  a row's score is its mean negative log-likelihood over the tokens it scores (every real token
  after the first, or after its prompt);
- multiple choice: the same logits over each context + continuation; a continuation's score is
  the sum (or mean, as frozen) of its tokens' log-probabilities.

Before the first forward the contract is checked where it can be without running the model:
the keyword inputs against ``forward``'s signature, and the pad id and largest token id against
the model's first embedding. Each is one line naming what was expected.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from evalsentry.evalsets.inputs import Ragged, TokenInputs, spans
from evalsentry.evaluation.contract import (
    ForwardRaised,
    ModelFailed,
    OutputContractViolation,
    check_output,
    describe_output,
)
from evalsentry.evaluation.memory import halved

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evaluation.inference import ProgressFn

SCORED_TASKS = ("language_modeling", "multiple_choice")


@dataclass
class TokenRun:
    """What a token evalset's forward passes gave, in the evalset's order, and what it cost."""

    raw: torch.Tensor  # [N, C] outputs; LM: [N, 2] (nll sum, scored tokens); MC: [N, K] scores
    seconds: float
    batch_size: int
    retries: int
    tokens: int  # real (unpadded) tokens the model read
    padded: int  # tokens it was given, padding included


@dataclass(frozen=True)
class _Batch:
    rows: np.ndarray  # the evalset rows in this batch
    kwargs: dict[str, Any]  # the model's keyword inputs
    ids: torch.Tensor
    mask: torch.Tensor
    scored_from: torch.Tensor | None  # LM, MC: first scored position of each sequence
    owner: np.ndarray | None  # MC: each sequence's row (within the batch) and choice
    choice: np.ndarray | None


def forward_tokens(
    model: torch.nn.Module,
    forward: Callable[..., Any],
    evalset: Evalset,
    device: torch.device,
    *,
    batch_size: int,
    precision: str,
    progress: ProgressFn | None,
    only: np.ndarray | None = None,
) -> TokenRun:
    """Every row's output, batched by length (see the module docstring).

    ``only``: run these rows alone (paired timing's sample); the others' outputs are left unset.
    """
    import torch

    inputs = evalset.token_inputs()
    check_keywords(model, evalset)
    order, width = _sorted_rows(inputs)
    if only is not None:
        order = order[np.isin(order, only)]
    total, on_cuda = len(order), device.type == "cuda"
    results: list[tuple[np.ndarray, torch.Tensor]] = []
    retries, done, tokens, padded = 0, 0, 0, 0
    with torch.inference_mode():
        if total:
            check_vocabulary(model, evalset, _collate(evalset, order[:1], device))
        start = time.perf_counter()
        while done < total:
            rows = order[done : done + max(1, batch_size // width)]
            batch = _collate(evalset, rows, device)
            try:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    out = forward(**batch.kwargs)
            except torch.OutOfMemoryError:
                if batch_size == 1:
                    raise
                batch_size, retries = halved(batch_size, done, on_cuda), retries + 1
                continue
            except Exception as exc:  # whatever a model raises is its own failure, named
                raise ForwardRaised(exc, done) from exc
            results.append((rows, _scores(out, batch, evalset)))
            tokens += int(batch.mask.sum())
            padded += batch.mask.numel()
            done += len(rows)
            if progress is not None:
                progress(done, total)
        raw = _in_order(results, len(inputs.tokens.lengths))
        if on_cuda:
            torch.cuda.synchronize()
    return TokenRun(raw, time.perf_counter() - start, batch_size, retries, tokens, padded)


def _sorted_rows(inputs: TokenInputs) -> tuple[np.ndarray, int]:
    """Rows by length (context plus longest continuation), and sequences per row."""
    lengths = inputs.tokens.lengths
    width = 1
    if inputs.choices is not None and inputs.choice_rows is not None:
        counts = np.diff(inputs.choice_rows)
        longest = np.zeros(len(lengths), np.int64)
        owner = np.repeat(np.arange(len(lengths)), counts)
        np.maximum.at(longest, owner, inputs.choices.lengths)
        lengths, width = lengths + longest, int(counts.max(initial=1))
    return np.argsort(lengths, kind="stable"), width


def check_served(model: torch.nn.Module, evalset: Evalset, device: torch.device) -> None:
    """The contract checks :func:`forward_tokens` makes, before a model is served rows."""
    import torch

    check_keywords(model, evalset)
    with torch.inference_mode():
        check_vocabulary(model, evalset, _collate(evalset, np.arange(1), device))


def served_batch(
    evalset: Evalset, rows: np.ndarray, device: torch.device
) -> tuple[dict[str, Any], int]:
    """``rows`` as one served batch: the model's padded keyword inputs, and its real tokens."""
    batch = _collate(evalset, rows, device)
    return batch.kwargs, int(batch.mask.sum())


def _collate(evalset: Evalset, rows: np.ndarray, device: torch.device) -> _Batch:
    """The padded keyword inputs of ``rows`` (one sequence per continuation for choices)."""
    import torch

    inputs, spec = evalset.token_inputs(), evalset.spec.inputs
    parts: list[tuple[Ragged, np.ndarray]] = [(inputs.tokens, rows)]
    owner = choice = None
    if inputs.choices is not None and inputs.choice_rows is not None:
        counts = np.diff(inputs.choice_rows)[rows]
        owner = np.repeat(np.arange(len(rows)), counts)
        which = spans(inputs.choice_rows[rows], counts)
        choice = which - np.repeat(inputs.choice_rows[rows], counts)
        parts = [(inputs.tokens, rows[owner]), (inputs.choices, which)]
    ids, mask, first = _pad(parts, int(spec.pad_id or 0))
    scored = first if inputs.choices is not None else evalset.targets[rows]
    sequence_rows = rows if owner is None else rows[owner]  # choices: one sequence each
    as_tensor = {k: torch.from_numpy(v[sequence_rows]) for k, v in inputs.named.items()}
    kwargs = {
        str(spec.keyword): torch.from_numpy(ids).to(device),
        str(spec.mask): torch.from_numpy(mask).to(device),
        **{k: v.to(device) for k, v in as_tensor.items()},
    }
    scored_from = (
        torch.from_numpy(np.asarray(scored, np.int64)).to(device)
        if evalset.spec.task in SCORED_TASKS
        else None
    )
    return _Batch(
        rows, kwargs, kwargs[str(spec.keyword)], kwargs[str(spec.mask)], scored_from, owner, choice
    )


def _pad(parts: list[tuple[Ragged, np.ndarray]], pad_id: int) -> tuple[np.ndarray, ...]:
    """Sequences made of each part's rows end to end, right-padded to the longest.

    Returns the ids ``[B, T]``, the mask (1 on real tokens) and where each sequence's last part
    starts (a continuation's first token).
    """
    lengths = [part.lengths[which] for part, which in parts]
    total = np.sum(lengths, axis=0)
    ids = np.full((len(total), int(total.max(initial=1))), pad_id, np.int64)
    mask = np.zeros(ids.shape, np.int64)
    at = np.zeros(len(total), np.int64)
    for i, ((part, which), length) in enumerate(zip(parts, lengths, strict=True)):
        row = np.repeat(np.arange(len(total)), length)
        column = spans(at, length)
        ids[row, column] = part.values[spans(part.offsets[which], length)]
        mask[row, column] = 1
        if i < len(parts) - 1:
            at = at + length
    return ids, mask, at


def _logits(out: Any) -> Any:
    """The logits of an output: the tensor itself, or a model output's ``logits``."""
    logits = getattr(out, "logits", None)
    return logits if logits is not None and not hasattr(out, "dim") else out


def _scores(out: Any, batch: _Batch, evalset: Evalset) -> torch.Tensor:
    """One batch's per-row result (see ``TokenRun.raw``), its output checked first."""
    import torch

    out = _logits(out)
    task = evalset.spec.task
    if task not in SCORED_TASKS:
        check_output(out, len(batch.rows), evalset.spec)
        return out.float()  # type: ignore[no-any-return]
    ids, mask = batch.ids, batch.mask
    check_sequence_logits(out, ids, evalset)
    steps = out.shape[1] - 1
    nll = torch.nn.functional.cross_entropy(
        out[:, :-1].reshape(-1, out.shape[-1]).float(), ids[:, 1:].reshape(-1), reduction="none"
    ).view(len(ids), steps)
    position = torch.arange(1, steps + 1, device=ids.device)
    first = cast("torch.Tensor", batch.scored_from)
    scored = mask[:, 1:].bool() & (position[None, :] >= first[:, None])
    total = torch.where(scored, nll, torch.zeros_like(nll)).sum(dim=1, dtype=torch.float64)
    count = scored.sum(dim=1)
    if task == "language_modeling":
        return torch.stack([total, count.double()], dim=1)
    score = -total / count if evalset.spec.scoring == "mean" else -total
    owner, choice = cast("np.ndarray", batch.owner), cast("np.ndarray", batch.choice)
    table = torch.full(
        (len(batch.rows), int(choice.max()) + 1), -torch.inf, dtype=torch.float64, device=ids.device
    )
    table[torch.from_numpy(owner), torch.from_numpy(choice)] = score
    return table


def _in_order(results: list[tuple[np.ndarray, torch.Tensor]], total: int) -> torch.Tensor:
    """The batches' rows back in the evalset's order (multiple choice: padded to the widest)."""
    import torch

    if not results:
        return torch.empty(0)
    first = results[0][1]
    if first.dim() == 1:
        raw = torch.empty(total, dtype=first.dtype, device=first.device)
        for rows, out in results:
            raw[torch.from_numpy(rows).to(out.device)] = out
        return raw
    width = max(out.shape[1] for _, out in results)
    raw = torch.full((total, width), -torch.inf, dtype=first.dtype, device=first.device)
    for rows, out in results:
        raw[torch.from_numpy(rows).to(out.device), : out.shape[1]] = out
    return raw


def check_sequence_logits(out: Any, ids: torch.Tensor, evalset: Evalset) -> None:
    """A language model's output: floating ``[B, T, V]`` logits covering every id it must score.

    Raises:
        OutputContractViolation: naming the expected and the actual shape.
    """
    import torch

    batch, length = ids.shape
    fits = (
        isinstance(out, torch.Tensor)
        and out.is_floating_point()
        and out.dim() == 3
        and tuple(out.shape[:2]) == (batch, length)
        and out.shape[2] > int(ids.max())
    )
    if not fits:
        raise OutputContractViolation(
            f"float next-token logits of shape [{batch}, {length}, V] (one row of V scores per "
            f"position, V above the largest token id {int(ids.max())}) for "
            f"{evalset.spec.task.replace('_', ' ')}",
            describe_output(out),
        )


def check_keywords(model: torch.nn.Module, evalset: Evalset) -> None:
    """The keyword inputs against ``model.forward``'s parameters, before any forward.

    Raises:
        ModelFailed: a parameter the evalset does not give, or an input the model does not take.
    """
    given = evalset.spec.inputs.keywords
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return  # a forward without a signature: the call itself will say
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        names: set[str] | None = None
    else:
        names = {p.name for p in parameters if p.kind is not p.VAR_POSITIONAL}
    needed = [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    missing = [name for name in needed if name not in given]
    extra = [name for name in given if names is not None and name not in names]
    if missing or extra:
        what = (
            f"the model's forward needs {', '.join(map(repr, missing))}, which the evalset does "
            "not give"
            if missing
            else f"the model's forward takes no {', '.join(map(repr, extra))}"
        )
        raise ModelFailed(
            f"missing named input: {what} (the evalset {evalset.spec.name!r} passes "
            f"{', '.join(given)}); bind the model to an evalset of the inputs it takes"
        )


class _Found(Exception):
    """Stops the probe's forward at the embedding that reads the token ids."""


def input_embedding(model: torch.nn.Module, batch: _Batch) -> torch.nn.Embedding | None:
    """The embedding that reads the token ids: the first lookup of exactly ``batch.ids``.

    Found by running ``batch`` until some ``nn.Embedding`` is called on the ids (the forward
    stops there, before the lookup: eager, even when the run compiles the model); ``None`` where
    none is, or the model fails first (the run itself then reports that failure).
    """
    import torch
    from torch import nn

    def probe(module: nn.Module, args: tuple[Any, ...]) -> None:
        seen = args[0] if args else None
        if not isinstance(seen, torch.Tensor) or seen.shape != batch.ids.shape:
            return
        if torch.equal(seen, batch.ids):
            raise _Found(module)

    hooks = [
        m.register_forward_pre_hook(probe) for m in model.modules() if isinstance(m, nn.Embedding)
    ]
    try:
        model(**batch.kwargs)
    except _Found as found:
        return cast("nn.Embedding", found.args[0])
    except Exception:  # noqa: BLE001 - the model's own failure: the run names it
        return None
    finally:
        for hook in hooks:
            hook.remove()
    return None


def check_vocabulary(model: torch.nn.Module, evalset: Evalset, batch: _Batch) -> None:
    """The pad id and the largest token id against the embedding that reads the token ids.

    Raises:
        ModelFailed: an id the embedding has no row for.
    """
    inputs, spec = evalset.token_inputs(), evalset.spec.inputs
    embedding = input_embedding(model, batch)
    if embedding is None:
        return
    size = embedding.num_embeddings
    if int(spec.pad_id or 0) >= size:
        raise ModelFailed(
            f"pad id {spec.pad_id} is out of the model's vocabulary (the embedding of its "
            f"{spec.keyword!r} takes ids 0..{size - 1}); freeze the evalset with the model's "
            "own pad id"
        )
    largest = max(
        (
            int(r.values.max())
            for r in (inputs.tokens, inputs.choices)
            if r is not None and r.values.size
        ),
        default=0,
    )
    if largest >= size:
        raise ModelFailed(
            f"token id {largest} in the evalset is out of the model's vocabulary (the "
            f"embedding of its {spec.keyword!r} takes ids 0..{size - 1}); was the evalset tokenised "
            "for another model?"
        )
