"""Results that cannot be poisoned: what one checkpoint does never changes another's result.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest
import torch
from prefect.task_runners import ThreadPoolTaskRunner

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from tests.models import TRUST, MutatingNet

WEEK = "2026-W40"


def _as(model_class: type[torch.nn.Module], good: Path, path: Path, train_data: Path) -> Path:
    """The good toy checkpoint's weights, saved as a checkpoint of ``model_class``."""
    payload = torch.load(good, weights_only=True)
    model = model_class(features=4, classes=3, hidden=8)
    model.load_state_dict(payload["model_state_dict"])
    return save_checkpoint(
        model,
        path,
        metrics={},
        config={"model": model_class.__name__},
        seed=7,
        data=train_data,
        factory_kwargs={"features": 4, "classes": 3, "hidden": 8},
    )


def test_59_a_model_editing_its_input_in_place_changes_no_other_result(
    toy_project: Path, toy_checkpoints: dict[str, Path], tmp_path: Path, train_data: Path
) -> None:
    """59: a forward doing x.div_(16) first, in the same evaluation process as two healthy copies.

    One task at a time, so one child evaluates all three in turn: the healthy ones still score
    the teacher's labels perfectly and predict alike.
    """
    registry = Registry(load_config(toy_project).registry_url)
    mutant = _as(MutatingNet, toy_checkpoints["good"], tmp_path / "mutant.pt", train_data)
    registry.register(mutant, "a-mutant", stage="production", trust=TRUST)
    registry.register(toy_checkpoints["good"], "b-good", stage="production", trust=TRUST)
    one_at_a_time = weekly_eval.with_options(task_runner=ThreadPoolTaskRunner(max_workers=1))
    state = one_at_a_time(week=WEEK, config_path=str(toy_project), return_state=True)
    assert state.is_completed(), state.message
    history = History(load_config(toy_project).store_url)
    rows = history.evaluations().set_index("model")
    metrics = history.metrics(rows["evaluation_id"])
    accuracy = metrics[(metrics["metric"] == "accuracy") & (metrics["slice"] == "")]
    by_model = dict(zip(rows.loc[:, "evaluation_id"], rows.index, strict=True))
    scored = {
        by_model[e]: v for e, v in zip(accuracy["evaluation_id"], accuracy["value"], strict=True)
    }
    assert scored["b-good"] == scored["toy-model"] == 1.0
    assert scored["a-mutant"] < 1.0  # it spoiled its own copy of the data, and only that
    good = history.predictions(str(rows.loc["b-good", "evaluation_id"]))
    same = history.predictions(str(rows.loc["toy-model", "evaluation_id"]))
    assert good is not None and same is not None
    assert np.array_equal(good["prediction"], same["prediction"])


def test_70_a_history_write_retried_after_a_failure_resumes(
    toy_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """70: the store refuses the metrics file once, after the predictions file was written.

    The write-history task's retry finds its own predictions file and resumes: the week is
    recorded once, and nothing says the store refused a name.
    """
    import evalsentry.history.files as history_module

    real = history_module.write_atomic
    refused: list[str] = []

    def flaky(fs: object, path: str, data: bytes, **kwargs: object) -> bool:
        if "/metrics/" in path and not refused:
            refused.append(path)
            raise OSError(errno.EIO, "Input/output error")
        return real(fs, path, data, **kwargs)

    monkeypatch.setattr(history_module, "write_atomic", flaky)
    state = weekly_eval(week=WEEK, config_path=str(toy_project), return_state=True)
    assert refused and state.is_completed(), state.message
    history = History(load_config(toy_project).store_url)
    rows = history.evaluations(include_superseded=True)
    assert len(rows) == 1 and rows["status"].tolist() == ["ok"]
    assert history.predictions(str(rows["evaluation_id"].iloc[0])) is not None


def test_71_a_tampered_evalset_is_one_line_in_the_run_log(
    toy_project: Path, toy_evalset: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """71: the check that refuses a tampered evalset logs its reason, and no traceback."""
    import logging

    data = toy_evalset / "data" / "part-000.parquet"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    data.write_bytes(bytes(raw))
    with caplog.at_level(logging.INFO):
        state = weekly_eval(week=WEEK, config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    refused = [r for r in caplog.records if "changed since freeze" in r.getMessage()]
    assert refused, "the reason is logged"
    assert all(r.exc_info is None and not r.exc_text for r in refused)
    assert "Traceback" not in caplog.text
