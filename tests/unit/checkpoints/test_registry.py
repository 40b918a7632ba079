"""The checkpoint registry: pinning, versions, stages, and refusals."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.registry import Registry
from evalsentry.errors import (
    CheckpointNotFound,
    ConfigError,
    InvalidName,
    LineageMissing,
    NotRegistered,
    UnsafeCheckpoint,
)
from evalsentry.storage import sha256_file
from tests.models import TRUST, Marker, TinyNet, retrained_checkpoints


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    """An empty registry in its own folder."""
    return Registry(str(tmp_path / "registry"))


@pytest.fixture
def retrained(tmp_path: Path, pinned_git: str, train_data: Path) -> list[Path]:
    """Eight checkpoints of the same model line, each with other weights (other files)."""
    return retrained_checkpoints(tmp_path / "retrained", 8, train_data)


class TestRegister:
    def test_pins_sha_and_size_and_records_lineage(
        self, registry: Registry, tiny_checkpoint: Path
    ) -> None:
        """Registration pins the file's hash and size and keeps its lineage and metrics."""
        entry = registry.register(tiny_checkpoint, "tiny", trust=TRUST)
        sha, size = sha256_file(tiny_checkpoint)
        assert (entry.version, entry.stage, entry.sha256, entry.size) == (1, "candidate", sha, size)
        assert entry.uri == str(tiny_checkpoint.resolve())
        assert entry.lineage["model"]["factory"] == "tests.models:TinyNet"
        assert entry.metrics == {"val_accuracy": 0.5}
        assert registry.show("tiny", 1) == entry

    def test_versions_increase(self, registry: Registry, retrained: list[Path]) -> None:
        """Each registration of a new file for a model gets the next version."""
        versions = [registry.register(p, "tiny", trust=TRUST).version for p in retrained[:3]]
        assert versions == [1, 2, 3]

    def test_racing_registrations_get_distinct_versions(
        self, registry: Registry, retrained: list[Path]
    ) -> None:
        """Concurrent registrations all succeed, with distinct versions, none overwritten."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            entries = list(pool.map(lambda p: registry.register(p, "tiny", trust=TRUST), retrained))
        assert sorted(e.version for e in entries) == list(range(1, 9))
        assert [e.version for e in registry.list("tiny")] == list(range(1, 9))

    def test_copy_stores_the_file_inside_the_registry(
        self, registry: Registry, tiny_checkpoint: Path
    ) -> None:
        """--copy keeps a registry-owned copy with the same hash."""
        entry = registry.register(tiny_checkpoint, "tiny", copy=True, trust=TRUST)
        assert entry.uri.startswith(registry.path)
        assert sha256_file(entry.uri)[0] == entry.sha256

    def test_missing_lineage_is_refused_listing_fields(
        self, registry: Registry, tmp_path: Path
    ) -> None:
        """A checkpoint without lineage is not registered; the fields are listed."""
        path = tmp_path / "bare.pt"
        torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": {}}, path)
        with pytest.raises(LineageMissing, match="git_sha, data_sha, config"):
            registry.register(path, "tiny", trust=TRUST)
        assert registry.list() == []

    def test_missing_factory_can_be_supplied(self, registry: Registry, tmp_path: Path) -> None:
        """A plain-recipe checkpoint registers once the factory is supplied."""
        path = tmp_path / "plain.pt"
        lineage = {
            "git_sha": "abc",
            "data_sha": "d" * 64,
            "config": {"lr": 1},
            "timestamp_utc": "2026-11-30T06:00:00+00:00",
        }
        torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": lineage}, path)
        with pytest.raises(LineageMissing, match=r"model\.factory.*--factory"):
            registry.register(path, "tiny", trust=TRUST)
        entry = registry.register(
            path,
            "tiny",
            factory="tests.models:TinyNet",
            factory_kwargs={"features": 4},
            trust=TRUST,
        )
        assert entry.lineage["model"] == {
            "factory": "tests.models:TinyNet",
            "kwargs": {"features": 4},
        }

    def test_malicious_checkpoint_is_refused_at_registration(
        self, registry: Registry, tmp_path: Path
    ) -> None:
        """Registering a code-running pickle is refused and runs nothing."""
        marker = tmp_path / "pwned"
        path = tmp_path / "evil.pt"
        torch.save({"model_state_dict": {}, "lineage": Marker(str(marker))}, path)
        with pytest.raises(UnsafeCheckpoint):
            registry.register(path, "tiny", trust=TRUST)
        assert not marker.exists()

    @pytest.mark.parametrize("name", ["../x", "/abs", "a/b", "..", "", "x y", ".hidden"])
    def test_path_tricks_in_model_names_are_refused(
        self, registry: Registry, tiny_checkpoint: Path, name: str
    ) -> None:
        """Model names can never address files outside the model's folder."""
        with pytest.raises(InvalidName):
            registry.register(tiny_checkpoint, name, trust=TRUST)

    def test_missing_checkpoint(self, registry: Registry, tmp_path: Path) -> None:
        """A missing file is named."""
        with pytest.raises(CheckpointNotFound):
            registry.register(tmp_path / "none.pt", "tiny", trust=TRUST)


class TestStages:
    def test_promote_keeps_one_production_and_archives_the_previous(
        self, registry: Registry, retrained: list[Path]
    ) -> None:
        """At most one production version per model; the old one becomes archived."""
        registry.register(retrained[0], "tiny", stage="production", trust=TRUST)
        registry.register(retrained[1], "tiny", trust=TRUST)
        registry.promote("tiny", 2, "production")
        stages = {e.version: e.stage for e in registry.list("tiny")}
        assert stages == {1: "archived", 2: "production"}
        assert registry.resolve("tiny", "production").version == 2
        history = [c.stage for c in registry.show("tiny", 1).stage_history]
        assert history == ["production", "archived"]
        assert all(c.at and c.by for c in registry.show("tiny", 1).stage_history)

    def test_resolve_without_a_version_in_stage(
        self, registry: Registry, tiny_checkpoint: Path
    ) -> None:
        """Asking for a stage no version is in is a clear error."""
        registry.register(tiny_checkpoint, "tiny", trust=TRUST)
        with pytest.raises(NotRegistered, match="production version of 'tiny'"):
            registry.resolve("tiny", "production")

    def test_unknown_model_suggests_a_name(self, registry: Registry, tiny_checkpoint: Path) -> None:
        """A misspelt model name gets a did-you-mean."""
        registry.register(tiny_checkpoint, "digits", trust=TRUST)
        with pytest.raises(NotRegistered, match="Did you mean 'digits'"):
            registry.show("digitz", 1)

    def test_unknown_stage_is_refused(self, registry: Registry, tiny_checkpoint: Path) -> None:
        """Only the three stages exist."""
        registry.register(tiny_checkpoint, "tiny", trust=TRUST)
        with pytest.raises(InvalidName, match="candidate, production, archived"):
            registry.promote("tiny", 1, "prod")


def test_malformed_entry_names_file_and_field(registry: Registry, tiny_checkpoint: Path) -> None:
    """A hand-edited registry entry with a bad field is reported with file and field."""
    registry.register(tiny_checkpoint, "tiny", trust=TRUST)
    entry_file = Path(registry.path) / "tiny" / "v000001.json"
    doc = json.loads(entry_file.read_text())
    doc["size"] = "large"
    entry_file.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"v000001\.json: size"):
        registry.list("tiny")


class TestRegistryThatIsAFile:
    def test_a_file_at_the_root_is_an_error_not_an_empty_registry(
        self, tmp_path: Path, tiny_checkpoint: Path
    ) -> None:
        """`registry:` naming a file: listing and registering fail naming it; the file is kept."""
        from evalsentry.errors import RegistryError

        root = tmp_path / "registry"
        root.write_text("not a folder")
        registry = Registry(str(root))
        for call in (
            registry.models,
            registry.list,
            lambda: registry.register(tiny_checkpoint, "m", trust=TRUST),
        ):
            with pytest.raises(
                RegistryError,
                match=rf"^{re.escape(str(root))}: the registry is a file, not a folder",
            ):
                call()
        assert root.read_text() == "not a folder"

    def test_a_file_above_the_root_is_named(self, tmp_path: Path, tiny_checkpoint: Path) -> None:
        """A file where a parent folder of the registry should be is named."""
        from evalsentry.errors import RegistryError

        (tmp_path / "blocked").write_text("x")
        registry = Registry(str(tmp_path / "blocked" / "registry"))
        with pytest.raises(
            RegistryError,
            match=rf"cannot be a folder: {re.escape(str(tmp_path / 'blocked'))} is a file",
        ):
            registry.register(tiny_checkpoint, "m", trust=TRUST)
