"""Batched inference: per-example outputs, NaN detection, out-of-memory retries, devices."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from evalsentry.checkpoints.checkpoint import load_checkpoint
from evalsentry.errors import NonFiniteOutput, UsageError, exception_line
from evalsentry.evalsets.evalset import Evalset, InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.contract import ForwardRaised, OutputContractViolation
from evalsentry.evaluation.inference import run_inference
from tests.models import TRUST, RaisingNet


@pytest.fixture
def evalset(toy_evalset: Path) -> Evalset:
    """The toy evalset, loaded."""
    return load_evalset(toy_evalset)


@pytest.fixture
def good_model(toy_checkpoints: dict[str, Path]) -> nn.Module:
    """The model that labelled the toy evalset."""
    return load_checkpoint(toy_checkpoints["good"], trust=TRUST).model


class TestOutputs:
    def test_per_example_columns_match_a_hand_written_loop(
        self, evalset: Evalset, good_model: nn.Module
    ) -> None:
        """Predictions, NLL, confidence and target rank equal what plain torch computes."""
        result = run_inference(good_model, evalset, device="cpu", batch_size=64)
        inputs, targets = evalset.tensors()
        with torch.no_grad():
            logits = good_model(inputs)
        cols = result.columns
        assert cols["example_id"].tolist() == evalset.ids.tolist()
        assert np.array_equal(cols["prediction"], logits.argmax(1).numpy())
        expected_nll = nn.functional.cross_entropy(logits, targets, reduction="none").numpy()
        assert np.allclose(cols["loss"], expected_nll, atol=1e-5)
        assert np.allclose(cols["confidence"], logits.softmax(1).max(1).values.numpy(), atol=1e-6)
        assert (cols["target_rank"] == 0).all()  # the teacher is right on every example
        assert set(cols["slice:half"]) == {"even", "odd"}
        assert result.environment.device == "cpu" and result.inference_seconds > 0

    def test_batch_size_does_not_change_results(
        self, evalset: Evalset, good_model: nn.Module
    ) -> None:
        """One big batch and many small ones give the same outputs."""
        small = run_inference(good_model, evalset, device="cpu", batch_size=7).columns
        large = run_inference(good_model, evalset, device="cpu", batch_size=1024).columns
        assert np.array_equal(small["prediction"], large["prediction"])
        assert np.allclose(small["loss"], large["loss"], atol=1e-6)

    def test_progress_reports_every_batch_up_to_the_total(
        self, evalset: Evalset, good_model: nn.Module
    ) -> None:
        """The progress callback sees increasing counts ending at the evalset size."""
        seen: list[tuple[int, int]] = []
        run_inference(
            good_model,
            evalset,
            device="cpu",
            batch_size=100,
            progress=lambda d, t: seen.append((d, t)),
        )
        assert seen == [(100, 300), (200, 300), (300, 300)]

    def test_bf16_autocast_runs_and_agrees(self, evalset: Evalset, good_model: nn.Module) -> None:
        """bf16 precision runs on the CPU and mostly agrees with fp32."""
        fp32 = run_inference(good_model, evalset, device="cpu").columns["prediction"]
        bf16 = run_inference(good_model, evalset, device="cpu", precision="bf16")
        assert bf16.environment.precision == "bf16"
        assert (bf16.columns["prediction"] == fp32).mean() > 0.95


class NaNAfter(nn.Module):
    """Outputs NaN logits for examples whose first feature is above a threshold."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(x), 3)
        logits[x.flatten(1)[:, 0] > 1.5] = float("nan")
        return logits


class OOMAbove(nn.Module):
    """Raises CUDA out-of-memory for batches larger than ``limit``, as a full GPU would."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.inner = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(x) > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.inner(x.flatten(1))


class TestFailures:
    def test_nan_outputs_list_the_first_example_ids(self, evalset: Evalset) -> None:
        """NaN/inf outputs are an error naming the examples that produced them."""
        bad = evalset.inputs.reshape(len(evalset), -1)[:, 0] > 1.5
        with pytest.raises(NonFiniteOutput) as err:
            run_inference(NaNAfter(), evalset, device="cpu")
        assert err.value.count == int(bad.sum())
        assert err.value.example_ids == evalset.ids[bad][:10].tolist()

    def test_out_of_memory_halves_the_batch_and_completes(
        self, evalset: Evalset, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A CUDA OOM halves the batch size, logs it, and the evaluation still completes."""
        model = OOMAbove(limit=40)
        with caplog.at_level(logging.WARNING, logger="evalsentry.evaluation.inference"):
            result = run_inference(model, evalset, device="cpu", batch_size=256)
        assert result.batch_size == 32 and result.oom_retries == 3
        assert result.num_examples == 300
        assert "retrying with batch size 128" in caplog.text
        with torch.no_grad():
            expected = model.inner(evalset.tensors()[0].flatten(1)).argmax(1).numpy()
        assert np.array_equal(result.columns["prediction"], expected)

    @pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error path")
    def test_cuda_requested_without_cuda(self, evalset: Evalset, good_model: nn.Module) -> None:
        """Asking for CUDA where there is none is a clear usage error."""
        with pytest.raises(UsageError, match="CUDA is not available"):
            run_inference(good_model, evalset, device="cuda")

    def test_auto_device_is_cpu_without_cuda(self, evalset: Evalset, good_model: nn.Module) -> None:
        """device='auto' picks CUDA when present, else the CPU."""
        result = run_inference(good_model, evalset)
        assert result.environment.device == ("cuda" if torch.cuda.is_available() else "cpu")


class Returns(nn.Module):
    """A model whose output is ``make(batch)``: any type, dtype or shape."""

    def __init__(self, make: object) -> None:
        super().__init__()
        self.make = make

    def forward(self, x: torch.Tensor) -> object:
        return self.make(len(x))  # type: ignore[operator]


@pytest.fixture
def regression_evalset(tmp_path: Path) -> Evalset:
    """A frozen regression evalset of 5 rows over two feature columns."""
    import pyarrow as pa

    table = pa.table({"a": [1.0, 2.0, 3.0, 4.0, 5.0], "y": [0.5, 1.5, 2.5, 3.5, 4.5]})
    freeze_evalset(
        table,
        tmp_path / "reg",
        name="reg",
        task="regression",
        target="y",
        inputs=InputsSpec(columns=["a"]),
    )
    return load_evalset(tmp_path / "reg")


class TestOutputContract:
    @pytest.mark.parametrize(
        ("make", "got"),
        [
            (lambda n: torch.zeros(n, 7), "a float32 tensor of shape [300, 7]"),
            (torch.zeros, "a float32 tensor of shape [300]"),
            (lambda n: torch.zeros(n, 3, 1), "a float32 tensor of shape [300, 3, 1]"),
            (lambda n: torch.zeros(n, 3, dtype=torch.int64), "an int64 tensor of shape [300, 3]"),
            (
                lambda n: (torch.zeros(n, 3), torch.zeros(n)),
                "a tuple of 2 (a float32 tensor of shape [300, 3], a float32 tensor of shape [300])",
            ),
            (lambda n: {"logits": torch.zeros(n, 3)}, "a dict"),
        ],
        ids=["classes", "1-d", "3-d", "integer", "tuple", "dict"],
    )
    def test_classification_output_must_be_float_logits_per_class(
        self, evalset: Evalset, make: object, got: str
    ) -> None:
        """Anything but floating [N, C] logits is refused, naming what was expected and got."""
        with pytest.raises(OutputContractViolation) as err:
            run_inference(Returns(make), evalset, device="cpu")
        assert err.value.expected == (
            "float logits of shape [300, 3] (one column per class of 'toy', in order: 0, 1, 2)"
        )
        assert err.value.got == got
        assert "\n" not in str(err.value)

    def test_bf16_logits_fit_the_contract(self, evalset: Evalset) -> None:
        """Half-precision logits are floating: accepted."""
        result = run_inference(Returns(lambda n: torch.zeros(n, 3, dtype=torch.bfloat16)), evalset)
        assert result.num_examples == 300

    @pytest.mark.parametrize("shape", [(5,), (5, 1)])
    def test_regression_accepts_one_value_per_example(
        self, regression_evalset: Evalset, shape: tuple[int, ...]
    ) -> None:
        """Regression predictions may be [N] or [N, 1]."""
        result = run_inference(
            Returns(lambda n: torch.ones(shape)), regression_evalset, device="cpu"
        )
        assert result.columns["prediction"].tolist() == [1.0] * 5

    def test_regression_refuses_several_values_per_example(
        self, regression_evalset: Evalset
    ) -> None:
        """A [N, 2] regression output is refused."""
        with pytest.raises(
            OutputContractViolation,
            match=r"expected float predictions of shape \[5\] or \[5, 1\] \(one per example\), "
            r"got a float32 tensor of shape \[5, 2\]",
        ):
            run_inference(Returns(lambda n: torch.ones(n, 2)), regression_evalset, device="cpu")

    def test_a_raising_forward_is_named_with_its_batch(self, evalset: Evalset) -> None:
        """An exception from forward becomes ForwardRaised: type, message and first example."""
        with pytest.raises(ForwardRaised) as err:
            run_inference(RaisingNet(), evalset, device="cpu", batch_size=100)
        assert str(err.value) == (
            "the model's forward raised RuntimeError: boom: this forward is broken "
            "(batch starting at example 0)"
        )
        assert isinstance(err.value.error, RuntimeError)

    def test_exception_line_is_one_short_line(self) -> None:
        """A long multi-line message becomes one line, cut, after the exception's type."""
        line = exception_line(ValueError("first\n  second " + "x" * 1000))
        assert line.startswith("ValueError: first second x") and "\n" not in line
        assert len(line) < 320 and line.endswith("…")
        assert exception_line(KeyError()) == "KeyError"


_RESOLVE_AUTO = (
    "import sys\n"
    "from evalsentry.evaluation import inference\n"
    "inference.GPU_DRIVER_PATHS = tuple(sys.argv[1:])\n"
    "print(inference.resolve_device('auto'), 'torch' in sys.modules)\n"
)


def _resolve_auto_in_fresh_process(*driver_paths: str) -> list[str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _RESOLVE_AUTO, *driver_paths],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_auto_device_on_a_machine_without_gpu_driver_does_not_import_torch(tmp_path: Path) -> None:
    # The flow engine resolves ``auto`` only to tag GPU work; torch would cost it ~200 MiB.
    assert _resolve_auto_in_fresh_process(str(tmp_path / "no-driver")) == ["cpu", "False"]


def test_auto_device_asks_torch_where_a_gpu_driver_shows(tmp_path: Path) -> None:
    device, imported = _resolve_auto_in_fresh_process(str(tmp_path))  # an existing path
    assert imported == "True"
    assert device == ("cuda" if torch.cuda.is_available() else "cpu")
