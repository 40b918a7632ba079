"""Split leaks: evalset rows planted into training data are found, and nothing else is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pv
import pyarrow.parquet as pq
import pytest

from evalsentry.cli import main
from evalsentry.errors import EvalsetError, UsageError
from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evalsets.hashing import row_hashes
from evalsentry.evalsets.leaks import check_leaks

FEATURES = [f"f{i}" for i in range(5)]


@pytest.fixture
def tabular(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """An evalset of 400 rows, and training data of 2,000 other rows, 10 exact and 6 near copies
    of evalset rows among them; the project, and the planted rows of each kind."""
    rng = np.random.default_rng(11)
    evaluation = rng.normal(size=(400, 5)).round(2)  # on a 0.01 grid
    train = rng.normal(size=(2000, 5)).round(2)
    exact, near = rng.choice(400, 10, replace=False), rng.choice(400, 16, replace=False)[10:]
    near = np.setdiff1d(near, exact)
    train[:10] = evaluation[exact]
    train[10 : 10 + len(near)] = evaluation[near] + rng.uniform(-3e-3, 3e-3, (len(near), 5))
    label = rng.integers(0, 2, 400)
    freeze_evalset(
        pa.table({**{f: evaluation[:, i] for i, f in enumerate(FEATURES)}, "y": label}),
        tmp_path / "evalsets" / "rows",
        name="rows",
        task="classification",
        target="y",
        inputs=InputsSpec(columns=FEATURES),
    )
    columns = {f: train[:, i] for i, f in enumerate(FEATURES)}
    pq.write_table(pa.table({**columns, "y": rng.integers(0, 2, 2000)}), tmp_path / "train.parquet")
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n")
    return tmp_path, exact, near


def test_exact_and_near_copies_are_found_and_nothing_else(
    tabular: tuple[Path, np.ndarray, np.ndarray],
) -> None:
    root, exact, near = tabular
    found = check_leaks(load_evalset(root / "evalsets" / "rows"), str(root / "train.parquet"))
    by_kind = {k: {leak.row for leak in found.leaks if leak.kind == k} for k in ("exact", "near")}
    assert by_kind["exact"] == set(exact.tolist())
    # Rounded to 2 places, a copy moved by at most 0.003 off the 0.01 grid is equal again.
    assert by_kind["near"] == set(near.tolist())
    for leak in found.leaks:
        if leak.kind == "exact":
            assert leak.train_row == int(np.flatnonzero(exact == leak.row)[0])
    assert found.headline().startswith(
        f"{len(found.leaks)} of 400 examples of rows ({len(found.leaks) / 400:.1%}) are in the "
        f"training data (exact {len(exact)}, near {len(found.leaks) - len(exact)}): "
        f"{root / 'train.parquet'}, 2,000 rows; "
    )


def test_the_command_warns_and_fails_only_when_asked(
    tabular: tuple[Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    root, exact, _ = tabular
    base = ["evalset", "leak-check", "rows", "--train", str(root / "train.parquet")]
    config = ["--config", str(root / "evalsentry.yaml")]
    assert main([*base, *config]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("WARN ") and " examples of rows (" in out[0]
    assert out[1].split() == ["example", "row", "kind", "training", "row", "overlap"]
    assert main([*base, "--fail-on-leak", *config]) == 1
    assert main([*base, "--jaccard", "1.5", *config]) == 2  # tabular rows: refused all the same
    capsys.readouterr()
    assert main([*base, "--format", "json", *config]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sum(leak["kind"] == "exact" for leak in document["leaks"]) == len(exact)


def test_csv_training_data_and_data_without_the_inputs(
    tabular: tuple[Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    root, exact, _ = tabular
    table = pq.read_table(root / "train.parquet")
    pv.write_csv(table, root / "train.csv")
    found = check_leaks(load_evalset(root / "evalsets" / "rows"), str(root / "train.csv"))
    assert {leak.row for leak in found.leaks if leak.kind == "exact"} == set(exact.tolist())
    pq.write_table(table.drop(["f3"]), root / "other.parquet")
    code = main(
        ["evalset", "leak-check", "rows", "--train", str(root / "other.parquet"), "--config",
         str(root / "evalsentry.yaml")]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(root / "other.parquet") in err[0]
    with pytest.raises(EvalsetError, match="no training data at "):
        check_leaks(load_evalset(root / "evalsets" / "rows"), str(root / "missing.parquet"))


def test_empty_or_textual_training_data_is_one_line_never_nothing_found(
    tabular: tuple[Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    """No row is no check (never "checked, nothing found"); text where the inputs are numbers
    is the file's fault, said in one line, exit 2."""
    root, _, _ = tabular
    table = pq.read_table(root / "train.parquet")
    pq.write_table(table.slice(0, 0), root / "empty.parquet")
    words = table.set_column(
        table.schema.get_field_index("f3"), "f3", pa.array(["x"] * table.num_rows)
    )
    pq.write_table(words, root / "words.parquet")
    rows = load_evalset(root / "evalsets" / "rows")
    with pytest.raises(EvalsetError, match="no training rows at "):
        check_leaks(rows, str(root / "empty.parquet"))
    for name in ("empty", "words"):
        args = ["evalset", "leak-check", "rows", "--train", str(root / f"{name}.parquet")]
        assert main([*args, "--config", str(root / "evalsentry.yaml")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name}.parquet" in err[0], err


def _shingles(ids: list[int]) -> set[tuple[int, ...]]:
    return {tuple(ids[i : i + 5]) for i in range(len(ids) - 4)}


def test_token_rows_found_exact_near_or_by_a_shared_13_gram(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example once, by its strongest kind: the same ids, nearly the same (MinHash LSH,
    5-gram Jaccard >= 0.8, confirmed exactly), or a span of 13 ids inside a training text."""
    rng = np.random.default_rng(5)
    rows = [rng.integers(1, 500, int(n)).tolist() for n in rng.integers(20, 60, 100)]
    rows[9] = rng.integers(1, 500, 50).tolist()
    rows += [[7, 8, 9], [10, 11]]  # short rows: found only whole
    freeze_evalset(
        pa.table({"ids": rows}),
        tmp_path / "lm",
        name="lm",
        task="language_modeling",
        target="ids",
        inputs=InputsSpec(tokens="ids", pad_id=0, max_length=64),
    )
    train = [rng.integers(1, 500, 80).tolist() for _ in range(300)]
    train[0] = [3, 3, *rows[4][5:18], 4]  # a 13-gram of row 4 inside a training text
    train[1] = [rows[9][0], 499, *rows[9][2:]]  # row 9 with its second id changed
    train[2] = [7, 8, 9]
    train[3] = list(rows[20])  # a whole row, long
    edited = list(rows[30])
    edited[::6] = [499] * len(edited[::6])  # every sixth id changed: no 13-gram, far from 0.8
    train[4] = edited
    pq.write_table(pa.table({"ids": train}), tmp_path / "train.parquet")
    found = check_leaks(load_evalset(tmp_path / "lm"), str(tmp_path / "train.parquet"))
    leaks = {leak.row: leak for leak in found.leaks}
    assert set(leaks) == {4, 9, 20, 100}
    assert leaks[4].kind == "13-gram" and leaks[4].share == pytest.approx(1 / (len(rows[4]) - 12))
    mine, theirs = _shingles(rows[9]), _shingles(train[1])
    assert leaks[9].kind == "near" and leaks[9].train_row == 1
    assert leaks[9].share == pytest.approx(len(mine & theirs) / len(mine | theirs))
    assert leaks[20].kind == "exact" and leaks[20].train_row == 3
    assert leaks[100].kind == "exact" and leaks[100].train_row == 2
    assert "MinHash LSH (5-gram Jaccard >= 0.8, confirmed exactly)" in found.method
    assert found.kinds() == "exact 2, near 1, 13-gram 1"
    # The training rows go through the index in chunks: any chunk size finds the same.
    for size in (1, 7):  # the near copy (training row 1) first in a chunk, then inside one
        monkeypatch.setattr("evalsentry.evalsets.near_tokens._CHUNK", size)
        chunked = check_leaks(load_evalset(tmp_path / "lm"), str(tmp_path / "train.parquet"))
        assert chunked.leaks == found.leaks
    # A stricter threshold: row 9 is then only a span seen.
    train_file = str(tmp_path / "train.parquet")
    strict = check_leaks(load_evalset(tmp_path / "lm"), train_file, jaccard=0.99)
    assert {leak.row: leak.kind for leak in strict.leaks}[9] == "13-gram"
    with pytest.raises(UsageError, match=r"jaccard: 0\.995 is outside \(0, 0\.99\]"):
        check_leaks(load_evalset(tmp_path / "lm"), train_file, jaccard=0.995)
    # The command: each kind's overlap in words; a threshold it cannot use is one line, exit 2.
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: .\n")
    command = ["evalset", "leak-check", "lm", "--train", train_file]
    command += ["--config", str(tmp_path / "evalsentry.yaml")]
    assert main(command) == 0
    table = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[3:]}
    assert table["9"].split()[2:] == ["near", "1", "Jaccard", f"{leaks[9].share:.2f}"]
    assert table["4"].split()[2:] == ["13-gram", f"{leaks[4].share:.0%}", "of", "13-grams"]
    assert main([*command, "--jaccard", "0.995"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # Training text as strings, not token ids: the fix named is the training data's.
    pq.write_table(pa.table({"ids": ["some text"]}), tmp_path / "strings.parquet")
    with pytest.raises(EvalsetError, match="the training data must hold lm's input columns in"):
        check_leaks(load_evalset(tmp_path / "lm"), str(tmp_path / "strings.parquet"))
    # Without the input column at all: what is wrong first, then the file.
    pq.write_table(pa.table({"other": [[1, 2, 3]]}), tmp_path / "other.parquet")
    with pytest.raises(EvalsetError, match=r"^the training data does not hold lm's inputs \("):
        check_leaks(load_evalset(tmp_path / "lm"), str(tmp_path / "other.parquet"))


def test_row_hashes_differ_for_different_rows_and_agree_for_equal_ones() -> None:
    rows = np.random.default_rng(0).normal(size=(10_000, 3)).astype(np.float32)
    hashes = row_hashes(rows)
    assert len(np.unique(hashes)) == 10_000
    assert (row_hashes(rows.copy()) == hashes).all()


def test_the_gate_prints_the_verdict_without_leaked_examples_after_the_full_one(
    tabular: tuple[Path, np.ndarray, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    """Week 2 loses exactly the leaked examples: without them, nothing was lost."""
    from evalsentry.gate.metrics import default_metrics
    from evalsentry.history.store import History
    from tests.synthetic import predictions, record_week

    root, exact, near = tabular
    evalset = load_evalset(root / "evalsets" / "rows")
    leaked = np.concatenate([exact, near])
    for week, version in (("2026-W40", 1), ("2026-W41", 2)):
        correct = np.ones(400, bool)
        if version == 2:
            correct[leaked] = False
        target = np.asarray(evalset.targets)
        columns = {
            **predictions(correct),
            "example_id": evalset.ids,
            "target": target,
            "prediction": np.where(correct, target, 1 - target),
        }
        del columns["slice:half"]
        record_week(
            History(str(root / "store")),
            week,
            correct,
            version=version,
            checkpoint=str(version) * 64,
            columns=columns,
            evalset="rows",
            evalset_sha=evalset.sha256,
            metrics=default_metrics("classification", 2),
            num_classes=2,
        )
    (root / "evalsentry.yaml").write_text(
        "store: store\nevalsets: evalsets\ngate:\n  default: {max_drop: 0.01}\n"
    )
    argv = ["gate", "--config", str(root / "evalsentry.yaml")]
    full = main(argv)
    alone = capsys.readouterr().out
    assert full == 1 and "FAIL" in alone.splitlines()[0], alone + capsys.readouterr().err
    assert main([*argv, "--without-leaks", str(root / "train.parquet")]) == full
    after = capsys.readouterr().out[len(alone) :].splitlines()
    assert after[0] == (
        f"without examples in {root / 'train.parquet'}: {len(leaked)} of 400 examples of rows "
        "left out"
    )
    assert after[1].endswith("(the verdict above stands): PASS")
    # Training data not there: one line, exit 2, before any verdict is printed.
    assert main([*argv, "--without-leaks", str(root / "missing.parquet")]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.count("\n") == 1 and "missing.parquet" in said.err
