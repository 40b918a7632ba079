"""evalsentry.yaml: defaults, resolution, and errors naming file and field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.errors import ConfigError
from evalsentry.sections import Tolerance


class TestLoad:
    def test_an_empty_file_means_the_defaults_rooted_beside_it(self, chdir_tmp: Path) -> None:
        """A project whose evalsentry.yaml sets nothing works with defaults rooted in its folder."""
        (chdir_tmp / "evalsentry.yaml").write_text("")
        config = load_config()
        assert config.store_url == str(chdir_tmp / ".evalsentry")
        assert config.registry_url == str(chdir_tmp / ".evalsentry" / "registry")
        assert config.gate.alpha == 0.05

    def test_the_project_is_found_from_a_subfolder_as_git_finds_a_repository(
        self, chdir_tmp: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """From a folder inside the project, the nearest evalsentry.yaml above is the project's."""
        (chdir_tmp / "evalsentry.yaml").write_text("store: history\n")
        inner = chdir_tmp / "training" / "runs"
        inner.mkdir(parents=True)
        monkeypatch.chdir(inner)
        assert load_config().store_url == str(chdir_tmp / "history")

    def test_outside_any_project_is_an_error_naming_the_folder(self, chdir_tmp: Path) -> None:
        """No evalsentry.yaml here or above: an error saying so, never an empty project."""
        with pytest.raises(ConfigError, match=r"not found in .* or any folder above it") as exc:
            load_config()
        assert str(chdir_tmp) in str(exc.value) and "--config" not in str(exc.value)

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

    def test_gate_metrics_override_the_defaults_key_by_key(self, tmp_path: Path) -> None:
        """A file that sets only accuracy keeps every other metric's default tolerance."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text(
            "gate:\n  metrics:\n    accuracy: {max_drop: 0.05}\n    brier: {max_drop: 0.1}\n"
        )
        gate = load_config(file).gate
        assert gate.tolerance("accuracy").max_drop == 0.05
        assert gate.tolerance("brier").max_drop == 0.1
        assert gate.tolerance("ece").max_drop == 0.02  # absolute, not the 1% relative default
        assert gate.tolerance("nll").max_drop == "10%"
        assert gate.tolerance("macro_f1").allowed_drop(0.9) == 0.01

    def test_inference_timeout_defaults_to_an_hour_and_is_read(self, tmp_path: Path) -> None:
        """Without a setting an evaluation may take an hour; the file's value is used as given."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("store: s\n")
        assert load_config(file).inference_timeout_s == 3600
        file.write_text("inference_timeout_s: 90\n")
        assert load_config(file).inference_timeout_s == 90

    @pytest.mark.parametrize("value", ["0", "-5", ".inf", "soon"])
    def test_inference_timeout_must_be_a_positive_number(self, tmp_path: Path, value: str) -> None:
        """A zero, negative, infinite or non-numeric timeout is refused, naming the field."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text(f"inference_timeout_s: {value}\n")
        with pytest.raises(ConfigError, match=r"evalsentry\.yaml: inference_timeout_s: "):
            load_config(file)


class TestUnreadableFile:
    def test_not_utf8_names_the_file_and_the_byte(self, tmp_path: Path) -> None:
        """A file in another encoding is a ConfigError naming it, not a UnicodeDecodeError."""
        file = tmp_path / "evalsentry.yaml"
        file.write_bytes("store: st\u00e9re\n".encode("latin-1"))
        with pytest.raises(ConfigError, match=r"evalsentry\.yaml: not UTF-8 text \(byte 9\)"):
            load_config(file)

    @pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("hello\n", "str")])
    def test_top_level_must_be_a_mapping(self, tmp_path: Path, text: str, kind: str) -> None:
        """A list or a scalar at the top level is refused, naming what it is."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text(text)
        with pytest.raises(
            ConfigError, match=rf"\(top level\): expected a mapping .* got a {kind}"
        ):
            load_config(file)

    def test_root_is_not_a_setting(self, tmp_path: Path) -> None:
        """`root:` (where relative locations resolve) comes from the file's place, never the file."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("root: /etc\nstore: s\n")
        with pytest.raises(ConfigError, match=r"evalsentry\.yaml: root: not a setting"):
            load_config(file)

    @pytest.mark.parametrize(
        ("key", "field", "kind"),
        [("1", "1", "a number"), ("null", "null", "null"), ("2026-01-01", "2026-01-01", "a date")],
    )
    def test_setting_names_must_be_text(
        self, tmp_path: Path, key: str, field: str, kind: str
    ) -> None:
        """A key YAML reads as a number, null or date is named, not a TypeError."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text(f"{key}: x\n")
        with pytest.raises(ConfigError, match=rf"evalsentry\.yaml: {field}: .* not {kind};"):
            load_config(file)

    def test_unhashable_key_names_the_line(self, tmp_path: Path) -> None:
        """A list used as a key is a YAML error with its line."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("store: s\n? [a]\n: x\n")
        with pytest.raises(ConfigError, match=r"found unhashable key, line 2"):
            load_config(file)

    def test_a_folder_is_not_a_config_file(self, tmp_path: Path) -> None:
        """A folder named evalsentry.yaml cannot be read: said in one line."""
        (tmp_path / "evalsentry.yaml").mkdir()
        with pytest.raises(ConfigError, match=r"evalsentry\.yaml: cannot read it"):
            load_config(tmp_path / "evalsentry.yaml")


class TestLocations:
    """store:, registry: and evalsets: that cannot be folders are refused when the file loads."""

    def test_a_dangling_store_link_is_one_line_not_an_empty_history(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The store linked to a folder that is gone: the gate names the link, exit 2."""
        (tmp_path / "store").symlink_to(tmp_path / "unmounted" / "history")
        file = tmp_path / "evalsentry.yaml"
        file.write_text("store: store\n")
        assert main(["gate", "--config", str(file)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: {tmp_path / 'store'}: the store is a symbolic link to "
            f"{tmp_path / 'unmounted' / 'history'}, which does not exist; point `store:` in "
            f"{file} at a folder this user can read and write\n"
        )
        assert "no weekly evaluation" not in err

    @pytest.mark.parametrize(
        ("field", "location", "problem"),
        [
            ("registry", "models.txt", "the registry is a file, not a folder"),
            (
                "evalsets",
                "models.txt/evalsets",
                "the evalsets cannot be a folder: {root}/models.txt is a file;",
            ),
            (
                "evalsets",
                "gone/evalsets",
                "the evalsets cannot be a folder: {root}/gone is a symbolic link to nowhere,",
            ),
        ],
    )
    def test_a_location_that_cannot_be_a_folder_is_refused(
        self, tmp_path: Path, field: str, location: str, problem: str
    ) -> None:
        """A file where the folder should be, there or above it; a dangling link above it."""
        (tmp_path / "models.txt").write_text("not a folder")
        (tmp_path / "gone").symlink_to("nowhere")
        file = tmp_path / "evalsentry.yaml"
        file.write_text(f"{field}: {location}\n")
        with pytest.raises(ConfigError) as refused:
            load_config(file)
        message = str(refused.value)
        assert message.startswith(f"{tmp_path / location}: {problem.format(root=tmp_path)}")
        assert f"point `{field}:` in {file}" in message

    def test_a_missing_folder_is_fine_and_an_object_store_is_not_looked_at(
        self, tmp_path: Path
    ) -> None:
        """A new project has no store yet; an s3:// store is the object store's to check."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("store: not-yet\nregistry: s3://bucket/registry\n")
        assert load_config(file).store_url == str(tmp_path / "not-yet")

    @pytest.mark.skipif(os.geteuid() == 0, reason="as root every folder can be read")
    def test_an_unreadable_store_is_refused(self, tmp_path: Path) -> None:
        """A store this user may not list reads as nothing: refused, saying why."""
        (tmp_path / "store").mkdir(mode=0o000)
        file = tmp_path / "evalsentry.yaml"
        file.write_text("store: store\n")
        with pytest.raises(ConfigError, match=r"the store cannot be read \(permission denied\)"):
            load_config(file)


class TestTolerance:
    def test_absolute(self) -> None:
        """An absolute tolerance ignores the reference value."""
        assert Tolerance(max_drop=0.02).allowed_drop(0.9) == 0.02

    def test_relative(self) -> None:
        """A relative tolerance scales with the reference value."""
        assert Tolerance(max_drop="5%").allowed_drop(0.8) == pytest.approx(0.04)


class TestDriftFeatures:
    def test_features_are_read_per_evalset(self, tmp_path: Path) -> None:
        """drift.features maps an evalset to the row summaries it lists, in order."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("drift:\n  features:\n    digits: [max, share_above_half_max]\n")
        assert load_config(file).drift.features == {"digits": ["max", "share_above_half_max"]}

    def test_an_unknown_feature_is_refused_with_a_suggestion(self, tmp_path: Path) -> None:
        """A misspelt summary is one line naming the file, the field, the choices and the fix."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("drift:\n  features:\n    digits: [mean, meen]\n")
        with pytest.raises(ConfigError) as caught:
            load_config(file)
        assert str(caught.value) == (
            f"{file}: drift.features.digits: unknown feature 'meen'; choose from mean, std, min, "
            "max, share_above_half_max. Did you mean 'mean'?"
        )

    def test_the_refusal_exits_2_through_the_cli(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The CLI turns an unknown feature into exit 2 and the one line on stderr."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text("drift:\n  features:\n    digits: [ink_fraction]\n")
        assert main(["evalset", "list", "--config", str(file)]) == 2
        err = capsys.readouterr().err
        assert "drift.features.digits: unknown feature 'ink_fraction'" in err
        assert "Traceback" not in err

    @pytest.mark.parametrize(
        ("listed", "problem"),
        [("[]", "no features listed"), ("[std, std]", "'std' is listed twice")],
    )
    def test_an_empty_or_repeated_list_is_refused(
        self, tmp_path: Path, listed: str, problem: str
    ) -> None:
        """An entry must name at least one summary, each once."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text(f"drift:\n  features:\n    digits: {listed}\n")
        with pytest.raises(ConfigError, match=rf"drift\.features\.digits: {problem}"):
            load_config(file)

    def test_the_project_config_keeps_the_digits_features(self) -> None:
        """The shipped evalsentry.yaml declares the digits evalset's five row summaries."""
        config = load_config(Path(__file__).parents[2] / "evalsentry.yaml")
        assert config.drift.features["digits"] == [
            "mean",
            "std",
            "min",
            "max",
            "share_above_half_max",
        ]
