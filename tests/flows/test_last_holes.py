"""The last holes a hostile or careless checkpoint found: each now fails closed, and loudly.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

from pathlib import Path

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from tests.models import TRUST


def test_a_week_without_production_gates_its_candidate_against_the_line(
    toy_project: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """Production archived, a degraded candidate left: it FAILs against the line's last result."""
    registry = Registry(load_config(toy_project).registry_url)
    assert weekly_eval(
        week="2026-W39", config_path=str(toy_project), return_state=True
    ).is_completed()
    registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)  # v2, a candidate
    registry.archive("toy-model", 1)
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    assert (state.message or "").startswith("2026-W40: FAIL toy-model@v2 accuracy")
    assert "vs production" in (state.message or "")
    assert main(["gate", "--week", "2026-W40", "--config", str(toy_project)]) == 1


WEEK = "2026-W40"


def test_a_model_hanging_on_the_live_sample_is_a_drift_warning_not_a_hung_week(
    toy_project: Path, toy_checkpoints: dict[str, Path], tmp_path: Path, train_data: Path
) -> None:
    """The live-drift forward runs in the evaluation child under inference_timeout_s."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalsentry.history.store import History
    from tests.flows.test_poisoning import _as
    from tests.models import HangsOnLiveData

    live = tmp_path / "live.parquet"
    values = np.full((50, 4), 500.0, dtype=np.float32)  # far outside the frozen inputs
    pq.write_table(
        pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 4)}), live
    )
    toy_project.write_text(
        toy_project.read_text() + f"inference_timeout_s: 3\ndrift:\n  live:\n    toy: {live}\n"
    )
    registry = Registry(load_config(toy_project).registry_url)
    hangs = _as(HangsOnLiveData, toy_checkpoints["good"], tmp_path / "hangs.pt", train_data)
    registry.register(hangs, "toy-model", stage="production", trust=TRUST)
    state = weekly_eval(week=WEEK, config_path=str(toy_project), return_state=True)
    assert state.is_completed(), state.message
    drift = History(load_config(toy_project).store_url).drift([WEEK])
    measured = drift[drift["kind"] == "prediction"]
    assert measured["verdict"].tolist() == ["WARN"]
    assert measured["reason"].iloc[0].startswith("not measured: timed out after 3 s")


def test_an_entry_registered_before_the_check_fails_only_its_own_line(
    toy_project: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """A registry entry whose lineage holds a text seed: its line's ERROR; the others recorded."""
    import json

    from evalsentry.history.store import History

    registry = Registry(load_config(toy_project).registry_url)
    entry = registry.register(toy_checkpoints["degraded"], "odd", stage="production", trust=TRUST)
    path = Path(registry.path) / "odd" / "v000001.json"
    document = json.loads(path.read_text())
    document["lineage"]["seed"] = "abc"  # as an older evalsentry let in
    path.write_text(json.dumps(document))
    state = weekly_eval(week=WEEK, config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    assert "ERROR odd@v1" in (state.message or "") and entry.version == 1
    rows = History(load_config(toy_project).store_url).evaluations().set_index("model")
    assert rows.loc["toy-model", "status"] == "ok"
    assert rows.loc["odd", "status"] == "error"
    assert "lineage.seed: expected an integer" in rows.loc["odd", "error"]
