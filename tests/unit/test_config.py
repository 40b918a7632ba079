"""evalsentry.yaml: defaults, resolution, and errors naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsentry.config import Tolerance, load_config
from evalsentry.errors import ConfigError


class TestLoad:
    def test_defaults_without_a_file(self, chdir_tmp: Path) -> None:
        """A fresh clone with no config works with defaults rooted in the cwd."""
        config = load_config()
        assert config.store_url == str(chdir_tmp / ".evalsentry")
        assert config.registry_url == str(chdir_tmp / ".evalsentry" / "registry")
        assert config.gate.alpha == 0.05

    def test_relative_locations_resolve_against_the_file(self, tmp_path: Path) -> None:
        """Paths in the file are relative to its folder, URLs are kept."""
        file = tmp_path / "proj" / "evalsentry.yaml"
        file.parent.mkdir()
        file.write_text("store: s3://bucket/history\nregistry: reg\nevalsets: sets\n")
        config = load_config(file)
        assert config.store_url == "s3://bucket/history"
        assert config.registry_url == str(tmp_path / "proj" / "reg")
        assert config.evalsets_dir == str(tmp_path / "proj" / "sets")

    def test_unknown_field_is_named(self, tmp_path: Path) -> None:
        """A misspelt setting is named with the file."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("gate:\n  alpah: 0.1\n")
        with pytest.raises(ConfigError, match=r"evalsentry\.yaml: gate\.alpah: unknown field"):
            load_config(file)

    def test_invalid_value_is_named(self, tmp_path: Path) -> None:
        """An out-of-range value names its field."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("gate:\n  alpha: 2\n")
        with pytest.raises(ConfigError, match=r"gate\.alpha"):
            load_config(file)

    def test_bad_tolerance_is_named(self, tmp_path: Path) -> None:
        """A tolerance that is neither absolute nor relative is refused."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("gate:\n  metrics:\n    accuracy: {max_drop: 'lots'}\n")
        with pytest.raises(ConfigError, match=r"gate\.metrics\.accuracy\.max_drop"):
            load_config(file)

    def test_broken_yaml(self, tmp_path: Path) -> None:
        """YAML syntax errors name the file."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("store: [unclosed\n")
        with pytest.raises(ConfigError, match="not valid YAML"):
            load_config(file)

    def test_explicit_missing_file(self, tmp_path: Path) -> None:
        """A config file named on the command line must exist."""
        with pytest.raises(ConfigError, match="file not found"):
            load_config(tmp_path / "missing.yaml")

    def test_project_config_loads(self) -> None:
        """The evalsentry.yaml shipped at the project root is valid."""
        config = load_config(Path(__file__).parents[2] / "evalsentry.yaml")
        assert config.evalsets_dir.endswith("evalsets")


class TestTolerance:
    def test_absolute(self) -> None:
        """An absolute tolerance ignores the reference value."""
        assert Tolerance(max_drop=0.02).allowed_drop(0.9) == 0.02

    def test_relative(self) -> None:
        """A relative tolerance scales with the reference value."""
        assert Tolerance(max_drop="5%").allowed_drop(0.8) == pytest.approx(0.04)
