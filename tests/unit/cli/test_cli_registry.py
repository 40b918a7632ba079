"""The register and registry commands, through the real CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsentry.cli import main
from tests.models import TRUSTED_YAML

REPO = Path(__file__).parents[3]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``evalsentry`` in a fresh process, as a user would, able to import the test models."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "evalsentry.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


class TestRegisterCommand:
    def test_register_list_show_promote(
        self, chdir_tmp: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A registered checkpoint shows up in list and show, and can be promoted."""
        (chdir_tmp / "evalsentry.yaml").write_text(TRUSTED_YAML)
        assert main(["register", str(tiny_checkpoint), "--model", "tiny", "--new-model"]) == 0
        assert "registered tiny@v1 (candidate)" in capsys.readouterr().out
        assert main(["registry", "list"]) == 0
        listing = capsys.readouterr().out
        assert "tiny@v1" in listing and "candidate" in listing and "0123456789" in listing
        assert main(["registry", "promote", "tiny", "1"]) == 0
        assert main(["registry", "show", "tiny", "--stage", "production"]) == 0
        shown = json.loads(capsys.readouterr().out.split("\n", 1)[1])
        assert shown["stage"] == "production" and shown["lineage"]["seed"] == 0

    def test_factory_kwargs_must_be_json(
        self, chdir_tmp: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Malformed --factory-kwargs is a usage error naming the option."""
        (chdir_tmp / "evalsentry.yaml").write_text(TRUSTED_YAML)
        code = main(
            [
                "register",
                str(tiny_checkpoint),
                "--model",
                "tiny",
                "--factory",
                "tests.models:TinyNet",
                "--factory-kwargs",
                "{bad",
            ]
        )
        assert code == 2
        assert "--factory-kwargs: not valid JSON" in capsys.readouterr().err

    def test_factory_kwargs_without_factory_is_refused(
        self, chdir_tmp: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--factory-kwargs alone would be ignored: one line, exit 2, nothing registered."""
        argv = ["register", str(tiny_checkpoint), "--model", "tiny", "--factory-kwargs", "{}"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "given without --factory" in err
        assert not (chdir_tmp / ".evalsentry" / "registry").exists()


class TestUserErrors:
    def test_missing_checkpoint_is_one_line_exit_2(self, tmp_path: Path) -> None:
        """A user error prints one line and no traceback, and exits 2."""
        (tmp_path / "evalsentry.yaml").write_text(TRUSTED_YAML)
        result = run_cli(
            "register", str(tmp_path / "none.pt"), "--model", "m", "--new-model", cwd=tmp_path
        )
        assert result.returncode == 2
        assert result.stderr.strip().count("\n") == 0
        assert "none.pt: checkpoint not found" in result.stderr
        assert "Traceback" not in result.stderr

    def test_bad_model_name_exit_2(self, tmp_path: Path, tiny_checkpoint: Path) -> None:
        """A model name with path tricks is refused with exit 2."""
        (tmp_path / "evalsentry.yaml").write_text(TRUSTED_YAML)
        result = run_cli("register", str(tiny_checkpoint), "--model", "../../x", cwd=tmp_path)
        assert result.returncode == 2
        assert "invalid model name" in result.stderr
        assert not (tmp_path.parent / "x").exists()

    def test_malformed_config_names_file_and_field(self, tmp_path: Path) -> None:
        """A broken evalsentry.yaml is reported by file and field, exit 2."""
        (tmp_path / "evalsentry.yaml").write_text("stroe: x\n")
        result = run_cli("registry", "list", cwd=tmp_path)
        assert result.returncode == 2
        assert "evalsentry.yaml: stroe: unknown field" in result.stderr
        assert "Traceback" not in result.stderr

    def test_help_reads_well(self, tmp_path: Path) -> None:
        """--help lists the commands with their summaries."""
        result = run_cli("--help", cwd=tmp_path)
        assert result.returncode == 0
        assert "register" in result.stdout and "Register a checkpoint" in result.stdout
