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

from evalsentry.history.schema import EVALUATIONS_SCHEMA
from evalsentry.history.store import History
from tests.models import TRUST, TRUSTED_YAML, Marker, TinyNet
from tests.synthetic import accuracy_mask, pre_ledger, record_week
from tests.unit.cli.test_cli_registry import run_cli
from tests.validated import validated


@pytest.fixture
def project(tmp_path: Path, toy_evalset: Path) -> Path:
    """A project folder with the toy evalset and its own store and registry."""
    (tmp_path / "evalsentry.yaml").write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n{TRUSTED_YAML}"
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
    validated(project)  # by an earlier run: the file is the subject
    path = toy_checkpoints["good"]
    path.write_bytes(path.read_bytes()[:1000])
    err = one_line_error(
        run_cli(
            "evaluate",
            "--checkpoint",
            str(path),
            "--model",
            "toy-model",
            "--new-model",
            cwd=project,
        )
    )
    assert "corrupt or truncated" in err


def test_f4_checkpoint_replaced_after_registration_is_refused(
    project: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """4: `registry` pins the hash; `run`'s evaluation of a replaced file refuses it (see flows)."""
    from evalsentry.checkpoints.checkpoint import load_checkpoint
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.errors import CheckpointChanged

    entry = Registry(str(project / "registry")).register(
        toy_checkpoints["good"], "toy-model", trust=TRUST
    )
    shutil.copy(toy_checkpoints["degraded"], toy_checkpoints["good"])
    with pytest.raises(CheckpointChanged, match="changed since registration"):
        load_checkpoint(entry.uri, expected_sha256=entry.sha256, trust=TRUST)


def test_f5_malicious_pickle_is_refused_at_registration_and_evaluation(
    project: Path, tmp_path: Path
) -> None:
    """5: a pickle whose __reduce__ runs a command is refused by register and evaluate; it never runs."""
    validated(project)  # by an earlier run: the file is the subject
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"model_state_dict": {}, "lineage": Marker(str(marker))}, evil)
    assert "refused" in one_line_error(
        run_cli("register", str(evil), "--model", "m", "--new-model", cwd=project)
    )
    err = one_line_error(
        run_cli("evaluate", "--checkpoint", str(evil), "--model", "m", "--new-model", cwd=project)
    )
    assert "refused" in err
    assert not marker.exists()


def test_f6_missing_lineage_is_refused_listing_fields(project: Path, tmp_path: Path) -> None:
    """6: registration without lineage lists every missing field."""
    bare = tmp_path / "bare.pt"
    torch.save({"model_state_dict": TinyNet().state_dict(), "lineage": {"seed": 1}}, bare)
    err = one_line_error(run_cli("register", str(bare), "--model", "m", "--new-model", cwd=project))
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
            run_cli(
                "register", str(tiny_checkpoint), "--model", "m", "--new-model", cwd=project
            ).returncode
            == 0
        )
        entry = project / "registry" / "m" / "v000001.json"
        document = json.loads(entry.read_text())
        del document["sha256"]
        entry.write_text(json.dumps(document))
        assert "v000001.json: sha256" in one_line_error(run_cli("registry", "list", cwd=project))

    def test_history_file(self, project: Path) -> None:
        """A damaged history file is named, with what to do."""
        record_week(History(str(project / "store")), "2026-W40", accuracy_mask(100, 0.9))
        damaged = next((project / "store" / "evaluations").glob("*.parquet"))
        damaged.write_bytes(b"PAR1garbage")
        error = one_line_error(run_cli("gate", cwd=project))
        assert f"{damaged}: changed since the history published it" in error
        assert f"evalsentry history forget {damaged}" in error


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
            "--new-model",
            "--config",
            str(project / "evalsentry.yaml"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "a file stands where the history's evaluations/ folder should be" in err
    assert (store / "evaluations").read_text() == "not a folder"


def test_f15_older_schema_reads_and_newer_schema_is_refused(project: Path) -> None:
    """15: a file of an older schema (fewer columns) reads; one of a newer schema asks to upgrade."""
    history = History(str(project / "store"))
    record_week(history, "2026-W40", accuracy_mask(100, 0.9))
    pre_ledger(project / "store")  # written before the ledger: the files as they are count
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


# --- issue 13, point 6: damaged or misplaced files are one line, exit 2, nothing lost -----------


def cli_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the CLI in this process; assert exit 2 and one line without traceback; the line."""
    from evalsentry.cli import main

    code = main(list(args))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def truncate(path: Path) -> bytes:
    """Cut ``path`` to half its size, as a crashed copy would; return the bytes left."""
    data = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(data)
    return data


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("command", ["gate", "report"])
def test_f30_damaged_predictions_file_is_named(
    project: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """30: a truncated predictions file stops gate and report with one line naming it, exit 2."""
    history = History(str(project / "store"))
    record_week(history, "2026-W40", accuracy_mask(100, 0.9))
    current = record_week(history, "2026-W41", accuracy_mask(100, 0.9, seed=1))
    damaged = project / "store" / "predictions" / f"{current}.parquet"
    left = truncate(damaged)
    before = files_under(project / "store")
    err = cli_error(capsys, command, "--config", str(project / "evalsentry.yaml"))
    assert f"{damaged}: changed since the history published it" in err
    assert f"evalsentry history forget {damaged}" in err
    assert damaged.read_bytes() == left
    assert {k: v for k, v in files_under(project / "store").items() if "reports" not in k} == before


def test_f31_compaction_stops_at_a_damaged_file_and_keeps_every_file(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """31: `history compact` names the damaged file, exit 2; that table's files stay byte for byte."""
    history = History(str(project / "store"))
    for week in (40, 41, 42):
        record_week(history, f"2026-W{week}", accuracy_mask(100, 0.9, seed=week))
    metrics = project / "store" / "metrics"
    damaged = sorted(metrics.glob("*.parquet"))[1]
    truncate(damaged)
    before = files_under(metrics)
    err = cli_error(capsys, "history", "compact", "--config", str(project / "evalsentry.yaml"))
    assert f"{damaged}: changed since the history published it" in err and "not compacted" in err
    assert files_under(metrics) == before  # no merged file, no temporary file, nothing removed
    # The tables compacted before it hold every row.
    assert len(history.evaluations(include_superseded=True)) == 3


@pytest.mark.parametrize(
    ("suite", "named"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"name": "toy", "expectations": "all"}', "expectations: Input should be a valid list"),
        (
            '{"name": "toy", "expectations": [{"type": "nope", "kwargs": {}}]}',
            "unknown expectation",
        ),
        (
            '{"name": "toy", "expectations": '
            '[{"type": "expect_column_values_to_not_be_null", "kwargs": {}}]}',
            "expectations.0 (expect_column_values_to_not_be_null): kwargs.column",
        ),
    ],
)
def test_f32_malformed_expectation_suite_is_named(
    project: Path,
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
    suite: str,
    named: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """32: a malformed expectations.json is one line naming it, for `evalset verify` and a run's validation."""
    (toy_evalset / "expectations.json").write_text(suite)
    config = str(project / "evalsentry.yaml")
    err = cli_error(capsys, "evalset", "verify", "toy", "--config", config)
    assert f"{toy_evalset / 'expectations.json'}: " in err and named in err
    err = cli_error(
        capsys,
        "evaluate",
        "--checkpoint",
        str(toy_checkpoints["good"]),
        "--model",
        "toy-model",
        "--new-model",
        "--config",
        config,
    )
    assert f"{toy_evalset / 'expectations.json'}: " in err and named in err
    assert not (project / "store").exists()  # nothing evaluated, nothing recorded


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"store: st\xe9re\n", "evalsentry.yaml: not UTF-8 text"),
        (b"- store\n- registry\n", "evalsentry.yaml: (top level): expected a mapping"),
        (b"root: /etc\n", "evalsentry.yaml: root: not a setting"),
        (b"1: x\n", "evalsentry.yaml: 1: a setting name must be text"),
        (b"null: x\n", "evalsentry.yaml: null: a setting name must be text"),
        (b"? [a]\n: x\n", "evalsentry.yaml: not valid YAML (found unhashable key, line 1)"),
    ],
)
def test_f33_unreadable_evalsentry_yaml_is_named(
    project: Path, content: bytes, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """33: evalsentry.yaml not UTF-8, not a mapping, with `root:` or a non-text key: file and field."""
    (project / "evalsentry.yaml").write_bytes(content)
    assert named in cli_error(capsys, "gate", "--config", str(project / "evalsentry.yaml"))


def test_f34_registry_that_is_a_file_is_refused(
    project: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """34: `registry:` naming a file: register and list fail with one line, not an empty list."""
    registry = project / "registry"
    registry.write_text("not a folder")
    config = str(project / "evalsentry.yaml")
    for args in (
        ("register", str(tiny_checkpoint), "--model", "m", "--new-model"),
        ("registry", "list"),
        ("registry", "show", "m"),
    ):
        err = cli_error(capsys, *args, "--config", config)
        assert f"{registry}: the registry is a file, not a folder" in err, args
        assert "point `registry:`" in err
    assert registry.read_text() == "not a folder"


def test_f35_store_that_is_a_file_fails_before_any_evaluation(
    project: Path,
    toy_checkpoints: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """35: `store:` naming a file: evaluate stops before inference, gate before reading; one line."""
    from evalsentry.evaluation import pipeline

    def no_inference(*args: object, **kwargs: object) -> None:
        raise AssertionError("evaluated although the store cannot be written")

    monkeypatch.setattr(pipeline, "evaluate_checkpoint", no_inference)
    store = project / "store"
    store.write_text("not a folder")
    config = str(project / "evalsentry.yaml")
    for args in (
        (
            "evaluate",
            "--checkpoint",
            str(toy_checkpoints["good"]),
            "--model",
            "toy-model",
            "--new-model",
        ),
        ("gate",),
        ("history",),
        ("history", "compact"),
    ):
        err = cli_error(capsys, *args, "--config", config)
        assert f"{store}: the store is a file, not a folder" in err, args
        assert "point `store:`" in err
    assert store.read_text() == "not a folder"
