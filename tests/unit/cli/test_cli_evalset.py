"""The evalset commands through the real CLI: freeze, verify, list, show."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from evalsentry.cli import main
from tests.unit.cli.test_cli_registry import run_cli

DIGITS = Path(__file__).parents[3] / "evalsets" / "digits"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder (its evalsentry.yaml all defaults) holding a copy of the digits evalset."""
    shutil.copytree(DIGITS, tmp_path / "evalsets" / "digits")
    (tmp_path / "evalsentry.yaml").write_text("# every setting at its default\n")
    return tmp_path


@pytest.fixture
def unsealed(project: Path) -> Path:
    """The digits copy as it was frozen, before identity version 2 and `evalset seal`."""
    manifest = project / "evalsets" / "digits" / "evalset.yaml"
    frozen = yaml.safe_load(manifest.read_text())
    del frozen["field_sha256"]
    manifest.write_text(yaml.safe_dump(frozen, sort_keys=False))
    return project


class TestVerify:
    def test_shipped_evalset_verifies(self, project: Path) -> None:
        """`evalset verify digits` passes and prints the expectation table."""
        result = run_cli("evalset", "verify", "digits", cwd=project)
        assert result.returncode == 0, result.stderr
        assert "expect_column_values_to_be_unique" in result.stdout
        assert "16 expectations pass" in result.stdout
        assert "warning" not in result.stderr  # shipped sealed: every results field is pinned

    def test_one_changed_byte_exits_1_naming_the_file(self, project: Path) -> None:
        """After one byte of the data changes, verify exits 1 naming the file."""
        data = project / "evalsets" / "digits" / "data" / "part-000.parquet"
        raw = bytearray(data.read_bytes())
        raw[5000] ^= 0x01
        data.write_bytes(bytes(raw))
        result = run_cli("evalset", "verify", "digits", cwd=project)
        assert result.returncode == 1
        assert "part-000.parquet: evalset file changed since freeze" in result.stderr
        assert "Traceback" not in result.stderr

    def test_unknown_evalset_exits_2(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown name is unusable input with a suggestion."""
        assert main(["evalset", "verify", "digitz", "--config", str(_config(project))]) == 2
        assert "Did you mean 'digits'" in capsys.readouterr().err


def _config(project: Path) -> Path:
    config = project / "evalsentry.yaml"
    config.write_text("evalsets: evalsets\n")
    return config


class TestFreezeCommand:
    def test_freeze_csv_with_feature_columns_then_list_and_show(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A CSV freezes into a new evalset that list and show then report."""
        source = tmp_path / "rows.csv"
        source.write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(20)))
        config = _config(tmp_path)
        code = main(freeze_args(source, config))
        assert code == 0
        assert "froze toy v1: 20 rows" in capsys.readouterr().out
        assert main(["evalset", "list", "--config", str(config)]) == 0
        assert "toy" in capsys.readouterr().out
        assert main(["evalset", "show", "toy", "--config", str(config)]) == 0
        assert "evalset_sha256:" in capsys.readouterr().out

    def test_freeze_tensor_column_with_a_wrong_shape_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A --shape that does not fit the list column is a one-line error, nothing written."""
        source = tmp_path / "rows.parquet"
        values = pa.array(np.zeros(40, np.float32))
        pq.write_table(
            pa.table({"x": pa.FixedSizeListArray.from_arrays(values, 4), "y": [0, 1] * 5}), source
        )
        config = _config(tmp_path)
        code = main(
            [
                "evalset",
                "freeze",
                str(source),
                "--name",
                "toy",
                "--task",
                "classification",
                "--target",
                "y",
                "--inputs",
                "x",
                "--shape",
                "1,3",
                "--config",
                str(config),
            ]
        )
        assert code == 2
        assert "needs 3 values per row" in capsys.readouterr().err
        assert not (tmp_path / "evalsets" / "toy").exists()

    def test_bad_label_in_the_data_exits_1_listing_the_failure(self, project: Path) -> None:
        """Data that breaks its suite (a label outside the classes) fails verify with exit 1."""
        folder = project / "evalsets" / "digits"
        table = pq.read_table(folder / "data" / "part-000.parquet")
        labels = table.column("label").to_numpy().copy()
        labels[0] = 42
        from tests.unit.evalsets.test_evalsets import rewrite

        rewrite(folder, table.set_column(2, "label", pa.array(labels)))
        result = run_cli("evalset", "verify", "digits", cwd=project)
        assert result.returncode == 1
        assert "FAILED" in result.stdout and "42" in result.stdout
        assert "fails 2 of 16 expectations" in result.stderr


def freeze_args(source: Path, config: Path, *extra: str) -> list[str]:
    """`evalset freeze` of ``source`` as the classification evalset 'toy' (features a, b; label y)."""
    return [
        "evalset",
        "freeze",
        str(source),
        "--name",
        "toy",
        "--task",
        "classification",
        "--target",
        "y",
        "--inputs",
        "a,b",
        "--config",
        str(config),
        *extra,
    ]


def write_rows(path: Path, labels: list[float | int | None]) -> Path:
    """A Parquet or CSV source with features a, b and the label column y."""
    table = pa.table({"a": [float(i) for i in range(len(labels))], "b": [1.0] * len(labels)})
    table = table.append_column("y", pa.array(labels))
    if path.suffix == ".csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


class TestFreezeRefusesBadRows:
    @pytest.mark.parametrize(
        ("file", "labels", "message"),
        [
            ("empty.csv", [], "no rows to freeze"),
            ("null.csv", [0, 1, None, 1, None], "'y' has 2 null or NaN label(s), first at row 2"),
            (
                "nan.parquet",
                [0.0, float("nan"), 1.0],
                "'y' has 1 null or NaN label(s), first at row 1",
            ),
        ],
    )
    def test_exit_2_one_line_naming_the_file_and_the_fix(
        self,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        file: str,
        labels: list[float | int | None],
        message: str,
    ) -> None:
        """0 rows, a null label or a NaN label: exit 2, one line naming the file, nothing written."""
        source = write_rows(tmp_path / file, labels)
        assert main(freeze_args(source, _config(tmp_path))) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {source}: ") and message in err
        assert "freeze again" in err or "at least one example" in err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert not (tmp_path / "evalsets" / "toy").exists()

    def test_an_id_column_left_unnamed_is_refused_saying_how_to_name_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Data with an 'id' column and no --id: exit 2, one line with the fix, not a traceback."""
        source = tmp_path / "rows.parquet"
        rows = pq.read_table(write_rows(tmp_path / "plain.parquet", [0, 1, 2, 0]))
        pq.write_table(rows.append_column("id", pa.array(["w", "x", "y", "z"])), source)
        assert main(freeze_args(source, _config(tmp_path))) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {source}: id_column: the data has a column 'id'")
        assert "pass --id id" in err and err.count("\n") == 1
        assert main(freeze_args(source, _config(tmp_path), "--id", "id")) == 0


class TestPinnedFields:
    @pytest.fixture
    def fresh(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
        """A project with 'toy' freshly frozen through the CLI (identity version 2)."""
        source = write_rows(tmp_path / "rows.parquet", [i % 3 for i in range(30)])
        assert main(freeze_args(source, _config(tmp_path))) == 0
        capsys.readouterr()
        return tmp_path

    @pytest.mark.parametrize(
        ("field", "value"), [("classes", [1, 0, 2]), ("metrics", ["top5_accuracy"])]
    )
    def test_verify_names_an_edited_field_with_exit_1(
        self, fresh: Path, capsys: pytest.CaptureFixture[str], field: str, value: object
    ) -> None:
        """Swapping two classes or narrowing the metrics after freeze fails verify, naming it."""
        from tests.unit.evalsets.test_evalsets import edit

        edit(fresh / "evalsets" / "toy", **{field: value})
        assert main(["evalset", "verify", "toy", "--config", str(fresh / "evalsentry.yaml")]) == 1
        err = capsys.readouterr().err
        assert f"evalset.yaml: {field}: changed since freeze" in err
        assert err.count("\n") == 1

    def test_list_shows_the_identity_version(
        self, fresh: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`evalset list` tells version-2 evalsets from older ones."""
        shutil.copytree(DIGITS, fresh / "evalsets" / "digits")
        assert main(["evalset", "list", "--config", str(fresh / "evalsentry.yaml")]) == 0
        cells = [re.split(r" {2,}", line) for line in capsys.readouterr().out.splitlines()]
        identity = {row[0]: row[5] for row in cells if len(row) == 7}
        assert identity["toy"] == "v2" and identity["digits"] == "v1 sealed"


class TestVersion1Digits:
    def test_swapped_classes_in_the_shipped_manifest_exit_1(
        self, unsealed: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Swapping two classes in the (version-1) digits manifest fails verify, naming classes."""
        from tests.unit.evalsets.test_evalsets import edit

        edit(unsealed / "evalsets" / "digits", classes=[1, 0, 2, 3, 4, 5, 6, 7, 8, 9])
        assert main(["evalset", "verify", "digits", "--config", str(_config(unsealed))]) == 1
        assert "evalset.yaml: classes: [1, 0, 2" in capsys.readouterr().err

    def test_metrics_added_to_the_shipped_manifest_exit_1(
        self, unsealed: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A metrics list added to the version-1 digits manifest is refused, pointing at seal."""
        from tests.unit.evalsets.test_evalsets import edit

        edit(unsealed / "evalsets" / "digits", metrics=["top5_accuracy"])
        assert main(["evalset", "verify", "digits", "--config", str(_config(unsealed))]) == 1
        assert "metrics: identity version 1 does not pin" in capsys.readouterr().err

    def test_seal_keeps_the_sha_and_silences_the_warning(
        self, unsealed: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Before seal verify warns that slices are unpinned; seal keeps the recorded sha.

        In this process (the command line's own process is tested by TestVerify): four Great
        Expectations imports less.
        """
        from tests.unit.evalsets.test_evalsets import DIGITS_SHA

        config = ["--config", str(_config(unsealed))]
        assert main(["evalset", "verify", "digits", *config]) == 0
        assert "slices not pinned" in capsys.readouterr().err
        assert main(["evalset", "seal", "digits", *config]) == 0
        assert f"evalset_sha256 {DIGITS_SHA} unchanged" in capsys.readouterr().out
        assert main(["evalset", "verify", "digits", *config]) == 0
        assert "not pinned" not in capsys.readouterr().err
        assert main(["evalset", "seal", "digits", *config]) == 2
