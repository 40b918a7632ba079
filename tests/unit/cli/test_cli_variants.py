"""`evalsentry register --variant-of`: serving variants registered, listed and evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from tests.conftest import _teacher
from tests.models import TRUST, TRUSTED_YAML
from tests.unit.cli.test_cli_tolerance import training_cost

KWARGS = {"features": 4, "classes": 3, "hidden": 8}


@pytest.fixture
def project(
    tmp_path: Path,
    toy_evalset: Path,
    train_data: Path,
    pinned_git: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """The teacher registered as toy@v1 (production, with a training cost), as the working folder."""
    (tmp_path / "evalsentry.yaml").write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n{TRUSTED_YAML}"
    )
    path = save_checkpoint(
        _teacher(),  # type: ignore[arg-type]
        tmp_path / "teacher.pt",
        metrics={"val_accuracy": 1.0},
        config={"lr": 0.01},
        seed=7,
        data=train_data,
        factory="tests.models:TinyNet",
        factory_kwargs=KWARGS,
        training=training_cost(1),
    )
    Registry(str(tmp_path / "registry")).register(path, "toy", stage="production", trust=TRUST)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--variant-of", "toy@v1", "--transform", "int4"],
            "--transform: 'int4' is not a transform evalsentry applies; use one of "
            "dynamic-int8, fp16, bf16",
        ),
        (["--variant-of", "toy@v1"], "--variant-of MODEL@vN and --transform NAME go together"),
        (["--variant-of", "toy", "--transform", "fp16"], "--variant-of: 'toy' names no version"),
        (["--variant-of", "toy@v9", "--transform", "fp16"], "toy@v9 is not registered; toy has v1"),
        (
            ["--variant-of", "toy@v1", "--transform", "fp16", "--model", "other"],
            "--model other differs from the line of --variant-of toy@v1",
        ),
        ([], "give the CHECKPOINT file and --model, or --variant-of MODEL@vN"),
    ],
    ids=[
        "unknown-transform",
        "no-transform",
        "no-version",
        "no-such-version",
        "other-line",
        "nothing",
    ],
)
def test_a_variant_asked_wrongly_is_one_line_and_nothing_registered(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["register", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and said in err, err
    assert [e.version for e in Registry(str(project / "registry")).list("toy")] == [1]


def test_a_variant_of_a_variant_is_refused_naming_the_float_version(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["register", "--variant-of", "toy@v1", "--transform", "bf16"]) == 0
    assert main(["register", "--variant-of", "toy@v2", "--transform", "dynamic-int8"]) == 2
    err = capsys.readouterr().err
    assert (
        "toy@v2 is itself a bf16 variant; make variants of the float version it came from (v1)"
        in err
    )


def test_show_prints_the_pinned_transform(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["register", "--variant-of", "toy@v1", "--transform", "fp16"]) == 0
    capsys.readouterr()
    assert main(["registry", "show", "toy", "--version", "2"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["lineage"]["model"]["transform"] == "fp16"
    assert "training_cost" not in shown["lineage"]  # the parent's training bill, not the variant's
    parent = Registry(str(project / "registry")).show("toy", 1)
    assert parent.lineage["training_cost"]["cost"] == 0.01


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--version", "9"], "toy@v9 is not registered; toy has v1"),
        (["--version", "1", "--checkpoint", "x.pt"], "not allowed with argument"),
        ([], "one of the arguments --checkpoint --version is required"),
    ],
    ids=["no-such-version", "both", "neither"],
)
def test_evaluate_names_its_checkpoint_by_file_or_version_not_both(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["evaluate", "--model", "toy", *args]) == 2
    assert said in capsys.readouterr().err


def test_a_variant_of_a_version_saved_with_its_own_transform_is_refused_in_one_line(
    project: Path, train_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bf16 checkpoint registered as a version of its own (no variant_of): no KeyError."""
    from evalsentry.checkpoints.variants import apply_transform
    from tests.unit.checkpoints.test_variants import float_model, save

    path = save(apply_transform(float_model(), "bf16"), project / "half.pt", train_data, "bf16")
    assert main(["register", str(path), "--model", "toy"]) == 0
    assert main(["register", "--variant-of", "toy@v2", "--transform", "dynamic-int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "toy@v2 is itself a bf16 variant; make variants of the float version it came from"
    )


def test_evaluate_version_refuses_a_registered_file_changed_since(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--version N evaluates the bytes registered as vN, or nothing."""
    teacher = project / "teacher.pt"
    teacher.write_bytes(teacher.read_bytes() + b"\0")
    assert main(["evaluate", "--model", "toy", "--version", "1"]) == 2
    assert "changed since registration" in capsys.readouterr().err
