"""The GPU fast path against a raw PyTorch loop on a ResNet-sized model.

    python -m bench.gpu [--quick]

On a CUDA machine: examples/s of `run_inference` (evalset resident on the device, channels_last,
pinned memory) and of a raw loop (the same model, batches copied from pageable memory), fp32
and bf16, and peak GPU memory. On a CPU it runs a reduced version (fewer, smaller images).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.inference import release_resident, run_inference

BATCH = 256


class Block(nn.Module):
    """A ResNet basic block."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(classes: int = 10) -> nn.Module:
    """A ResNet-18 for 3x32x32 images (11M parameters)."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 3, 1, 1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def raw_loop(model: nn.Module, inputs: torch.Tensor, device: torch.device, bf16: bool) -> None:
    """The baseline: pageable host batches copied each time, logits to the CPU."""
    outputs = []
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for batch in inputs.split(BATCH):
            outputs.append(model(batch.to(device)).float())
        torch.cat(outputs).argmax(1).cpu()


def run(quick: bool = False) -> dict[str, float]:
    """Examples/s of the pipeline and the raw loop; GPU memory when on CUDA."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    rows = (20_000 if not quick else 4_096) if cuda else (512 if quick else 2_048)
    side = 32 if cuda or not quick else 16
    rng = np.random.default_rng(0)
    values = rng.random(rows * 3 * side * side, dtype=np.float32)
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(values), 3 * side * side),
            "y": rng.integers(0, 10, rows),
        }
    )
    model = resnet18().eval().to(device)
    results: dict[str, float] = {"gpu_bench_cuda": float(cuda), "gpu_bench_examples": rows}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        freeze_evalset(
            table,
            folder,
            name="images",
            task="classification",
            target="y",
            inputs=InputsSpec(column="x", shape=[3, side, side]),
            classes=list(range(10)),
        )
        evalset = load_evalset(folder)
        for precision in ("fp32", "bf16") if cuda else ("fp32",):
            bf16 = precision == "bf16"
            raw_loop(model, evalset.tensors()[0][:BATCH], device, bf16)  # warm-up
            run_inference(model, evalset, device=str(device), batch_size=BATCH, precision=precision)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            raw_loop(model, evalset.tensors()[0], device, bf16)
            raw = time.perf_counter() - start
            start = time.perf_counter()
            run_inference(model, evalset, device=str(device), batch_size=BATCH, precision=precision)
            ours = time.perf_counter() - start
            results[f"gpu_raw_{precision}_examples_per_s"] = rows / raw
            results[f"gpu_pipeline_{precision}_examples_per_s"] = rows / ours
            results[f"gpu_pipeline_over_raw_{precision}"] = ours / raw
        if cuda:
            results["gpu_peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        release_resident()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.quick), indent=2))
