"""Verdicts are a function of the (example, values) pairs, never of the order rows were stored in.

The same two weeks are written twice: once in example order, once with each week's per-example
rows permuted (Hypothesis chooses the permutations). Every comparison of the two gates, p-values,
intervals and detectable drops included, must be identical to the last digit. Three kinds of
rows: a classifier's outputs, a language model's token losses, and an imported harness run
(scores averaged over epochs, examples grouped in clusters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalsentry.gate.week import Comparison, gate_week
from evalsentry.history.store import History
from evalsentry.sections import GatePolicy, Tolerance
from tests.synthetic import CLASSES, predictions, record_week

N = 240
BEFORE, AFTER = "2026-W40", "2026-W41"
POLICY = GatePolicy(default=Tolerance(max_drop=0.01))
Columns = dict[str, np.ndarray]


def classifier(seed: int, accuracy: float) -> Columns:
    """Outputs of a classifier: right on about ``accuracy`` of the examples, continuous losses."""
    rng = np.random.default_rng(seed)
    right = rng.random(N) < accuracy
    columns = predictions(right, seed)
    p_target = np.where(right, rng.uniform(0.5, 1.0, N), rng.uniform(0.01, 0.5, N))
    columns["loss"] = -np.log(p_target)
    columns["confidence"] = np.where(right, p_target, rng.uniform(0.5, 0.9, N))
    return columns


def language_model(seed: int, shift: float) -> Columns:
    """A language model's per-example token losses on texts of 5 to 60 tokens."""
    rng = np.random.default_rng(100)  # the same texts every week
    tokens = rng.integers(5, 61, N)
    noise = np.random.default_rng(seed).normal(0.0, 0.3, N)
    loss = np.clip(rng.uniform(2.0, 4.0, N) + shift + noise, 0.1, None)
    return {
        "example_id": np.array([f"text-{i:04d}" for i in range(N)]),
        "loss": loss,
        "nll_sum": loss * tokens,
        "tokens": tokens,
    }


def harness(seed: int, accuracy: float) -> Columns:
    """An imported harness run: 3 epochs' scores averaged, 4 samples per passage (cluster)."""
    rng = np.random.default_rng(seed)
    score = (rng.random((N, 3)) < accuracy).mean(axis=1)
    ids = np.array([f"passage-{i // 4:03d}/q{i % 4}" for i in range(N)], dtype=object)
    return {
        "example_id": ids,
        "score:acc": score,
        "prompt_hash": np.array([f"p{i}" for i in range(N)], dtype=object),
        "target_hash": np.array([f"t{i}" for i in range(N)], dtype=object),
        "cluster": np.array([f"passage-{i // 4:03d}" for i in range(N)], dtype=object),
        "cluster_key": np.full(N, "passage", dtype=object),
        "prediction": (score >= 0.5).astype(np.int64),
        "target": np.ones(N, np.int64),
        "repeats": np.full(N, 3, np.int64),
        "task_hash": np.full(N, "task", dtype=object),
        "harness": np.full(N, "inspect", dtype=object),
    }


#: kind -> (the two weeks' columns, the metrics recorded, the number of classes)
KINDS: dict[str, tuple[Callable[[], tuple[Columns, Columns]], tuple[str, ...], int | None]] = {
    "tensors": (
        lambda: (classifier(1, 0.85), classifier(2, 0.83)),
        ("accuracy", "nll", "macro_f1", "ece"),
        CLASSES,
    ),
    "tokens": (
        lambda: (language_model(1, 0.0), language_model(2, 0.03)),
        ("perplexity", "token_nll"),
        None,
    ),
    "harness": (lambda: (harness(1, 0.7), harness(2, 0.66)), ("score:acc",), None),
}


def write_weeks(root: Path, kind: str, orders: tuple[Any, Any]) -> History:
    """The kind's two weeks in a store of their own, each week's rows stored in its order."""
    weeks, metrics, classes = KINDS[kind]
    history = History(str(root / "store"))
    for week, columns, order, version in zip((BEFORE, AFTER), weeks(), orders, (1, 2), strict=True):
        record_week(
            history,
            week,
            np.ones(N, bool),
            version=version,
            checkpoint=str(version) * 64,
            columns=columns,
            metrics=metrics,
            num_classes=classes,
            order=order,
        )
    return history


def judged(comparison: Comparison) -> dict[str, Any]:
    """Everything a comparison says but the ids of the evaluations it compared."""
    fields = dataclasses.asdict(comparison)
    del fields["evaluation_id"], fields["reference_evaluation_id"]
    return fields


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_permuted_rows_give_the_same_verdicts_to_the_last_digit(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    stored = write_weeks(tmp_path_factory.mktemp(kind), kind, (None, None))
    expected = [judged(c) for c in gate_week(stored, AFTER, POLICY).comparisons]
    assert expected and all(c["p_value"] is not None for c in expected)

    @settings(
        max_examples=6,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        before=st.permutations(range(N)),
        after=st.permutations(range(N)),
    )
    def check(before: list[int], after: list[int]) -> None:
        history = write_weeks(tmp_path_factory.mktemp(kind), kind, (before, after))
        got = [judged(c) for c in gate_week(history, AFTER, POLICY).comparisons]
        np.testing.assert_equal(got, expected)

    check()
