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


def test_register_checks_the_line_s_evalsets_for_its_training_data_at_once(
    toy_project: Path,
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The weekly run's check, said when a version is registered; it never undoes the pin."""
    root = toy_project.parent
    settings = toy_project.read_text()
    toy_project.write_text(
        settings
        + "models:\n  toy-model: {evalsets: [toy], train_data: train.parquet, leak: fail}\n"
        + "  toy-other: {evalsets: [toy], train_data: missing.parquet}\n"
    )
    _training_data(toy_evalset, root / "train.parquet", leaked=12)
    config = ["--config", str(toy_project)]
    assert (
        main(["register", str(toy_checkpoints["degraded"]), "--model", "toy-model", *config]) == 0
    )
    registered, said = capsys.readouterr().out.splitlines()
    assert registered.startswith("registered toy-model@v2 (candidate)")
    assert said.startswith(
        "WARN split leaks: 12 of 300 examples of toy (4.0%) are in the training data (exact 12): "
        f"{root / 'train.parquet'}, 300 rows; "
    )
    assert said.endswith(
        "each week toy-model is evaluated on toy will FAIL (leak: fail); list them: evalsentry "
        f"evalset leak-check toy --train {root / 'train.parquet'}"
    )
    good = str(toy_checkpoints["good"])
    assert main(["register", good, "--model", "toy-other", "--new-model", *config]) == 0
    registered, said = capsys.readouterr().out.splitlines()
    assert registered.startswith("registered toy-other@v1 (candidate)")
    assert said.startswith(f"WARN split-leak check of toy not run: no training data at {root / 'missing.parquet'} ")
    # Registering a file again registers nothing, and checks nothing.
    assert main(["register", good, "--model", "toy-other", *config]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
