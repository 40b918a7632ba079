"""Per-example columns of the tasks beyond classification and regression.

Every task yields one row per example, so the paired gate, flips, slices and drift read them as
they read a classifier's:

- multi-label: ``target`` and ``prediction`` as bit masks (bit ``i``: label ``classes[i]``; a
  logit above 0, or a probability of at least 0.5, predicts it), ``hamming`` (the share of
  labels right), ``loss`` (mean binary cross-entropy over the labels), ``probabilities`` (each
  label's chance);
- language modelling: ``loss`` (mean negative log-likelihood per scored token), ``tokens``
  (tokens scored), ``nll_sum``;
- multiple choice: ``target`` and ``prediction`` (indices among the row's choices), ``loss``
  (negative log of the true continuation's share of the choices' softmax), ``confidence``
  (the chosen continuation's share), ``choices`` (how many the row offers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from evalsentry.errors import NonFiniteOutput
from evalsentry.names import PROBABILITIES

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets.evalset import Evalset

NON_FINITE_IDS_SHOWN = 10


def refuse_non_finite(bad: np.ndarray, evalset: Evalset) -> None:
    """NaN or inf in any example's result is the model's error, naming the first examples."""
    rows = np.flatnonzero(bad)
    if rows.size:
        raise NonFiniteOutput(evalset.ids[rows[:NON_FINITE_IDS_SHOWN]].tolist(), len(rows))


def multilabel_columns(raw: torch.Tensor, evalset: Evalset) -> dict[str, np.ndarray]:
    """A multi-label model's ``[N, L]`` output as bit masks, Hamming score and loss."""
    import torch

    refuse_non_finite(~torch.isfinite(raw).all(dim=1).cpu().numpy(), evalset)
    truth = torch.from_numpy(np.asarray(evalset.targets, np.bool_)).to(raw.device)
    if evalset.spec.outputs == "probabilities":
        predicted = raw >= 0.5
        logits = torch.logit(raw.clamp(1e-7, 1 - 1e-7))
    else:
        predicted, logits = raw > 0, raw
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, truth.float(), reduction="none"
    ).mean(dim=1)
    bits = 2 ** torch.arange(raw.shape[1], device=raw.device, dtype=torch.int64)
    return {
        "example_id": evalset.ids,
        "target": (truth.long() * bits).sum(dim=1).cpu().numpy(),
        "prediction": (predicted.long() * bits).sum(dim=1).cpu().numpy(),
        "hamming": (predicted == truth).double().mean(dim=1).cpu().numpy(),
        "loss": loss.double().cpu().numpy(),
        PROBABILITIES: torch.sigmoid(logits).float().cpu().numpy(),
    }


def language_model_columns(raw: torch.Tensor, evalset: Evalset) -> dict[str, np.ndarray]:
    """Per-row negative log-likelihood sums and scored-token counts as mean NLL per token."""
    total, count = raw[:, 0].double().cpu().numpy(), raw[:, 1].cpu().numpy().astype(np.int64)
    refuse_non_finite(~np.isfinite(total), evalset)
    return {
        "example_id": evalset.ids,
        "loss": total / np.maximum(count, 1),
        "tokens": count,
        "nll_sum": total,
    }


def choice_columns(raw: torch.Tensor, evalset: Evalset) -> dict[str, np.ndarray]:
    """Each row's continuation scores ``[N, K]`` (-inf past its own choices) as a prediction."""
    import torch

    counts = np.diff(np.asarray(evalset.token_inputs().choice_rows))
    offered = np.arange(raw.shape[1])[None, :] < counts[:, None]
    scores = raw.double().cpu()
    refuse_non_finite((offered & ~np.isfinite(scores.numpy())).any(axis=1), evalset)
    log_share = torch.log_softmax(scores, dim=1)
    target = torch.from_numpy(np.asarray(evalset.targets, np.int64))
    return {
        "example_id": evalset.ids,
        "target": target.numpy(),
        "prediction": scores.argmax(dim=1).numpy(),
        "loss": (-log_share.gather(1, target[:, None]).squeeze(1)).numpy(),
        "confidence": log_share.max(dim=1).values.exp().numpy(),
        "choices": counts,
    }
