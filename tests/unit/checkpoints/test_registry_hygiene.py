"""Registry hygiene: duplicate files, retiring versions, and what `registry list` tells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.errors import RegistryError
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.evaluation.planning import resolve_targets
from evalsentry.history.store import History
from evalsentry.names import WEEKLY_STAGES
from tests.models import TRUST, TRUSTED_YAML, retrained_checkpoints


@pytest.fixture
def project(chdir_tmp: Path, toy_evalset: Path) -> Path:
    """A project with the toy evalset, model 'wine' bound to it, and the test models trusted."""
    (chdir_tmp / "evalsentry.yaml").write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n"
        "models: {wine: {evalsets: [toy]}}\n" + TRUSTED_YAML
    )
    return chdir_tmp


@pytest.fixture
def versions(tmp_path: Path, pinned_git: str, train_data: Path) -> list[Path]:
    """Three checkpoints of one model line, each with other weights."""
    return retrained_checkpoints(tmp_path / "ckpts", 3, train_data)


def registry_of(project: Path) -> Registry:
    """The project's registry."""
    return Registry(load_config(project / "evalsentry.yaml").registry_url)


def listing(capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """`registry list` rows by version ref, each as its stripped cells."""
    assert main(["registry", "list"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = re.split(r" {2,}", line)
        if cells and "@v" in cells[0]:
            rows[cells[0]] = cells
    return rows


class TestDuplicateRegistration:
    def test_the_same_file_again_returns_the_existing_version(
        self, project: Path, versions: list[Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Registering a file a version already pins: one line, exit 0, no version, no copy."""
        assert main(["register", str(versions[0]), "--model", "wine", "--new-model", "--copy"]) == 0
        capsys.readouterr()
        argv = ["register", str(versions[0]), "--model", "wine", "--copy", "--stage", "production"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        entry = registry_of(project).show("wine", 1)
        assert out == (
            f"wine v1 is already this file (sha256 {entry.sha256[:12]}...); nothing registered "
            "(v1 stays candidate; make it production with: evalsentry registry promote wine 1)\n"
        )
        assert [e.version for e in registry_of(project).list("wine")] == [1]
        assert entry.stage == "candidate"
        assert len(list((project / "registry" / "wine" / "artifacts").iterdir())) == 1

    def test_library_says_whether_it_registered(self, project: Path, versions: list[Path]) -> None:
        """add() tells a new version from the existing one; another file gets the next version."""
        registry = registry_of(project)
        first = registry.add(versions[0], "wine", trust=TRUST)
        again = registry.add(versions[0], "wine", trust=TRUST)
        other = registry.add(versions[1], "wine", trust=TRUST)
        assert (first.new, again.new, other.new) == (True, False, True)
        assert again.entry == first.entry and other.entry.version == 2

    def test_the_same_file_for_another_model_is_registered(
        self, project: Path, versions: list[Path]
    ) -> None:
        """Duplicates are per model: another model line may pin the same file."""
        registry = registry_of(project)
        registry.register(versions[0], "wine", trust=TRUST)
        assert registry.add(versions[0], "beer", trust=TRUST).new


class TestArchive:
    def test_archiving_production_keeps_the_entry_and_says_none_is_left(
        self, project: Path, versions: list[Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An archived version keeps its entry and file; the model is told to have no production."""
        registry = registry_of(project)
        registry.register(versions[0], "wine", stage="production", trust=TRUST)
        assert main(["registry", "archive", "wine", "1"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("wine@v1 is now archived (was production)")
        assert "wine has no production version now" in out and out.count("\n") == 1
        entry = registry.show("wine", 1)
        assert entry.stage == "archived" and versions[0].exists()
        assert [c.stage for c in entry.stage_history] == ["production", "archived"]
        with pytest.raises(RegistryError, match="no version of wine is in stage"):
            resolve_targets(registry, None, WEEKLY_STAGES)

    def test_an_archived_candidate_is_never_resolved(
        self, project: Path, versions: list[Path]
    ) -> None:
        """A week resolves production and candidate versions only, never an archived one."""
        registry = registry_of(project)
        registry.register(versions[0], "wine", stage="production", trust=TRUST)
        registry.register(versions[1], "wine", trust=TRUST)
        assert [t.version for t in resolve_targets(registry, None, WEEKLY_STAGES)] == [1, 2]
        registry.archive("wine", 2)
        assert [(t.version, t.stage) for t in resolve_targets(registry, None, WEEKLY_STAGES)] == [
            (1, "production")
        ]
        with pytest.raises(RegistryError, match="retired and never resolved"):
            registry.resolve("wine", "archived")

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["wien", "1"], "error: model 'wien' is not registered. Did you mean 'wine'?\n"),
            (["wine", "9"], "error: wine@v9 is not registered; wine has v1, v2\n"),
        ],
        ids=["model", "version"],
    )
    def test_unknown_model_or_version_is_one_line_exit_2(
        self,
        project: Path,
        versions: list[Path],
        capsys: pytest.CaptureFixture[str],
        argv: list[str],
        message: str,
    ) -> None:
        """Archiving what is not registered: one line, exit 2, a did-you-mean or the versions."""
        registry = registry_of(project)
        registry.register(versions[0], "wine", trust=TRUST)
        registry.register(versions[1], "wine", trust=TRUST)
        assert main(["registry", "archive", *argv]) == 2
        assert capsys.readouterr().err == message
        assert {e.stage for e in registry.list()} == {"candidate"}

    def test_archiving_twice_changes_nothing(
        self, project: Path, versions: list[Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An archived version archived again: said so, its history unchanged."""
        registry = registry_of(project)
        registry.register(versions[0], "wine", trust=TRUST)
        assert main(["registry", "archive", "wine", "1"]) == 0
        before = registry.show("wine", 1)
        assert main(["registry", "archive", "wine", "1"]) == 0
        assert capsys.readouterr().out.endswith("wine@v1 is already archived; nothing changed\n")
        assert registry.show("wine", 1) == before


class TestListing:
    def test_list_shows_stage_binding_and_last_week_evaluated(
        self,
        project: Path,
        toy_evalset: Path,
        versions: list[Path],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Stage, evalsets (the binding, else the only evalset) and the newest week, ok or error, or -."""
        config = load_config(project / "evalsentry.yaml")
        registry = registry_of(project)
        registry.register(versions[0], "wine", stage="production", trust=TRUST)
        broken = registry.register(versions[1], "wine", trust=TRUST)
        registry.register(versions[2], "wine", trust=TRUST)
        registry.register(versions[0], "beer", trust=TRUST)
        evalset = load_evalset(toy_evalset)
        history = History(config.store_url)
        versions[1].write_bytes(b"changed since registration")  # its evaluation is an error
        for week, version in (("2026-W47", 1), ("2026-W49", 1), ("2026-W48", 2)):
            target = Target.from_entry(registry.show("wine", version))
            outcome = evaluate_checkpoint(target, evalset, config=config, run_id=week, week=week)
            record(history, [outcome])
        assert history.evaluations(model="wine").set_index("version").loc[2, "status"] == "error"

        rows = listing(capsys)

        assert rows["wine@v1"][1:4] == ["production", "toy", "2026-W49"]
        assert rows[broken.ref][1:4] == ["candidate", "toy", "2026-W48"]
        assert rows["wine@v3"][1:4] == ["candidate", "toy", "-"]
        assert rows["beer@v1"][1:4] == ["candidate", "toy (the only evalset; unbound)", "-"]

    def test_show_includes_the_binding(
        self, project: Path, versions: list[Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`registry show` adds the model's bound evalsets (null when unbound) to the entry."""
        registry = registry_of(project)
        registry.register(versions[0], "wine", trust=TRUST)
        registry.register(versions[0], "beer", trust=TRUST)
        assert main(["registry", "show", "wine"]) == 0
        wine = json.loads(capsys.readouterr().out)
        assert (wine["binding"], wine["last_week"], wine["version"]) == (["toy"], None, 1)
        assert main(["registry", "show", "beer"]) == 0
        assert json.loads(capsys.readouterr().out)["binding"] is None
