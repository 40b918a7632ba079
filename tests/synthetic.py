"""Synthetic weekly results written straight into a real history, for gate and history tests."""

from __future__ import annotations

import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from evalsentry.gate.metrics import compute_metrics, get_metric
from evalsentry.history.store import History

CLASSES = 3
SHA_EVALSET = "e" * 64


def classification(
    n: int, accuracy: float, seed: int, num_classes: int = 10
) -> dict[str, np.ndarray]:
    """Synthetic per-example classification columns with the given accuracy (metric and stats tests)."""
    rng = np.random.default_rng(seed)
    target = rng.integers(0, num_classes, n)
    hit = rng.random(n) < accuracy
    prediction = np.where(hit, target, (target + rng.integers(1, num_classes, n)) % num_classes)
    return {
        "target": target,
        "prediction": prediction,
        "loss": rng.exponential(0.5, n),
        "confidence": rng.uniform(0.1, 1.0, n),
        "target_rank": np.where(hit, 0, rng.integers(1, num_classes, n)),
    }


def predictions(correct: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """Classification outputs on len(correct) examples: right where ``correct``, else wrong."""
    n = len(correct)
    rng = np.random.default_rng(seed)
    target = np.arange(n) % CLASSES
    wrong = (target + 1 + rng.integers(0, CLASSES - 1, n)) % CLASSES
    prediction = np.where(correct, target, wrong)
    confidence = np.where(correct, 0.9, 0.6)
    return {
        "example_id": np.array([f"ex-{i:05d}" for i in range(n)]),
        "target": target,
        "prediction": prediction,
        "loss": np.where(correct, -np.log(0.9), -np.log(0.2)),
        "confidence": confidence,
        "target_rank": np.where(correct, 0, 1),
        "slice:half": np.where(np.arange(n) % 2 == 0, "even", "odd"),
    }


def record_week(
    history: History,
    week: str,
    correct: np.ndarray,
    *,
    model: str = "m",
    version: int = 1,
    stage: str = "production",
    checkpoint: str = "c" * 64,
    evalset_sha: str = SHA_EVALSET,
    kind: str = "scheduled",
    status: str = "ok",
    metrics: tuple[str, ...] = ("accuracy", "nll"),
    store_predictions: bool = True,
    finished: datetime | None = None,
    columns: dict[str, np.ndarray] | None = None,
    num_classes: int | None = CLASSES,
    order: np.ndarray | None = None,
    **fields: Any,
) -> str:
    """Write one evaluation (row, metric rows overall and per slice, predictions); return its id.

    ``columns``: the per-example columns to store (default: classification outputs right where
    ``correct`` is); ``order``: a permutation of the rows as stored, applied after the metric
    rows are computed (the same results, written in another order).
    """
    evaluation_id = uuid.uuid4().hex
    finished = finished or datetime.now(UTC)
    row = {
        "evaluation_id": evaluation_id,
        "run_id": uuid.uuid4().hex,
        "week": week,
        "kind": kind,
        "started_at": finished - timedelta(seconds=1),
        "finished_at": finished,
        "status": status,
        "error": None if status == "ok" else "checkpoint corrupt",
        "model": model,
        "version": version,
        "stage": stage,
        "checkpoint_sha256": checkpoint,
        "evalset": "toy",
        "evalset_sha256": evalset_sha,
        "n_examples": len(correct) if columns is None else len(columns["example_id"]),
        "device": "cpu",
        "torch_version": "2.13.0",
        **fields,
    }
    cols = predictions(correct) if columns is None else columns
    rows = []
    if status == "ok" and metrics:
        units: list[tuple[str, np.ndarray | None]] = [("", None)]
        if "slice:half" in cols:
            units += [(f"half={h}", cols["slice:half"] == h) for h in ("even", "odd")]
        for slice_name, mask in units:
            for name, value in compute_metrics(
                cols, list(metrics), num_classes=num_classes, mask=mask, n_resamples=100
            ).items():
                rows.append(
                    {
                        "evaluation_id": evaluation_id,
                        "week": week,
                        "model": model,
                        "evalset": "toy",
                        "metric": name,
                        "slice": slice_name,
                        "value": value.value,
                        "ci_low": value.ci_low,
                        "ci_high": value.ci_high,
                        "n": value.n,
                        "higher_is_better": get_metric(name).higher_is_better,
                    }
                )
    if order is not None:
        cols = {name: values[order] for name, values in cols.items()}
    history.append(
        [row], rows, {evaluation_id: cols} if status == "ok" and store_predictions else None
    )
    return evaluation_id


def pre_ledger(store: str | Path) -> None:
    """Make the history at ``store`` one written before the ledger: every file, none recorded."""
    shutil.rmtree(Path(store) / "ledger")


def accuracy_mask(n: int, accuracy: float, seed: int = 0) -> np.ndarray:
    """A correctness vector with exactly round(n * accuracy) correct examples."""
    correct = np.zeros(n, bool)
    correct[np.random.default_rng(seed).permutation(n)[: round(n * accuracy)]] = True
    return correct


SIMULATED_CLASSES = 10


def _outputs(
    target: np.ndarray,
    correct: np.ndarray,
    wrong_class: np.ndarray,
    logit: np.ndarray,
    rank: np.ndarray,
) -> dict[str, np.ndarray]:
    """One model's columns: the top class, its confidence, the loss, the target's rank."""
    confidence = 1 / (1 + np.exp(-np.where(correct, 2.6 + logit, 0.3 + logit)))
    target_probability = np.where(correct, confidence, (1 - confidence) * 0.6)
    return {
        "target": target,
        "prediction": np.where(correct, target, wrong_class),
        "loss": -np.log(target_probability),
        "confidence": confidence,
        "target_rank": np.where(correct, 0, rank),
    }


def simulated_pair(
    rng: np.random.Generator,
    n: int,
    churn: float,
    drop: float,
    accuracy: float = 0.9,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Reference and current outputs of two checkpoints on the same ``n`` examples.

    The model of a retrain: each example is newly wrong with probability ``churn / 2 + drop``,
    newly right with ``churn / 2`` (so ``churn`` is the share of examples the two disagree on
    without a drop, and the expected accuracy drop is exactly ``drop``), else both right or both
    wrong. Confidences share a per-example latent and, when ``churn > 0``, carry independent
    noise per model: with ``drop = 0`` the two are exchangeable, the null hypothesis. With
    ``churn = 0`` and no drop the two are identical (the same checkpoint).
    """
    cells = [accuracy - churn / 2 - drop, churn / 2 + drop, churn / 2, 1 - accuracy - churn / 2]
    kind = rng.choice(4, size=n, p=cells)
    ref_ok, cur_ok = kind <= 1, (kind == 0) | (kind == 2)
    classes = SIMULATED_CLASSES
    target = rng.integers(0, classes, n)
    wrong_class = (target + rng.integers(1, classes, n)) % classes
    latent = rng.normal(0, 0.7, n)
    jitter = 0.3 if churn > 0 else 0.0
    ranks = 1 + np.minimum(rng.geometric(0.5, (2, n)) - 1, classes - 2)
    ref_rank = ranks[0]
    cur_rank = np.where(ref_ok == cur_ok, ref_rank, ranks[1])
    ref = _outputs(target, ref_ok, wrong_class, latent + rng.normal(0, jitter, n), ref_rank)
    cur = _outputs(target, cur_ok, wrong_class, latent + rng.normal(0, jitter, n), cur_rank)
    return ref, cur


def logit_pair(
    rng: np.random.Generator,
    n: int,
    *,
    noise: float = 0.13,
    strength: float = 3.0,
    sharpness: float = 2.8,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Two honest retrains on the same ``n`` examples, from a second, independent model.

    Each example has ten class logits: standard normal, its true class ``strength`` higher
    (what makes it easy or hard, shared by every retrain). Each retrain adds its own normal
    ``noise`` to every logit and predicts with the softmax of ``sharpness`` times them. Its
    prediction, confidence, loss and the target's rank all come from those probabilities, so
    the metrics move together as a real model's do (:func:`simulated_pair` draws right and
    wrong first and attaches confidences). The defaults give accuracy 0.90, 2.7-3.7% of examples
    right in one retrain only, and a confidence of 0.89 on average (calibrated).
    """
    classes = SIMULATED_CLASSES
    target = rng.integers(0, classes, n)
    shared = rng.normal(0, 1, (n, classes))
    shared[np.arange(n), target] += strength
    return tuple(  # type: ignore[return-value]
        _softmax_outputs(target, sharpness * (shared + rng.normal(0, noise, (n, classes))))
        for _ in range(2)
    )


def _softmax_outputs(target: np.ndarray, logits: np.ndarray) -> dict[str, np.ndarray]:
    """One model's columns from its class logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(target))
    target_log_p = log_p[rows, target]
    return {
        "target": target,
        "prediction": log_p.argmax(axis=1),
        "loss": -target_log_p,
        "confidence": np.exp(log_p.max(axis=1)),
        "target_rank": (log_p > target_log_p[:, None]).sum(axis=1),
    }
