"""Running a model over an evalset: batched, under ``torch.inference_mode``, on CUDA when there.

The result is one row per example (the columns ``metrics`` and ``stats`` consume), so every
metric, slice and paired comparison is computed from the same stored predictions.

The model contract. Input: one tensor per batch as ``evalsets`` states it (``InputsSpec.contract``:
``float32 [N, F]`` feature columns in the manifest's order, or a list column reshaped to
``[N, *shape]``). Output, checked on every batch before any metric sees it (a few attribute
reads; the message is built only on a violation): classification returns floating logits
``[N, C]``, ``C = len(classes)``, column ``i`` scoring ``classes[i]`` in the manifest's order;
regression returns floating predictions ``[N]`` or ``[N, 1]``. Anything else is an
``OutputContractViolation`` naming what was expected and what came; NaN or inf in an output is
``NonFiniteOutput`` naming the examples (the checks are ``evalsentry.evaluation.contract``'s).

A model built for other inputs (a 13-feature network on a 30-column evalset) usually raises in
its first forward with torch's ``size of tensor a (30) must match ...``. When the first batch
raises, the forward is run once more with hooks on the shape-bearing layers (``Linear``,
``Conv``, ``Embedding``) to find the one that refused its input, and the failure becomes an
``InputMismatch`` naming that layer's expectation, what it got, and what the evalset gives.
Nothing of this runs on a forward that succeeds.

On CUDA the evalset is moved to the device once and kept there for every later checkpoint when it
fits (else batches are copied from pinned host memory without blocking), and convolutional models
run in ``channels_last``; a CUDA out-of-memory error halves the batch and retries (logged).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from evalsentry.errors import NonFiniteOutput, UsageError
from evalsentry.evalsets.inputs import shared_tensor
from evalsentry.evaluation.contract import (
    ForwardRaised,
    check_output,
    diagnose,
)
from evalsentry.evaluation.memory import halved
from evalsentry.gate.slices import slice_column
from evalsentry.names import PROBABILITIES

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets.evalset import Evalset, EvalsetSpec


DEFAULT_BATCH_SIZE = 512
NON_FINITE_IDS_SHOWN = 10
Precision = Literal["fp32", "bf16"]
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class Environment:
    """Where an evaluation ran: what can change predictions for the same weights and data."""

    device: str
    device_name: str
    torch_version: str
    python_version: str
    cuda_version: str | None
    driver_version: str | None
    precision: str


@dataclass(frozen=True)
class InferenceResult:
    """Per-example outputs of one model on one evalset, with how long inference took.

    For classification ``columns`` holds ``prediction``, ``loss`` (NLL of the target),
    ``confidence`` (max probability) and ``target_rank``; for regression ``prediction`` and
    ``loss`` (squared error).
    """

    columns: dict[str, np.ndarray]
    environment: Environment
    inference_seconds: float
    batch_size: int
    oom_retries: int = 0
    notes: list[str] = field(default_factory=list)
    #: Token evalsets: the real tokens read and the tokens given, padding included.
    tokens: int | None = None
    padded_tokens: int | None = None

    @property
    def num_examples(self) -> int:
        """Number of examples evaluated."""
        return len(self.columns["example_id"])


#: Each example's probability of every class, kept in the history for up to this many classes
#: (label-error suspects are found from them: ``evalsentry.gate.suspects``).
STORED_PROBABILITY_CLASSES = 100

#: Where a GPU driver that torch could use shows itself on Linux: NVIDIA's, or ROCm's (whose
#: devices torch also names ``cuda``).
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")


def no_gpu_driver() -> bool:
    """True on a Linux machine without a GPU driver: ``auto`` is CPU there without asking torch.

    Importing torch only to ask costs a process about 200 MiB: the flow engine, which never runs
    a model (its evaluation child does), asks this way.
    """
    return sys.platform.startswith("linux") and not any(map(os.path.exists, GPU_DRIVER_PATHS))


def resolve_device(device: str) -> str:
    """``auto`` means CUDA when available, else CPU; anything else is checked and kept."""
    if device == "auto" and "torch" not in sys.modules and no_gpu_driver():
        return "cpu"
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"device {device!r} requested but CUDA is not available here; use auto or cpu"
        )
    return device


def describe_environment(device: str, precision: str) -> Environment:
    """Describe the software and hardware an evaluation runs on."""
    import torch

    name, cuda, driver = platform.processor() or platform.machine(), None, None
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        cuda = torch.version.cuda
        driver = _nvidia_driver()
    return Environment(
        device=device.split(":", maxsplit=1)[0],
        device_name=name,
        torch_version=str(torch.__version__),
        python_version=platform.python_version(),
        cuda_version=cuda,
        driver_version=driver,
        precision=precision,
    )


def _nvidia_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - NVML is optional; the driver is reported when it answers
        return None


def run_inference(
    model: torch.nn.Module,
    evalset: Evalset,
    *,
    device: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
    precision: Precision = "fp32",
    progress: ProgressFn | None = None,
    channels_last: bool | None = None,
    compile_model: bool = False,
) -> InferenceResult:
    """Run ``model`` over every example of ``evalset`` (on CUDA as the module docstring says).

    Args:
        model: the model, in eval mode.
        evalset: a loaded, verified evalset.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        batch_size: examples per forward pass (halved on out-of-memory).
        precision: ``fp32`` or ``bf16`` (autocast).
        progress: called with (examples done, total) after each batch.
        channels_last: channels-last layout (default: on CUDA, for 4-D inputs and 2-D convs).
        compile_model: ``torch.compile`` the model first (pays off on long evaluations).

    Raises:
        ForwardRaised: the model's forward raised (a CUDA out-of-memory error is retried).
        OutputContractViolation: an output of the wrong type, dtype or shape.
        NonFiniteOutput: the model produced NaN/inf, listing the first example ids.
    """
    import torch

    if precision not in ("fp32", "bf16"):
        raise UsageError(f"precision {precision!r}: use fp32 or bf16")
    device = resolve_device(device)
    target_device = torch.device(device)
    model = model.to(target_device).eval()
    if evalset.spec.inputs.is_tokens:  # keyword inputs, length-sorted batches
        options = (batch_size, precision, progress, compile_model)
        return _run_tokens(model, evalset, target_device, *options)
    inputs, targets = staged(evalset, target_device)
    model, forward, channels_last = _prepared(
        model, inputs, target_device, channels_last, compile_model
    )
    raw, seconds, batch_size, retries = _forward_all(
        model,
        forward,
        inputs,
        evalset.spec,
        target_device,
        batch_size=batch_size,
        precision=precision,
        channels_last=channels_last,
        progress=progress,
    )
    return InferenceResult(
        columns=_per_example(raw, targets.to(raw.device), evalset),
        environment=describe_environment(device, precision),
        inference_seconds=seconds,
        batch_size=batch_size,
        oom_retries=retries,
    )


def _run_tokens(
    model: torch.nn.Module,
    evalset: Evalset,
    device: torch.device,
    batch_size: int,
    precision: Precision,
    progress: ProgressFn | None,
    compile_model: bool,
) -> InferenceResult:
    """``run_inference`` over token sequences (``evalsentry.evaluation.sequences``)."""
    import torch

    from evalsentry.evaluation.sequences import forward_tokens

    forward = torch.compile(model) if compile_model else model
    run = forward_tokens(
        model,
        forward,
        evalset,
        device,
        batch_size=batch_size,
        precision=precision,
        progress=progress,
    )
    targets = shared_tensor(evalset.targets)
    return InferenceResult(
        columns=_per_example(run.raw, targets.to(run.raw.device), evalset),
        environment=describe_environment(str(device), precision),
        inference_seconds=run.seconds,
        batch_size=run.batch_size,
        oom_retries=run.retries,
        tokens=run.tokens,
        padded_tokens=run.padded,
    )


def _prepared(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    device: torch.device,
    channels_last: bool | None,
    compile_model: bool,
) -> tuple[torch.nn.Module, Callable[[torch.Tensor], Any], bool]:
    """The model in its layout, the forward to run (compiled or not), whether channels-last.

    By default channels-last on CUDA for 4-D inputs and models with 2-D convolutions.
    """
    import torch

    if channels_last is None:
        channels_last = (
            device.type == "cuda"
            and inputs.dim() == 4
            and any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
        )
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch accepts it; its stubs omit it
    # A failing first batch is diagnosed on ``model`` itself: hooks, no compiled graph.
    forward = torch.compile(model) if compile_model else model
    return model, forward, channels_last


def _forward_all(
    model: torch.nn.Module,
    forward: Callable[[torch.Tensor], Any],
    inputs: torch.Tensor,
    spec: EvalsetSpec,
    device: torch.device,
    *,
    batch_size: int,
    precision: Precision,
    channels_last: bool,
    progress: ProgressFn | None,
) -> tuple[torch.Tensor, float, int, int]:
    """Every example's output, the seconds it took, the batch size reached, and the retries.

    Batch by batch; a CUDA out-of-memory error halves the batch and retries it; any other
    error in the first batch is diagnosed on ``model`` (see :func:`diagnose`).
    """
    import torch

    on_cuda = device.type == "cuda"
    total = len(inputs)
    outputs: list[torch.Tensor] = []
    retries, start, done = 0, time.perf_counter(), 0
    with torch.inference_mode():
        while done < total:
            # A copy of its own for every forward: a model that edits its input in place
            # (x.div_(16)) changes nothing another checkpoint will see.
            batch = inputs[done : done + batch_size].to(device, non_blocking=on_cuda, copy=True)
            if channels_last:
                batch = batch.contiguous(memory_format=torch.channels_last)
            try:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    out = forward(batch)
            except torch.OutOfMemoryError:
                if batch_size == 1:
                    raise
                batch_size = halved(batch_size, done, on_cuda)
                retries += 1
                continue
            except Exception as exc:  # whatever a model raises is its own failure, named
                mismatch = diagnose(model, batch, spec) if done == 0 else None
                raise (mismatch or ForwardRaised(exc, done)) from exc
            check_output(out, len(batch), spec)
            outputs.append(out.float())
            done += len(batch)
            if progress is not None:
                progress(done, total)
        raw = torch.cat(outputs) if outputs else torch.empty(0)
        if on_cuda:
            torch.cuda.synchronize()
    return raw, time.perf_counter() - start, batch_size, retries


#: Share of free GPU memory an evalset may take to stay resident on the device.
RESIDENT_FRACTION = 0.25
_RESIDENT: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}


def staged(evalset: Evalset, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The evalset's tensors where inference reads them from.

    On CUDA: resident on the device (moved once, reused by every checkpoint of the process)
    when they fit in ``RESIDENT_FRACTION`` of free memory, else in pinned host memory.
    """
    import torch

    inputs, targets = evalset.tensors()
    if device.type != "cuda":
        return inputs, targets
    key = (evalset.sha256, str(device))
    if key in _RESIDENT:
        return _RESIDENT[key]
    free, _ = torch.cuda.mem_get_info(device)
    if evalset.inputs.nbytes > free * RESIDENT_FRACTION:
        return inputs.pin_memory(), targets.pin_memory()
    staged = (inputs.pin_memory().to(device, non_blocking=True), targets.to(device))
    _RESIDENT[key] = staged
    return staged


def release_resident() -> None:
    """Free the evalsets kept on the GPU."""
    _RESIDENT.clear()


def _per_example(
    raw: torch.Tensor, targets: torch.Tensor, evalset: Evalset
) -> dict[str, np.ndarray]:
    """One row per example of what the task compares, plus the slice columns."""
    from evalsentry.evaluation import task_outputs

    builders = {
        "multilabel": task_outputs.multilabel_columns,
        "language_modeling": task_outputs.language_model_columns,
        "multiple_choice": task_outputs.choice_columns,
    }
    build = builders.get(evalset.spec.task)
    columns = build(raw, evalset) if build else _fixed_task_columns(raw, targets, evalset)
    for name, values in evalset.slices.items():
        columns[slice_column(name)] = values
    return columns


def _fixed_task_columns(
    raw: torch.Tensor, targets: torch.Tensor, evalset: Evalset
) -> dict[str, np.ndarray]:
    import torch

    finite = torch.isfinite(raw.reshape(len(raw), -1)).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten().cpu().numpy()
        raise NonFiniteOutput(evalset.ids[bad[:NON_FINITE_IDS_SHOWN]].tolist(), len(bad))
    columns: dict[str, np.ndarray] = {"example_id": evalset.ids}
    if evalset.spec.task == "classification":
        if evalset.spec.outputs == "probabilities":  # declared at freeze: log p are the logits
            raw = torch.log(raw.clamp_min(torch.finfo(raw.dtype).tiny))
        log_probs = torch.log_softmax(raw, dim=1)
        target_logp = log_probs.gather(1, targets[:, None]).squeeze(1)
        columns |= {
            "target": targets.cpu().numpy(),
            "prediction": raw.argmax(dim=1).cpu().numpy(),
            "loss": (-target_logp).double().cpu().numpy(),
            "confidence": log_probs.max(dim=1).values.exp().double().cpu().numpy(),
            # Rank of the target among the classes: 0 when it is the top prediction.
            "target_rank": (raw > raw.gather(1, targets[:, None])).sum(dim=1).cpu().numpy(),
        }
        if raw.shape[1] <= STORED_PROBABILITY_CLASSES:  # what label-error suspects are found from
            columns[PROBABILITIES] = log_probs.exp().float().cpu().numpy()
    else:
        prediction = raw.reshape(len(raw), -1)[:, 0]
        columns |= {
            "target": targets.double().cpu().numpy(),
            "prediction": prediction.double().cpu().numpy(),
            "loss": ((prediction - targets) ** 2).double().cpu().numpy(),
        }
    return columns


def predict_classes(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    *,
    device: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> np.ndarray:
    """Predicted class of each row of ``inputs`` (unlabelled data, e.g. a live sample)."""
    import torch

    target = torch.device(resolve_device(device))
    model = model.to(target).eval()
    with torch.inference_mode():
        outputs = [
            model(inputs[i : i + batch_size].to(target, copy=True)).argmax(dim=1).cpu()
            for i in range(0, len(inputs), batch_size)
        ]
    return torch.cat(outputs).numpy() if outputs else np.empty(0, np.int64)
