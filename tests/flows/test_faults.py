"""Fault injection through the weekly flow: each fault fails loudly and loses nothing.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from tests.flows.api import wait_for_events
from tests.models import TRUST, Marker, TinyNet
from tests.unit.evalsets.test_evalsets import rewrite


def _history(config: Path) -> History:
    return History(load_config(config).store_url)


def test_f1_tampered_evalset_fires_the_invalid_event(toy_project: Path, toy_evalset: Path) -> None:
    """1: one changed byte fails the run before inference and fires evalsentry.evalset.invalid."""
    data = toy_evalset / "data" / "part-000.parquet"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    data.write_bytes(bytes(raw))
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed() and "evalset file changed since freeze" in state.message
    _assert_only_not_evaluated(toy_project, "the evalset is invalid: ")
    assert wait_for_events("evalsentry.evalset.invalid", "evalsentry.evalset.toy")


def _assert_only_not_evaluated(project: Path, reason: str) -> None:
    """The week holds the line's ERROR row, saying why, and no result: nothing ran."""
    rows = _history(project).evaluations()
    assert rows["status"].tolist() == ["error"]
    assert rows["error"].iloc[0].startswith(reason)
    assert _history(project).metrics(rows["evaluation_id"]).empty


def test_f2_suite_breaking_content_fails_before_inference(
    toy_project: Path, toy_evalset: Path
) -> None:
    """2: a label outside the classes fails the suite; the run names the expectation; nothing runs."""
    table = pq.read_table(toy_evalset / "data" / "part-000.parquet")
    labels = table.column("label").to_numpy().copy()
    labels[3] = 9
    rewrite(
        toy_evalset, table.set_column(table.column_names.index("label"), "label", pa.array(labels))
    )
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    assert "expect_column_values_to_be_in_set(label)" in state.message
    _assert_only_not_evaluated(toy_project, "the evalset is invalid: ")


def test_f5_checkpoint_swapped_for_a_malicious_pickle_is_refused_unrun(
    toy_project: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """5: a registered file replaced by a code-running pickle is refused; its command never runs."""
    target = tmp_path / "swapped.pt"
    target.write_bytes(toy_checkpoints["good"].read_bytes())
    Registry(load_config(toy_project).registry_url).register(
        target, "swapped", stage="production", trust=TRUST
    )
    marker = tmp_path / "pwned"
    torch.save({"model_state_dict": {}, "lineage": Marker(str(marker))}, target)
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed() and "swapped" in state.message
    assert not marker.exists()
    frame = _history(toy_project).evaluations().set_index("model")
    assert frame.loc["swapped", "status"] == "error" and frame.loc["toy-model", "status"] == "ok"
    assert wait_for_events("evalsentry.checkpoint.failed", "evalsentry.model.swapped")


def test_f8_two_runs_of_the_same_week_at_once_lose_nothing(toy_project: Path) -> None:
    """8 and 9: concurrent runs of one week both finish; the read view shows one result per key."""
    states: list[object] = []

    def run() -> None:
        states.append(weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert [s.is_completed() for s in states] == [True, True]  # type: ignore[attr-defined]
    history = _history(toy_project)
    assert len(history.evaluations()) == 1
    assert len(history.evaluations(include_superseded=True)) == 2


def test_f10_model_producing_nan_is_an_error_row_listing_example_ids(
    toy_project: Path, tmp_path: Path, pinned_git: str, train_data: Path
) -> None:
    """10: NaN outputs make an ERROR row naming the first example ids; the run ends Failed.

    The NaN weights are registered on purpose (``allow_nonfinite``); register refuses them
    otherwise (76).
    """
    model = TinyNet(features=4, classes=3, hidden=8)
    with torch.no_grad():
        model.body[2].bias.fill_(float("nan"))  # type: ignore[index,union-attr]
    path = save_checkpoint(
        model,
        tmp_path / "nan.pt",
        metrics={},
        config={},
        seed=0,
        data=train_data,
        factory_kwargs={"features": 4, "classes": 3, "hidden": 8},
    )
    Registry(load_config(toy_project).registry_url).register(
        path, "nan-model", stage="production", trust=TRUST, allow_nonfinite=True
    )
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed() and "nan-model" in state.message
    error = _history(toy_project).evaluations().set_index("model").loc["nan-model", "error"]
    assert "NaN/inf outputs for 300 example(s), first: toy-000000" in error
