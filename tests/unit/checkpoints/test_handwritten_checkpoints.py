"""Checkpoints written by other code: the hand-written layout, and a bare state dict + --lineage."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.checkpoint import load_checkpoint
from evalsentry.checkpoints.lineage import read_lineage_file
from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import Config
from evalsentry.errors import CheckpointError, ConfigError, NoLineage, UnknownLayout
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.history.store import History
from evalsentry.storage import sha256_file
from tests.conftest import _teacher
from tests.models import TRUST, TRUSTED_YAML, TinyNet

FACTORY = ["--factory", "tests.models:TinyNet", "--factory-kwargs", '{"hidden": 8}']
LINEAGE = {
    "git_sha": "feedface" * 5,
    "data_sha": "d" * 64,
    "config": {"lr": 0.01, "epochs": 3},
    "timestamp_utc": "2026-11-30T06:00:00+00:00",
}
WEEK = "2026-W49"


def handwritten(path: Path) -> Path:
    """What many teams write by hand: weights, optimizer, metrics and lineage, no factory, no seed."""
    model = _teacher()
    optimizer = torch.optim.Adam(model.parameters())  # type: ignore[attr-defined]
    torch.save(
        {
            "model_state_dict": model.state_dict(),  # type: ignore[attr-defined]
            "optimizer_state_dict": optimizer.state_dict(),
            "metrics": {"val_acc": 0.97, "epoch": 3, "notes": "best so far"},
            "lineage": {
                **LINEAGE,
                "timestamp_utc": datetime(2026, 11, 30, 6, tzinfo=UTC).isoformat(),
            },
        },
        path,
    )
    return path


def bare(path: Path) -> Path:
    """``torch.save(model.state_dict(), path)``: weights and nothing else."""
    torch.save(_teacher().state_dict(), path)  # type: ignore[attr-defined]
    return path


@pytest.fixture
def project(chdir_tmp: Path, toy_evalset: Path) -> Path:
    """A project folder with the toy evalset bound to model 'wine' and the test models trusted."""
    (chdir_tmp / "evalsentry.yaml").write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n"
        "models: {wine: {evalsets: [toy]}}\n" + TRUSTED_YAML
    )
    return chdir_tmp


def evaluate_registered(project: Path, toy_evalset: Path, version: int) -> dict[str, object]:
    """Evaluate a registered version as a week does (child process), record it, return its row."""
    config = Config(
        root=str(project),
        store="store",
        registry="registry",
        trusted_factories=list(TRUST.factories),
    )
    entry = Registry(config.registry_url).show("wine", version)
    outcome = evaluate_checkpoint(
        Target.from_entry(entry), load_evalset(toy_evalset), config=config, run_id="r", week=WEEK
    )
    record(History(config.store_url), [outcome])
    return outcome.evaluation


class TestHandwrittenLayout:
    def test_registers_with_a_factory_and_evaluates_with_its_lineage(
        self, project: Path, toy_evalset: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The hand-written layout registers with --factory and its evaluation records its lineage."""
        path = handwritten(project / "hand.pt")
        argv = ["register", str(path), "--model", "wine", "--new-model", "--stage", "production"]
        argv += FACTORY
        assert main(argv) == 0
        assert "registered wine@v1 (production)" in capsys.readouterr().out
        entry = Registry(str(project / "registry")).show("wine", 1)
        assert entry.lineage.get("seed") is None
        assert entry.lineage["git_sha"] == LINEAGE["git_sha"]
        assert entry.lineage["model"] == {
            "factory": "tests.models:TinyNet",
            "kwargs": {"hidden": 8},
        }
        assert entry.metrics == {"val_acc": 0.97, "epoch": 3.0}  # text left out

        row = evaluate_registered(project, toy_evalset, 1)

        assert row["status"] == "ok", row.get("error")
        assert (row["git_sha"], row["data_sha"]) == (LINEAGE["git_sha"], LINEAGE["data_sha"])
        assert json.loads(str(row["config_json"])) == LINEAGE["config"]
        assert row["seed"] is None
        assert row["trained_at"] == "2026-11-30T06:00:00+00:00"

    def test_without_a_factory_names_the_flag(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --factory the one-line error says to pass it; nothing is registered."""
        path = handwritten(project / "hand.pt")
        assert main(["register", str(path), "--model", "wine", "--new-model"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "model.factory" in err and "--factory" in err
        assert Registry(str(project / "registry")).list() == []


class TestBareStateDict:
    def test_is_refused_naming_both_ways_to_add_lineage(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A bare state dict is not 'corrupt': the error names save_checkpoint and --lineage."""
        path = bare(project / "bare.pt")
        assert main(["register", str(path), "--model", "wine", "--new-model", *FACTORY]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "bare state dict" in err and "corrupt" not in err
        assert "evalsentry.save_checkpoint(" in err and "--lineage FILE" in err
        assert "git_sha, data_sha, config" in err
        assert Registry(str(project / "registry")).list() == []

    def test_registers_with_lineage_and_evaluation_records_the_entry_lineage(
        self, project: Path, toy_evalset: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Bare weights + --factory + --lineage register, and evaluate with that lineage recorded."""
        path = bare(project / "bare.pt")
        lineage = project / "lineage.yaml"
        lineage.write_text(
            "git_sha: 'feedfacefeedfacefeedfacefeedfacefeedface'\n"
            f"data_sha: '{'d' * 64}'\nconfig: {{lr: 0.01, epochs: 3}}\nseed: 11\n"
            "timestamp_utc: 2026-11-30T06:00:00+00:00\n"  # unquoted: YAML reads a datetime
        )
        argv = ["register", str(path), "--model", "wine", "--new-model", *FACTORY]
        argv += ["--lineage", str(lineage)]
        assert main(argv) == 0
        assert "registered wine@v1 (candidate)" in capsys.readouterr().out
        entry = Registry(str(project / "registry")).show("wine", 1)
        assert entry.lineage["seed"] == 11
        assert entry.lineage["timestamp_utc"] == "2026-11-30T06:00:00+00:00"
        assert entry.lineage["model"]["factory"] == "tests.models:TinyNet"

        row = evaluate_registered(project, toy_evalset, 1)

        assert row["status"] == "ok", row.get("error")
        assert (row["git_sha"], row["seed"]) == (LINEAGE["git_sha"], 11)
        assert json.loads(str(row["config_json"])) == LINEAGE["config"]
        assert row["trained_at"] == "2026-11-30T06:00:00+00:00"

    def test_evaluation_runs_the_pinned_factory_only(self, tmp_path: Path) -> None:
        """A registered bare file loads only with its pinned sha256 and a trusted factory."""
        path = bare(tmp_path / "bare.pt")
        sha = sha256_file(path)[0]
        with pytest.raises(NoLineage):  # a file given directly, no registration behind it
            load_checkpoint(path, trust=TRUST, factory="tests.models:TinyNet")
        loaded = load_checkpoint(
            path, trust=TRUST, expected_sha256=sha, factory="tests.models:TinyNet"
        )
        assert isinstance(loaded.model, TinyNet) and loaded.lineage == {}
        from evalsentry.errors import UntrustedFactory
        from evalsentry.trust import Trust

        with pytest.raises(UntrustedFactory):
            load_checkpoint(
                path, trust=Trust(()), expected_sha256=sha, factory="tests.models:TinyNet"
            )

    def test_lineage_with_a_checkpoint_that_records_its_own_is_refused(
        self, tmp_path: Path
    ) -> None:
        """--lineage for a file that carries lineage is refused: one file, one lineage."""
        path = handwritten(tmp_path / "hand.pt")
        with pytest.raises(CheckpointError, match="records its own lineage"):
            Registry(str(tmp_path / "registry")).register(
                path, "wine", trust=TRUST, factory="tests.models:TinyNet", lineage=LINEAGE
            )
        assert Registry(str(tmp_path / "registry")).list() == []

    def test_an_unknown_layout_is_not_called_corrupt(self, tmp_path: Path) -> None:
        """A readable payload of another layout is named by its keys, not called corrupt."""
        path = tmp_path / "lightning.pt"
        torch.save({"state_dict": TinyNet().state_dict(), "epoch": 3}, path)
        with pytest.raises(UnknownLayout, match=r"keys \['epoch', 'state_dict'\]") as err:
            load_checkpoint(path, trust=TRUST)
        assert "corrupt" not in str(err.value)


class TestLineageFile:
    def write(self, tmp_path: Path, text: str, name: str = "lineage.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    def test_json_without_seed_gives_a_null_seed(self, tmp_path: Path) -> None:
        """seed is optional: absent, it is recorded as null."""
        path = self.write(tmp_path, json.dumps(LINEAGE), "lineage.json")
        assert read_lineage_file(path) == {**LINEAGE, "seed": None}

    @pytest.mark.parametrize(
        ("text", "field", "problem"),
        [
            (
                "git_sha: abc\nconfig: {}\ntimestamp_utc: '2026-11-30T06:00:00+00:00'\n",
                "data_sha",
                "required",
            ),
            (
                "git_sha: abc\ndata_sha: d\nconfig: {}\ntimestamp_utc: '2026-11-30T06:00:00'\n",
                "timestamp_utc",
                "with a timezone",
            ),
            (
                "git_sha: 1234567\ndata_sha: d\nconfig: {}\n"
                "timestamp_utc: '2026-11-30T06:00:00+00:00'\n",
                "git_sha",
                "quote it",
            ),
            (
                "git_sha: a\ndata_sha: d\nconfig: {}\ntimestamp_utc: '2026-11-30T06:00:00+00:00'\n"
                "model: {factory: os:system}\n",
                "model",
                "--factory",
            ),
            (
                "git_sha: a\ndata_sha: d\nconfig: {}\ntimestamp_utc: '2026-11-30T06:00:00+00:00'\n"
                "sede: 1\n",
                "sede",
                "unknown field",
            ),
            (
                "git_sha: a\ndata_sha: d\nconfig: [1]\ntimestamp_utc: '2026-11-30T06:00:00+00:00'\n",
                "config",
                "mapping",
            ),
        ],
        ids=["missing", "naive-time", "unquoted-sha", "model", "unknown", "config-list"],
    )
    def test_a_bad_file_names_file_and_field(
        self, tmp_path: Path, text: str, field: str, problem: str
    ) -> None:
        """A malformed lineage file is one error naming the file, the field and the fix."""
        path = self.write(tmp_path, text)
        with pytest.raises(ConfigError, match=rf"lineage\.yaml: {field}: .*{problem}"):
            read_lineage_file(path)

    def test_cli_reports_a_bad_lineage_file_in_one_line(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A --lineage file missing a field: one line, exit 2, nothing registered."""
        path = bare(project / "bare.pt")
        lineage = self.write(project, "git_sha: a\n")
        argv = ["register", str(path), "--model", "wine", "--new-model", *FACTORY]
        argv += ["--lineage", str(lineage)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "lineage.yaml: data_sha: required" in err
        assert Registry(str(project / "registry")).list() == []
