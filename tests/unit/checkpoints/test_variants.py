"""Serving variants: a version made cheaper by a transform evalsentry owns, saved, loaded, refused."""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict, namedtuple
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from evalsentry.checkpoints.variants import (
    TRANSFORMS,
    UnknownTransform,
    apply_transform,
    portable_state,
)
from evalsentry.errors import StateDictMismatch, UsageError
from tests.conftest import _teacher
from tests.models import TRUST

KWARGS = {"features": 4, "classes": 3, "hidden": 8}
#: How far each variant's logits may stray from the float model's, relative to their range.
STRAY = {"dynamic-int8": 0.05, "fp16": 0.005, "bf16": 0.05}


def inputs(rows: int = 64) -> torch.Tensor:
    return torch.randn(rows, 4, generator=torch.Generator().manual_seed(5))


def float_model() -> torch.nn.Module:
    model = _teacher()
    assert isinstance(model, torch.nn.Module)
    return model.eval()


def save(model: torch.nn.Module, path: Path, data: Path, transform: str | None = None) -> Path:
    return save_checkpoint(
        model,
        path,
        metrics={},
        config={"lr": 0.01},
        seed=7,
        data=data,
        factory="tests.models:TinyNet",
        factory_kwargs=KWARGS,
        transform=transform,
    )


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_a_variant_answers_as_the_float_model_within_its_precision(name: str) -> None:
    """Float32 in, float32 out; the logits differ (another model) but only by rounding."""
    model, x = float_model(), inputs()
    with torch.no_grad():
        expected = model(x)
        got = apply_transform(copy.deepcopy(model), name)(x)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    spread = float(expected.abs().max())
    assert 0 < float((got - expected).abs().max()) < STRAY[name] * spread


def test_int8_weights_are_kept_as_plain_int8_tensors_with_their_scales() -> None:
    """A quantized weight is a tensor subclass; the state evalsentry saves holds plain tensors."""
    state = portable_state(apply_transform(float_model(), "dynamic-int8"))
    assert state["body.0.weight:qdata"].dtype == torch.int8
    assert state["body.0.weight:qdata"].shape == (8, 4)
    assert state["body.0.weight:scale"].shape == (8, 1)
    assert state["body.0.bias"].dtype == torch.float32
    assert {type(t) for t in state.values()} == {torch.Tensor}


def test_an_unknown_transform_names_the_ones_there_are() -> None:
    with pytest.raises(UnknownTransform) as raised:
        apply_transform(float_model(), "int4")
    assert str(raised.value) == (
        "--transform: 'int4' is not a transform evalsentry applies; "
        "use one of dynamic-int8, fp16, bf16"
    )


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_a_saved_variant_loads_back_to_the_same_answers(
    tmp_path: Path, train_data: Path, pinned_git: str, name: str, suffix: str
) -> None:
    """The factory builds the float model, evalsentry transforms it, the file's weights fill it."""
    variant = apply_transform(float_model(), name)
    path = save(variant, tmp_path / f"variant{suffix}", train_data, transform=name)
    loaded = load_checkpoint(path, trust=TRUST)
    assert loaded.lineage["model"] == {
        "factory": "tests.models:TinyNet",
        "kwargs": KWARGS,
        "transform": name,
    }
    x = inputs()
    with torch.no_grad():
        assert torch.equal(loaded.model(x), variant(x))


def test_a_model_quantized_by_torch_ao_is_refused_with_the_way_to_make_a_variant(
    tmp_path: Path, train_data: Path, pinned_git: str
) -> None:
    """PyTorch's deprecated eager quantization keeps packed parameters, not tensors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            float_model(), {torch.nn.Linear}, dtype=torch.qint8
        )
    with pytest.raises(StateDictMismatch, match=r"register --variant-of MODEL@vN --transform"):
        save(quantized, tmp_path / "q.pt", train_data)


def test_float_weights_where_the_variant_holds_int8_are_refused(
    tmp_path: Path, train_data: Path, pinned_git: str
) -> None:
    path = save(
        apply_transform(float_model(), "dynamic-int8"),
        tmp_path / "v.pt",
        train_data,
        "dynamic-int8",
    )
    payload = torch.load(path, weights_only=True)
    payload["model_state_dict"]["body.2.weight:qdata"] = torch.zeros(3, 8)
    torch.save(payload, path)
    with pytest.raises(StateDictMismatch, match=r"'body.2.weight:qdata' is float32 \[3, 8\] where"):
        load_checkpoint(path, trust=TRUST)


def test_a_lineage_naming_an_unknown_transform_is_refused_before_anything_is_built(
    tmp_path: Path, train_data: Path, pinned_git: str
) -> None:
    path = save(apply_transform(float_model(), "bf16"), tmp_path / "v.pt", train_data, "bf16")
    payload = torch.load(path, weights_only=True)
    payload["lineage"]["model"]["transform"] = "os.system"
    torch.save(payload, path)
    with pytest.raises(UnknownTransform, match=r"lineage.model.transform: 'os.system' is not"):
        load_checkpoint(path, trust=TRUST)


class ConvOnly(torch.nn.Module):
    """A model with no nn.Linear: nothing for dynamic-int8 to quantize."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.unsqueeze(1)).mean(dim=2)


def test_dynamic_int8_of_a_model_without_linear_layers_is_refused_not_a_float_copy() -> None:
    with pytest.raises(UsageError, match=r"ConvOnly has no nn\.Linear to quantize"):
        apply_transform(ConvOnly(), "dynamic-int8")


Pair = namedtuple("Pair", "logits aux")


class TwoOutputs(torch.nn.Module):
    """TinyNet's logits in a namedtuple and a dict subclass, as structured outputs come."""

    def __init__(self) -> None:
        super().__init__()
        self.body = float_model()

    def forward(self, x: torch.Tensor) -> tuple[Pair, OrderedDict[str, torch.Tensor]]:
        logits = self.body(x)
        return Pair(logits, logits * 2), OrderedDict(logits=logits)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_half_precision_keeps_structured_outputs_and_casts_them_back(name: str) -> None:
    pair, mapping = apply_transform(TwoOutputs(), name)(inputs())
    assert isinstance(pair, Pair) and isinstance(mapping, OrderedDict)
    assert pair.logits.dtype == pair.aux.dtype == mapping["logits"].dtype == torch.float32
