"""Lineage capture: git state and the training-data hash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evalsentry.errors import ConfigError, UsageError
from evalsentry.lineage import NotInGitRepo, check_json_config, data_sha256, git_state


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "HOME": str(cwd),
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


class TestGit:
    def test_reads_sha_and_dirty_state(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The commit sha is read from the repo; a modified tracked file makes it dirty."""
        monkeypatch.delenv("EVALSENTRY_GIT_SHA", raising=False)
        _git(tmp_path, "init", "-q")
        (tmp_path / "train.py").write_text("print(1)\n")
        _git(tmp_path, "add", "train.py")
        _git(tmp_path, "commit", "-qm", "init")
        sha = _git(tmp_path, "rev-parse", "HEAD")
        assert git_state(tmp_path) == (sha, False)
        (tmp_path / "train.py").write_text("print(2)\n")
        assert git_state(tmp_path) == (sha, True)

    def test_outside_a_repo_is_a_clear_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Outside git, the error says how to give the sha explicitly."""
        monkeypatch.delenv("EVALSENTRY_GIT_SHA", raising=False)
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
        with pytest.raises(NotInGitRepo, match="EVALSENTRY_GIT_SHA"):
            git_state(tmp_path)

    def test_environment_override(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """CI builds can give the sha and dirty flag through the environment."""
        monkeypatch.setenv("EVALSENTRY_GIT_SHA", "feed")
        monkeypatch.setenv("EVALSENTRY_GIT_DIRTY", "1")
        assert git_state(tmp_path) == ("feed", True)


class TestDataHash:
    def test_order_independent_for_lists(self, tmp_path: Path) -> None:
        """Listing files in another order gives the same hash."""
        a, b = tmp_path / "a.csv", tmp_path / "b.csv"
        a.write_text("1"), b.write_text("2")
        assert data_sha256([a, b]) == data_sha256([b, a])

    def test_directory_equals_its_files_and_changes_with_content(self, tmp_path: Path) -> None:
        """A folder hashes like the list of its files; changing one byte changes the hash."""
        folder = tmp_path / "data"
        folder.mkdir()
        (folder / "a.csv").write_text("1")
        (folder / "b.csv").write_text("2")
        before = data_sha256(folder)
        assert before == data_sha256([folder / "b.csv", folder / "a.csv"])
        (folder / "b.csv").write_text("3")
        assert data_sha256(folder) != before

    def test_location_does_not_matter(self, tmp_path: Path) -> None:
        """The same data in another folder hashes the same."""
        for name in ("x", "y"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "d.bin").write_bytes(b"abc")
        assert data_sha256(tmp_path / "x") == data_sha256(tmp_path / "y")

    def test_missing_and_empty(self, tmp_path: Path) -> None:
        """A missing file or an empty folder is refused."""
        with pytest.raises(UsageError, match="not found"):
            data_sha256([tmp_path / "none.csv"])
        (tmp_path / "empty").mkdir()
        with pytest.raises(UsageError, match="empty"):
            data_sha256(tmp_path / "empty")


class TestConfigValues:
    def test_nan_is_refused(self) -> None:
        """NaN is not a reproducible hyperparameter."""
        with pytest.raises(ConfigError, match=r"config\.lr"):
            check_json_config({"lr": float("nan")})

    def test_nested_values_are_kept(self) -> None:
        """Nested plain values pass through, tuples become lists."""
        assert check_json_config({"a": {"b": (1, 2)}}) == {"a": {"b": [1, 2]}}
