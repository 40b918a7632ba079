"""Saving and safely loading lineage-carrying checkpoints."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.checkpoint import import_factory, load_checkpoint, save_checkpoint
from evalsentry.checkpoints.payload import read_payload
from evalsentry.errors import (
    CheckpointChanged,
    CheckpointCorrupt,
    CheckpointNotFound,
    ConfigError,
    FactoryError,
    LineageMissing,
    StateDictMismatch,
    UnsafeCheckpoint,
)
from evalsentry.storage import sha256_file
from tests.models import TRUST, Marker, TinyNet


class TestSave:
    def test_payload_carries_weights_metrics_and_full_lineage(
        self, tiny_checkpoint: Path, pinned_git: str
    ) -> None:
        """The payload holds state dict, metrics and every lineage field."""
        payload = torch.load(tiny_checkpoint, weights_only=True)
        assert set(payload) == {"model_state_dict", "metrics", "lineage"}
        lineage = payload["lineage"]
        assert lineage["git_sha"] == pinned_git
        assert lineage["git_dirty"] is False
        assert len(lineage["data_sha"]) == 64
        assert lineage["config"] == {"lr": 0.1, "layers": [4, 8, 3]}
        assert lineage["seed"] == 0
        assert lineage["model"] == {
            "factory": "tests.models:TinyNet",
            "kwargs": {"features": 4, "classes": 3},
        }
        assert lineage["torch_version"] == str(torch.__version__)
        assert lineage["timestamp_utc"].endswith("+00:00")
        assert payload["metrics"] == {"val_accuracy": 0.5}

    def test_optimizer_state_is_saved_when_given(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """An optimizer's state travels with the weights."""
        model = TinyNet()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        path = save_checkpoint(
            model,
            tmp_path / "m.pt",
            metrics={},
            config={},
            seed=1,
            data=train_data,
            optimizer=optimizer,
        )
        assert "optimizer_state_dict" in read_payload(path)

    def test_factory_that_cannot_take_the_weights_fails_at_save(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """A factory building another architecture is refused now, not a week later."""
        with pytest.raises(StateDictMismatch):
            save_checkpoint(
                TinyNet(hidden=8),
                tmp_path / "m.pt",
                metrics={},
                config={},
                seed=0,
                data=train_data,
                factory="tests.models:TinyNet",
                factory_kwargs={"hidden": 16},
            )
        assert not (tmp_path / "m.pt").exists()

    def test_model_class_defined_in_a_script_needs_an_explicit_factory(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """A model whose class lives in __main__ cannot be rebuilt later; say so."""
        script_class = type("ScriptNet", (TinyNet,), {"__module__": "__main__"})
        with pytest.raises(FactoryError, match="move it into a module"):
            save_checkpoint(
                script_class(), tmp_path / "m.pt", metrics={}, config={}, seed=0, data=train_data
            )

    def test_non_json_config_is_refused_naming_the_key(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """Hyperparameters must be plain values; the offending key is named."""
        with pytest.raises(ConfigError, match=r"config\.sched"):
            save_checkpoint(
                TinyNet(),
                tmp_path / "m.pt",
                metrics={},
                config={"sched": object()},
                seed=0,
                data=train_data,
            )

    def test_write_is_atomic_and_leaves_no_temporary_files(self, tiny_checkpoint: Path) -> None:
        """Only the final file is in the folder after a save."""
        assert [p.name for p in tiny_checkpoint.parent.iterdir()] == ["tiny.pt"]


class TestLoad:
    def test_round_trip_rebuilds_the_same_model(self, tiny_checkpoint: Path) -> None:
        """Loading rebuilds the architecture from lineage and restores the exact weights."""
        loaded = load_checkpoint(
            tiny_checkpoint, expected_sha256=sha256_file(tiny_checkpoint)[0], trust=TRUST
        )
        original = torch.load(tiny_checkpoint, weights_only=True)["model_state_dict"]
        assert isinstance(loaded.model, TinyNet)
        assert not loaded.model.training
        for key, value in loaded.model.state_dict().items():
            assert torch.equal(value, original[key])

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is named."""
        with pytest.raises(CheckpointNotFound, match=r"nope\.pt"):
            load_checkpoint(tmp_path / "nope.pt", trust=TRUST)

    def test_truncated_file_is_corrupt(self, tiny_checkpoint: Path) -> None:
        """A file cut short is reported as corrupt, not as an obscure zip error."""
        data = tiny_checkpoint.read_bytes()
        tiny_checkpoint.write_bytes(data[: len(data) // 2])
        with pytest.raises(CheckpointCorrupt, match="corrupt or truncated"):
            load_checkpoint(tiny_checkpoint, trust=TRUST)

    def test_garbage_file_is_corrupt(self, tmp_path: Path) -> None:
        """Bytes that are no checkpoint at all are reported as corrupt."""
        path = tmp_path / "noise.pt"
        path.write_bytes(b"\x00not a checkpoint" * 10)
        with pytest.raises(CheckpointCorrupt):
            load_checkpoint(path, trust=TRUST)

    def test_sha_mismatch_says_changed_since_registration(self, tiny_checkpoint: Path) -> None:
        """A file that differs from its pinned hash is refused before it is read."""
        with pytest.raises(CheckpointChanged, match="changed since registration"):
            load_checkpoint(tiny_checkpoint, expected_sha256="0" * 64, trust=TRUST)

    def test_missing_lineage_fields_are_all_listed(self, tmp_path: Path) -> None:
        """A plain-recipe checkpoint without lineage lists every missing field."""
        path = tmp_path / "plain.pt"
        torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": {"seed": 1}}, path)
        with pytest.raises(LineageMissing) as err:
            load_checkpoint(path, trust=TRUST)
        assert err.value.fields == [
            "git_sha",
            "data_sha",
            "config",
            "timestamp_utc",
            "model.factory",
        ]

    def test_plain_recipe_checkpoint_loads_with_a_supplied_factory(self, tmp_path: Path) -> None:
        """git_sha, data_sha, config and timestamp plus a supplied factory are enough."""
        path = tmp_path / "plain.pt"
        lineage = {
            "git_sha": "abc",
            "data_sha": "d" * 64,
            "config": {},
            "timestamp_utc": "2026-11-30T06:00:00+00:00",
        }
        torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": lineage}, path)
        loaded = load_checkpoint(path, factory="tests.models:tiny_net", trust=TRUST)
        assert loaded.lineage["model"]["factory"] == "tests.models:tiny_net"

    def test_naive_timestamp_is_refused(self, tmp_path: Path) -> None:
        """A timestamp without a timezone is not accepted as lineage."""
        path = tmp_path / "naive.pt"
        lineage = {
            "git_sha": "abc",
            "data_sha": "d",
            "config": {},
            "timestamp_utc": "2026-11-30T06:00:00",
            "model": {"factory": "tests.models:TinyNet"},
        }
        torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": lineage}, path)
        with pytest.raises(LineageMissing, match="timezone-aware"):
            load_checkpoint(path, trust=TRUST)

    def test_state_dict_key_mismatch_lists_keys(self, tmp_path: Path) -> None:
        """Weights of another architecture list the missing and unexpected keys."""
        path = tmp_path / "other.pt"
        lineage = {
            "git_sha": "abc",
            "data_sha": "d",
            "config": {},
            "timestamp_utc": "2026-11-30T06:00:00+00:00",
            "model": {"factory": "tests.models:TinyNet", "kwargs": {}},
        }
        state = {"head.weight": torch.zeros(3, 8)}
        torch.save({"model_state_dict": state, "lineage": lineage}, path)
        with pytest.raises(StateDictMismatch) as err:
            load_checkpoint(path, trust=TRUST)
        assert "body.0.weight" in err.value.missing
        assert err.value.unexpected == ["head.weight"]

    def test_payload_that_would_run_code_is_refused_and_nothing_runs(self, tmp_path: Path) -> None:
        """A pickle whose __reduce__ runs a command is refused; the command never runs."""
        marker = tmp_path / "pwned"
        path = tmp_path / "evil.pt"
        torch.save({"model_state_dict": {}, "lineage": Marker(str(marker))}, path)
        with pytest.raises(UnsafeCheckpoint, match="refused"):
            load_checkpoint(path, trust=TRUST)
        assert not marker.exists()

    def test_legacy_pickle_that_would_run_code_is_refused(self, tmp_path: Path) -> None:
        """A raw (non-zip) pickle with a code-running reduce is refused unread: not a zip."""
        marker = tmp_path / "pwned"
        path = tmp_path / "evil.pkl"
        path.write_bytes(pickle.dumps(Marker(str(marker)), protocol=2))  # legacy torch.save
        with pytest.raises(CheckpointCorrupt, match=r"not the zip archive torch\.save writes"):
            load_checkpoint(path, trust=TRUST)
        assert not marker.exists()


class TestFactory:
    def test_did_you_mean_for_a_misspelt_callable(self) -> None:
        """A misspelt factory attribute suggests the closest name."""
        with pytest.raises(FactoryError, match="Did you mean 'TinyNet'"):
            import_factory("tests.models:TinyNett")

    def test_unimportable_module(self) -> None:
        """A module that does not exist is named."""
        with pytest.raises(FactoryError, match=r"cannot import module 'tests\.nomodels'"):
            import_factory("tests.nomodels:TinyNet")

    @pytest.mark.parametrize(
        "spec", ["subprocess:run", "os:system", "torch.hub:load", "builtins:eval"]
    )
    def test_standard_library_and_torch_factories_are_refused(self, spec: str) -> None:
        """Checkpoint-supplied factories can never reach code-running callables."""
        with pytest.raises(FactoryError, match="not allowed"):
            import_factory(spec)

    def test_malformed_spec(self) -> None:
        """A factory without the module:callable form is refused with the expected form."""
        with pytest.raises(FactoryError, match=r"package\.module:callable"):
            import_factory("tests.models.TinyNet")
