"""Lineage capture: git state and the training-data hash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evalsentry.checkpoints.lineage import NotInGitRepo, check_json_config, data_sha256, git_state
from evalsentry.errors import ConfigError, UsageError


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

    @pytest.mark.parametrize(
        ("data", "named", "problem"),
        [
            (None, "data=None", "no training data given"),
            ([], "data=[]", "an empty list"),
            ("", "data=''", "an empty path"),
            ("none.csv", "data='{tmp}/none.csv'", "no such file or folder"),
            ("empty", "data='{tmp}/empty'", "the folder holds no files"),
            (["train.csv", "none.csv"], "data[1]='{tmp}/none.csv'", "no such file"),
            (["empty"], "data[0]='{tmp}/empty'", "a folder; pass the folder itself"),
            (5, "data=5", "int is not a path"),
        ],
        ids=[
            "none",
            "empty-list",
            "empty-str",
            "missing",
            "empty-folder",
            "missing-in-list",
            "folder-in-list",
            "int",
        ],
    )
    def test_save_checkpoint_refuses_bad_data_naming_it_and_writes_nothing(
        self, tmp_path: Path, pinned_git: str, data: object, named: str, problem: str
    ) -> None:
        """data= that names no training data is one error naming it and what to pass."""
        from evalsentry.checkpoints.checkpoint import save_checkpoint
        from evalsentry.checkpoints.lineage import BadTrainingData
        from tests.models import TinyNet

        (tmp_path / "empty").mkdir()
        (tmp_path / "train.csv").write_text("x\n1\n")

        def under(value: object) -> object:
            if isinstance(value, str) and value:
                return str(tmp_path / value)
            if isinstance(value, list):
                return [str(tmp_path / v) for v in value]
            return value

        target = tmp_path / "out" / "m.pt"
        with pytest.raises(BadTrainingData) as err:
            save_checkpoint(
                TinyNet(),
                target,
                metrics={},
                config={},
                seed=0,
                data=under(data),  # type: ignore[arg-type]
            )
        message = str(err.value)
        assert message.startswith(f"{named.format(tmp=tmp_path)}: {problem}")
        assert "pass data= the training data: a file" in message
        assert isinstance(err.value, UsageError)
        assert not target.exists()


class TestConfigValues:
    def test_nan_is_refused(self) -> None:
        """NaN is not a reproducible hyperparameter."""
        with pytest.raises(ConfigError, match=r"config\.lr"):
            check_json_config({"lr": float("nan")})

    def test_nested_values_are_kept(self) -> None:
        """Nested plain values pass through, tuples become lists."""
        assert check_json_config({"a": {"b": (1, 2)}}) == {"a": {"b": [1, 2]}}
