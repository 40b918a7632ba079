"""Broken models beside a good one: the week records, gates and reports everything, then fails.

A model whose forward raises, returns the wrong shape or type, or never returns is that pair's
ERROR, with its reason in the run's message and the history; the good model's results stand.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from tests.models import TRUST, SleepingNet
from tests.unit.evaluation.test_pipeline import BROKEN, save_model

WEEK = "2026-W40"
TIMEOUT = (
    "timed out after 2 s running the model; its process was killed "
    "(inference_timeout_s in evalsentry.yaml)"
)


#: Each way of breaking: the model class, its kwargs, and the reason it must be recorded with.
KINDS = {**BROKEN, "hangs": (SleepingNet, {}, TIMEOUT)}


def register_broken(config: Path, kind: str, folder: Path, train_data: Path) -> str:
    """Register a model broken in the way ``kind`` names as production; its expected reason."""
    model_class, kwargs, reason = KINDS[kind]
    path = save_model(model_class, folder / f"{kind}.pt", train_data, **kwargs)
    Registry(load_config(config).registry_url).register(path, kind, stage="production", trust=TRUST)
    return reason


def with_timeout(config: Path) -> Path:
    """The project config with a 2 s inference timeout."""
    config.write_text(config.read_text() + "inference_timeout_s: 2\n")
    return config


def evaluations(config: Path) -> pd.DataFrame:
    """The week's evaluation rows, by model."""
    return History(load_config(config).store_url).evaluations().set_index("model")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_broken_model_fails_itself_and_the_good_one_is_recorded_and_reported(
    kind: str, toy_project: Path, tmp_path: Path, train_data: Path, pinned_git: str
) -> None:
    """The broken model is an ERROR naming its reason; the good one is gated; the report is written."""
    config = with_timeout(toy_project)
    reason = register_broken(config, kind, tmp_path, train_data)
    state = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert state.is_failed()
    assert f"{kind}@v1" in state.message and reason in state.message
    frame = evaluations(config)
    assert frame.loc[kind, "status"] == "error" and frame.loc[kind, "error"] == reason
    assert frame.loc["toy-model", "status"] == "ok"
    history = History(load_config(config).store_url)
    accuracy = history.metrics([frame.loc["toy-model", "evaluation_id"]]).query(
        "metric == 'accuracy' and slice == ''"
    )
    assert accuracy["value"].tolist() == [1.0]
    reports = Path(load_config(config).store_url) / "reports"
    report = (reports / f"weekly-eval-{WEEK}.md").read_text()
    assert f"{kind}@v1" in report and "toy-model@v1" in report and reason in report


def test_a_hung_model_on_a_dask_worker_times_out_too(
    toy_project: Path, tmp_path: Path, train_data: Path, pinned_git: str
) -> None:
    """A Dask worker (a daemonic process) still runs each model in a child it can kill."""
    config = with_timeout(toy_project)
    register_broken(config, "hangs", tmp_path, train_data)
    state = weekly_eval(week=WEEK, config_path=str(config), task_runner="dask", return_state=True)
    assert state.is_failed() and "hangs@v1" in state.message and TIMEOUT in state.message
    frame = evaluations(config)
    assert frame.loc["toy-model", "status"] == "ok" and frame.loc["hangs", "error"] == TIMEOUT


def test_a_model_bound_to_an_evalset_of_the_wrong_width_is_that_pairs_error(
    tmp_path: Path, train_data: Path
) -> None:
    """A pair whose shapes disagree is an ERROR naming both shapes; the model's other pair runs."""
    from tests.bindings import estate

    bindings = "models:\n  narrow: {evalsets: [narrow, wide]}\n  wide: {evalsets: [wide]}\n"
    config = estate(tmp_path, bindings, train_data=train_data)
    state = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert state.is_failed()
    reason = (
        "input shape mismatch: the model's first layer (Linear 'body.0') takes 4 features, got "
        "float32 [60, 6]; the evalset 'wide' gives float32 [N, 6] (list column 'x' reshaped to "
        "[6]): bind the model to an evalset of the inputs it was built for (models: in "
        "evalsentry.yaml)"
    )
    assert reason in (state.message or "")
    rows = History(load_config(config).store_url).evaluations()
    outcome = {
        (m, e): (s, r)
        for m, e, s, r in zip(
            rows["model"], rows["evalset"], rows["status"], rows["error"], strict=True
        )
    }
    assert outcome[("narrow", "wide")] == ("error", reason)
    assert outcome[("narrow", "narrow")][0] == "ok" and outcome[("wide", "wide")][0] == "ok"
    assert len(outcome) == 3
