"""The evalset commands through the real CLI: freeze, verify, list, show."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalsentry.cli import main
from tests.unit.test_cli_registry import run_cli

DIGITS = Path(__file__).parents[2] / "evalsets" / "digits"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder holding a copy of the shipped digits evalset."""
    shutil.copytree(DIGITS, tmp_path / "evalsets" / "digits")
    return tmp_path


class TestVerify:
    def test_shipped_evalset_verifies(self, project: Path) -> None:
        """`evalset verify digits` passes and prints the expectation table."""
        result = run_cli("evalset", "verify", "digits", cwd=project)
        assert result.returncode == 0, result.stderr
        assert "expect_column_values_to_be_unique" in result.stdout
        assert "16 expectations pass" in result.stdout

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
                "a,b",
                "--config",
                str(config),
            ]
        )
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
        from tests.unit.test_evalsets import rewrite

        rewrite(folder, table.set_column(2, "label", pa.array(labels)))
        result = run_cli("evalset", "verify", "digits", cwd=project)
        assert result.returncode == 1
        assert "FAILED" in result.stdout and "42" in result.stdout
        assert "fails 2 of 16 expectations" in result.stderr
