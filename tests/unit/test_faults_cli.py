"""Fault injection through the CLI: one line, the right exit code, nothing run, nothing lost.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from evalsentry.history import EVALUATIONS_SCHEMA, History
from tests.models import Marker, TinyNet
from tests.synthetic import accuracy_mask, record_week
from tests.unit.test_cli_registry import run_cli


@pytest.fixture
def project(tmp_path: Path, toy_evalset: Path) -> Path:
    """A project folder with the toy evalset and its own store and registry."""
    (tmp_path / "evalsentry.yaml").write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n"
    )
    return tmp_path


def one_line_error(result: object, code: int = 2) -> str:
    """Assert a one-line error without traceback and the exit code; return the line."""
    assert result.returncode == code, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert "\n" not in err and "Traceback" not in err, err
    return str(err)


def test_f3_truncated_candidate_is_refused(project: Path, toy_checkpoints: dict[str, Path]) -> None:
    """3: a truncated checkpoint given to `evaluate` is a one-line corrupt error, exit 2."""
    path = toy_checkpoints["good"]
    path.write_bytes(path.read_bytes()[:1000])
    err = one_line_error(
        run_cli("evaluate", "--checkpoint", str(path), "--model", "toy-model", cwd=project)
    )
    assert "corrupt or truncated" in err


def test_f4_checkpoint_replaced_after_registration_is_refused(
    project: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """4: `registry` pins the hash; `run`'s evaluation of a replaced file refuses it (see flows)."""
    from evalsentry.checkpoint import load_checkpoint
    from evalsentry.errors import CheckpointChanged
    from evalsentry.registry import Registry

    entry = Registry(str(project / "registry")).register(toy_checkpoints["good"], "toy-model")
    shutil.copy(toy_checkpoints["degraded"], toy_checkpoints["good"])
    with pytest.raises(CheckpointChanged, match="changed since registration"):
        load_checkpoint(entry.uri, expected_sha256=entry.sha256)


def test_f5_malicious_pickle_is_refused_at_registration_and_evaluation(
    project: Path, tmp_path: Path
) -> None:
    """5: a pickle whose __reduce__ runs a command is refused by register and evaluate; it never runs."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"model_state_dict": {}, "lineage": Marker(str(marker))}, evil)
    assert "refused" in one_line_error(run_cli("register", str(evil), "--model", "m", cwd=project))
    err = one_line_error(
        run_cli("evaluate", "--checkpoint", str(evil), "--model", "m", cwd=project)
    )
    assert "refused" in err
    assert not marker.exists()


def test_f6_missing_lineage_is_refused_listing_fields(project: Path, tmp_path: Path) -> None:
    """6: registration without lineage lists every missing field."""
    bare = tmp_path / "bare.pt"
    torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": {"seed": 1}}, bare)
    err = one_line_error(run_cli("register", str(bare), "--model", "m", cwd=project))
    assert "git_sha, data_sha, config, timestamp_utc, model.factory" in err


class TestF12MalformedDocuments:
    def test_evalsentry_yaml(self, project: Path) -> None:
        """A bad field in evalsentry.yaml names the file and the field."""
        (project / "evalsentry.yaml").write_text("gate: {alpha: 7}\n")
        assert "evalsentry.yaml: gate.alpha" in one_line_error(run_cli("gate", cwd=project))

    def test_evalset_yaml(self, project: Path, toy_evalset: Path) -> None:
        """A bad field in evalset.yaml names the file and the field."""
        manifest = yaml.safe_load((toy_evalset / "evalset.yaml").read_text())
        manifest["num_rows"] = "many"
        (toy_evalset / "evalset.yaml").write_text(yaml.safe_dump(manifest))
        assert "evalset.yaml: num_rows" in one_line_error(
            run_cli("evalset", "verify", "toy", cwd=project)
        )

    def test_registry_entry(self, project: Path, tiny_checkpoint: Path) -> None:
        """A hand-edited registry entry names the file and the field."""
        assert (
            run_cli("register", str(tiny_checkpoint), "--model", "m", cwd=project).returncode == 0
        )
        entry = project / "registry" / "m" / "v000001.json"
        document = json.loads(entry.read_text())
        del document["sha256"]
        entry.write_text(json.dumps(document))
        assert "v000001.json: sha256" in one_line_error(run_cli("registry", "list", cwd=project))

    def test_history_file(self, project: Path) -> None:
        """A damaged history file is named, with what to do."""
        record_week(History(str(project / "store")), "2026-W40", accuracy_mask(100, 0.9))
        (project / "store" / "evaluations" / "damaged.parquet").write_bytes(b"PAR1garbage")
        assert "move the damaged file aside" in one_line_error(run_cli("gate", cwd=project))


@pytest.mark.parametrize(
    "args",
    [
        ("evalset", "verify", "../../x"),
        ("evalset", "verify", "/etc"),
        ("register", "CKPT", "--model", "../../x"),
        ("register", "CKPT", "--model", "a b"),
        ("baseline", "show", "--model", "../x"),
    ],
)
def test_f13_path_tricks_in_names_are_refused(
    project: Path, tiny_checkpoint: Path, args: tuple[str, ...]
) -> None:
    """13: names that try to address other folders are refused, exit 2."""
    argv = [str(tiny_checkpoint) if a == "CKPT" else a for a in args]
    assert "invalid" in one_line_error(run_cli(*argv, cwd=project))


def test_f14_unwritable_store_is_a_clear_error_and_keeps_history(
    project: Path, toy_checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """14: a store that cannot be written (a file where its folder should be) fails clearly."""
    from evalsentry.cli import main

    store = project / "store"
    store.mkdir()
    (store / "evaluations").write_text("not a folder")
    code = main(
        [
            "evaluate",
            "--checkpoint",
            str(toy_checkpoints["good"]),
            "--model",
            "toy-model",
            "--config",
            str(project / "evalsentry.yaml"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "cannot write the history" in err and "not committed" in err
    assert (store / "evaluations").read_text() == "not a folder"


def test_f15_older_schema_reads_and_newer_schema_is_refused(project: Path) -> None:
    """15: a file of an older schema (fewer columns) reads; one of a newer schema asks to upgrade."""
    history = History(str(project / "store"))
    record_week(history, "2026-W40", accuracy_mask(100, 0.9))
    old = pq.read_table(next((project / "store" / "evaluations").glob("*.parquet")))
    legacy = old.drop_columns(["cuda_version", "driver_version", "validation_json"])
    legacy = legacy.set_column(0, "schema_version", pa.array([0] * len(legacy), pa.int32()))
    legacy = legacy.set_column(
        legacy.column_names.index("evaluation_id"), "evaluation_id", pa.array(["legacy"])
    )
    pq.write_table(
        legacy.set_column(legacy.column_names.index("week"), "week", pa.array(["2026-W39"])),
        project / "store" / "evaluations" / "legacy.parquet",
    )
    frame = history.evaluations()
    assert sorted(frame["week"]) == ["2026-W39", "2026-W40"]
    assert pd.isna(frame.set_index("week").loc["2026-W39", "cuda_version"])
    newer = old.set_column(0, "schema_version", pa.array([9] * len(old), pa.int32()))
    pq.write_table(
        newer.cast(EVALUATIONS_SCHEMA), project / "store" / "evaluations" / "future.parquet"
    )
    assert "newer evalsentry" in one_line_error(run_cli("history", cwd=project))
