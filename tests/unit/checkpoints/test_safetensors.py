"""safetensors checkpoints: tensors and text only, read without pickle, registered and gated."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from evalsentry.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.errors import UntrustedFactory, UsageError
from evalsentry.trust import Trust
from tests.conftest import _teacher
from tests.models import TRUST, TRUSTED_YAML, TiedNet, TinyNet
from tests.unit.cli.test_cli_gate import evaluate_candidate, record_production

KWARGS = {"features": 4, "classes": 3, "hidden": 8}
FACTORY = ["--factory", "tests.models:TinyNet", "--factory-kwargs", json.dumps(KWARGS)]
LINEAGE = {
    "git_sha": "feedface" * 5,
    "data_sha": "d" * 64,
    "config": {"lr": 0.01},
    "seed": 3,
    "timestamp_utc": "2026-11-30T06:00:00+00:00",
}


def saved(model: torch.nn.Module, path: Path, train_data: Path, **extra: object) -> Path:
    """``save_checkpoint`` of a TinyNet-shaped ``model`` to ``path``."""
    return save_checkpoint(
        model,
        path,
        metrics={"val_acc": 0.9},
        config={"lr": 0.01},
        seed=7,
        data=train_data,
        factory=f"tests.models:{type(model).__name__}",
        factory_kwargs=KWARGS,
        **extra,  # type: ignore[arg-type]
    )


def degraded() -> torch.nn.Module:
    """The teacher with one class pushed up: worse on the toy evalset."""
    model = _teacher()
    with torch.no_grad():
        model.body[2].bias[0] += 2.0  # type: ignore[attr-defined,index]
    return model  # type: ignore[return-value]


@pytest.fixture
def project(tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]) -> Path:
    """A project with the toy evalset, and one production result of the good toy checkpoint."""
    (tmp_path / "evalsentry.yaml").write_text(
        "store: store\nregistry: registry\nevalsets: evalsets\n"
        "models: {toy-model: {evalsets: [toy]}}\n" + TRUSTED_YAML
    )
    record_production(tmp_path, toy_checkpoints["good"], 1, "2026-W40")
    return tmp_path


class TestSaveAndLoad:
    def test_save_checkpoint_writes_weights_and_lineage_as_safetensors(
        self, tmp_path: Path, train_data: Path
    ) -> None:
        """A `.safetensors` path gets a safetensors file (no zip, no pickle) whose header carries
        the lineage and metrics; it loads back into the same weights, only with trust."""
        model = _teacher()
        path = saved(model, tmp_path / "m.safetensors", train_data)  # type: ignore[arg-type]
        assert not zipfile.is_zipfile(path)
        with safe_open(str(path), "pt") as file:
            metadata = file.metadata()
            names = sorted(file.keys())
        assert names == sorted(model.state_dict())  # type: ignore[attr-defined]
        assert json.loads(metadata["lineage"])["seed"] == 7
        assert json.loads(metadata["lineage"])["model"]["factory"] == "tests.models:TinyNet"

        loaded = load_checkpoint(path, trust=TRUST)

        assert isinstance(loaded.model, TinyNet) and loaded.metrics == {"val_acc": 0.9}
        for name, tensor in model.state_dict().items():  # type: ignore[attr-defined]
            assert torch.equal(loaded.model.state_dict()[name], tensor)
        with pytest.raises(UntrustedFactory):
            load_checkpoint(path, trust=Trust(()))

    def test_tied_weights_are_written_and_load_back_tied(
        self, tmp_path: Path, train_data: Path
    ) -> None:
        """Two names for one tensor (which safetensors cannot alias) save and load strictly."""
        path = saved(TiedNet(), tmp_path / "tied.safetensors", train_data)
        model = load_checkpoint(path, trust=TRUST).model
        assert isinstance(model, TiedNet)
        assert model.tied.weight is model.body[2].weight  # type: ignore[index]

    def test_an_optimizer_is_refused_naming_both_ways_out(
        self, tmp_path: Path, train_data: Path
    ) -> None:
        """Its state is no flat mapping of tensors: one line, nothing written."""
        model = _teacher()
        optimizer = torch.optim.Adam(model.parameters())  # type: ignore[attr-defined]
        path = tmp_path / "m.safetensors"
        with pytest.raises(UsageError, match=r"save it apart .* or write a \.pt checkpoint"):
            saved(model, path, train_data, optimizer=optimizer)  # type: ignore[arg-type]
        assert not path.exists()

    def test_the_format_is_recognised_by_its_bytes_not_its_name(
        self, tmp_path: Path, train_data: Path
    ) -> None:
        """A safetensors file named `.pt` still loads as safetensors (torch.load never sees it)."""
        path = saved(_teacher(), tmp_path / "m.safetensors", train_data)  # type: ignore[arg-type]
        renamed = path.rename(tmp_path / "m.pt")
        assert isinstance(load_checkpoint(renamed, trust=TRUST).model, TinyNet)


class TestRegisterAndGate:
    def test_a_handwritten_file_registers_with_a_trusted_factory(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`save_file(state, path, metadata={"lineage": ...})`, as teams write it, registers
        with a trusted factory, keeps its format in the registry, and loads by its pinned hash."""
        path = project / "model.safetensors"
        save_file(_teacher().state_dict(), str(path), {"lineage": json.dumps(LINEAGE)})  # type: ignore[attr-defined]
        argv = ["register", str(path), "--model", "toy-model", "--config"]
        assert main([*argv, str(project / "evalsentry.yaml"), *FACTORY]) == 0
        assert "registered toy-model@v1" in capsys.readouterr().out
        entry = Registry(str(project / "registry")).show("toy-model", 1)
        assert entry.uri.endswith(".safetensors") and entry.lineage["seed"] == 3
        assert entry.lineage["model"] == {"factory": "tests.models:TinyNet", "kwargs": KWARGS}
        loaded = load_checkpoint(
            entry.uri,
            trust=TRUST,
            expected_sha256=entry.sha256,
            factory="tests.models:TinyNet",
            factory_kwargs=KWARGS,
        )
        assert isinstance(loaded.model, TinyNet) and loaded.lineage["git_sha"] == "feedface" * 5

    def test_the_gate_passes_the_same_weights_and_fails_worse_ones(
        self, project: Path, train_data: Path
    ) -> None:
        """Evaluated as CI candidates against production: exit 0 for the production weights
        saved as safetensors, exit 1 for a degraded copy."""
        same = saved(_teacher(), project / "same.safetensors", train_data)  # type: ignore[arg-type]
        worse = saved(degraded(), project / "worse.safetensors", train_data)
        assert evaluate_candidate(str(same), project) == 0
        assert evaluate_candidate(str(worse), project) == 1

    @pytest.mark.parametrize("dtype", [torch.int32, torch.float16])
    def test_weights_of_another_dtype_are_refused_naming_the_tensor(
        self, project: Path, capsys: pytest.CaptureFixture[str], dtype: torch.dtype
    ) -> None:
        """Weights stored as int32 (or float16) would be cast silently into another model:
        refused at register, naming the first tensor and both dtypes; nothing is kept."""
        path = project / "cast.safetensors"
        state = {k: v.to(dtype) for k, v in _teacher().state_dict().items()}  # type: ignore[attr-defined]
        save_file(state, str(path), {"lineage": json.dumps(LINEAGE)})
        argv = ["register", str(path), "--model", "toy-model", "--config"]
        assert main([*argv, str(project / "evalsentry.yaml"), *FACTORY]) == 2
        err = capsys.readouterr().err
        name = str(dtype).removeprefix("torch.")
        assert err == (
            f"error: {path}: weights do not fit the model factory: tensor 'body.0.weight' is "
            f"{name} where the model's is float32; save the weights in the model's dtype, or "
            "have the factory build the model in theirs\n"
        )
        assert Registry(str(project / "registry")).list() == []

    def test_a_bare_file_is_refused_naming_lineage(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Weights without lineage metadata: the bare-state-dict refusal, one line, nothing kept."""
        bare = project / "bare.safetensors"
        save_file(_teacher().state_dict(), str(bare))  # type: ignore[attr-defined]
        argv = ["register", str(bare), "--model", "toy-model", "--config"]
        assert main([*argv, str(project / "evalsentry.yaml"), *FACTORY]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "bare state dict" in err and "--lineage FILE" in err
        assert Registry(str(project / "registry")).list() == []

    @pytest.mark.parametrize(
        ("damage", "said"),
        [
            (lambda data: data[: len(data) // 2], "not a readable safetensors file"),
            (
                lambda data: data.replace(b'"lineage":"{', b'"lineage":"[', 1),
                "its metadata 'lineage' is not JSON",
            ),
        ],
        ids=["truncated", "lineage-not-json"],
    )
    def test_a_damaged_file_is_one_line_and_nothing_is_registered(
        self,
        project: Path,
        train_data: Path,
        capsys: pytest.CaptureFixture[str],
        damage: object,
        said: str,
    ) -> None:
        path = saved(_teacher(), project / "m.safetensors", train_data)  # type: ignore[arg-type]
        path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
        argv = ["register", str(path), "--model", "toy-model", "--config"]
        assert main([*argv, str(project / "evalsentry.yaml")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and str(path) in err
        assert Registry(str(project / "registry")).list() == []
