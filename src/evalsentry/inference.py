"""Running a model over an evalset: batched, under ``torch.inference_mode``, on CUDA when there.

The result is one row per example (the columns ``metrics`` and ``stats`` consume), so every
metric, slice and paired comparison is computed from the same stored predictions.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from evalsentry.errors import NonFiniteOutput, UsageError

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets import Evalset

log = logging.getLogger(__name__)

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
    """Per-example outputs of one model on one evalset, with how long inference took."""

    columns: dict[str, np.ndarray]
    environment: Environment
    inference_seconds: float
    batch_size: int
    oom_retries: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def num_examples(self) -> int:
        """Number of examples evaluated."""
        return len(self.columns["example_id"])


def resolve_device(device: str) -> str:
    """``auto`` means CUDA when available, else CPU; anything else is checked and kept."""
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


def evaluate(
    model: torch.nn.Module,
    evalset: Evalset,
    *,
    device: str = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
    precision: Precision = "fp32",
    progress: ProgressFn | None = None,
) -> InferenceResult:
    """Run ``model`` over every example of ``evalset``.

    On CUDA, inputs are copied from pinned host memory without blocking; a CUDA out-of-memory
    error halves the batch and retries (logged). Classification yields ``prediction``,
    ``loss`` (NLL of the target), ``confidence`` (max probability) and ``target_rank``;
    regression yields ``prediction`` and ``loss`` (squared error).

    Args:
        model: the model, in eval mode.
        evalset: a loaded, verified evalset.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        batch_size: examples per forward pass (halved on out-of-memory).
        precision: ``fp32`` or ``bf16`` (autocast).
        progress: called with (examples done, total) after each batch.

    Raises:
        NonFiniteOutput: the model produced NaN/inf, listing the first example ids.
    """
    import torch

    if precision not in ("fp32", "bf16"):
        raise UsageError(f"precision {precision!r}: use fp32 or bf16")
    device = resolve_device(device)
    target_device = torch.device(device)
    on_cuda = target_device.type == "cuda"
    model = model.to(target_device).eval()
    inputs, targets = evalset.inputs, evalset.targets
    if on_cuda:
        inputs, targets = inputs.pin_memory(), targets.pin_memory()
    total = len(inputs)
    outputs: list[torch.Tensor] = []
    retries, start, done = 0, time.perf_counter(), 0
    with torch.inference_mode():
        while done < total:
            batch = inputs[done : done + batch_size].to(target_device, non_blocking=on_cuda)
            try:
                with torch.autocast(
                    target_device.type, dtype=torch.bfloat16, enabled=precision == "bf16"
                ):
                    out = model(batch)
            except torch.OutOfMemoryError:
                if batch_size == 1:
                    raise
                batch_size = max(1, batch_size // 2)
                retries += 1
                log.warning(
                    "CUDA out of memory at example %d; retrying with batch size %d",
                    done,
                    batch_size,
                )
                if on_cuda:
                    torch.cuda.empty_cache()
                continue
            outputs.append(out.float())
            done += len(batch)
            if progress is not None:
                progress(done, total)
        raw = torch.cat(outputs) if outputs else torch.empty(0)
        if on_cuda:
            torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    columns = _per_example(raw, targets.to(raw.device), evalset)
    return InferenceResult(
        columns=columns,
        environment=describe_environment(device, precision),
        inference_seconds=seconds,
        batch_size=batch_size,
        oom_retries=retries,
    )


def _per_example(
    raw: torch.Tensor, targets: torch.Tensor, evalset: Evalset
) -> dict[str, np.ndarray]:
    import torch

    finite = torch.isfinite(raw.reshape(len(raw), -1)).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten().cpu().numpy()
        raise NonFiniteOutput(evalset.ids[bad[:NON_FINITE_IDS_SHOWN]].tolist(), len(bad))
    columns: dict[str, np.ndarray] = {"example_id": evalset.ids}
    if evalset.spec.task == "classification":
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
    else:
        prediction = raw.reshape(len(raw), -1)[:, 0]
        columns |= {
            "target": targets.double().cpu().numpy(),
            "prediction": prediction.double().cpu().numpy(),
            "loss": ((prediction - targets) ** 2).double().cpu().numpy(),
        }
    for name, values in evalset.slices.items():
        columns[f"slice:{name}"] = values
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
            model(inputs[i : i + batch_size].to(target)).argmax(dim=1).cpu()
            for i in range(0, len(inputs), batch_size)
        ]
    return torch.cat(outputs).numpy() if outputs else np.empty(0, np.int64)
