"""A line's training data holding rows of its evalset: the weekly run says so in every view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalsentry.cli import main
from evalsentry.history.store import History
from evalsentry.names import LEAK_METRIC


def _training_data(evalset: Path, out: Path, leaked: int) -> None:
    """300 training rows of the evalset's input column, ``leaked`` of them the evalset's own."""
    rows = pq.read_table(next((evalset / "data").glob("*.parquet"))).column("x").combine_chunks()
    ours = rows.flatten().to_numpy().reshape(-1, 4)[:leaked]
    other = np.random.default_rng(9).normal(size=(300 - leaked, 4)).astype(np.float32)
    values = np.concatenate([ours, other]).reshape(-1)
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(values), 4)}), out)


def test_a_leak_is_a_warn_of_the_week_a_fail_where_configured_and_clean_data_passes(
    toy_project: Path, toy_evalset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = toy_project.parent
    settings = toy_project.read_text()
    toy_project.write_text(
        settings + "models:\n  toy-model: {evalsets: [toy], train_data: train.parquet}\n"
    )
    config = ["--config", str(toy_project)]
    history = History(str(root / "store"))

    # Clean training data: checked, PASS.
    _training_data(toy_evalset, root / "train.parquet", leaked=0)
    assert main(["run", "--week", "2026-W40", *config]) == 0
    capsys.readouterr()
    stored = history.comparisons()
    leaks = stored[stored["metric"] == LEAK_METRIC]
    assert leaks["verdict"].tolist() == ["PASS"]
    assert leaks["reason"].item().startswith("none of its 300 examples is in its training data")

    # 12 of the evalset's rows in it: a WARN of the week, in the gate, the history, the report.
    _training_data(toy_evalset, root / "train.parquet", leaked=12)
    assert main(["run", "--week", "2026-W41", *config]) == 0
    said = capsys.readouterr().out
    assert "2026-W41: WARN toy-model@v1 leaked_examples" in said, said
    assert main(["gate", "--week", "2026-W41", *config]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if LEAK_METRIC in line and "WARN " in line[:9]]
    assert len(rows) == 1, out
    assert "12 of 300 examples (4.0%) are in its training data train.parquet (exact 12)" in rows[0]
    stored = history.comparisons()
    leaks = stored[(stored["metric"] == LEAK_METRIC) & (stored["week"] == "2026-W41")]
    assert leaks["verdict"].tolist() == ["WARN"] and leaks["value"].tolist() == [12.0]
    report = next((root / "store" / "reports").glob("weekly-eval-2026-W41*.md")).read_text()
    assert LEAK_METRIC in report

    # With leak: fail, the week fails.
    toy_project.write_text(
        settings
        + "models:\n  toy-model: {evalsets: [toy], train_data: train.parquet, leak: fail}\n"
    )
    assert main(["run", "--week", "2026-W42", *config]) == 1
    said = capsys.readouterr()
    assert "2026-W42: FAIL toy-model@v1 leaked_examples" in said.out + said.err
