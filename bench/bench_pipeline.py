"""run_inference() against a hand-written raw PyTorch loop on the same model and tensor.

    python -m bench.bench_pipeline [--seconds 20]

The example count is sized so the raw loop takes about ``--seconds``; both run alternately
and the best of each is compared, so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.inference import run_inference
from examples.digits.model import DigitsCNN

BATCH = 512


def raw_loop(model: torch.nn.Module, inputs: torch.Tensor) -> np.ndarray:
    """The baseline: batched logits under inference_mode, predictions back on the CPU."""
    outputs = []
    with torch.inference_mode():
        for batch in inputs.split(BATCH):
            outputs.append(model(batch))
    return torch.cat(outputs).argmax(1).numpy()


def run(seconds: float = 20.0, repeat: int = 2) -> dict[str, float]:
    """Time both on a synthetic digits-shaped evalset sized to ``seconds`` of raw inference."""
    torch.manual_seed(0)
    model = DigitsCNN(channels=64, hidden=256).eval()
    probe = torch.rand(16_384, 1, 8, 8) * 16
    raw_loop(model, probe[:BATCH])  # warm-up: the first batches pay for allocation and kernels
    start = time.perf_counter()
    raw_loop(model, probe)
    per_example = (time.perf_counter() - start) / len(probe)
    rows = max(4096, int(seconds / per_example))
    rng = np.random.default_rng(0)
    values = (rng.random(rows * 64, dtype=np.float32) * 16).astype(np.float32)
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(values), 64),
            "y": rng.integers(0, 10, rows),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "synthetic"
        freeze_evalset(
            table,
            folder,
            name="synthetic",
            task="classification",
            target="y",
            inputs=InputsSpec(column="x", shape=[1, 8, 8]),
            classes=list(range(10)),
        )
        evalset = load_evalset(folder)
        pipeline, raw = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            raw_loop(model, evalset.tensors()[0])
            raw.append(time.perf_counter() - start)
            start = time.perf_counter()
            run_inference(model, evalset, device="cpu", batch_size=BATCH)
            pipeline.append(time.perf_counter() - start)
    return {
        "pipeline_examples": rows,
        "raw_loop_s": min(raw),
        "pipeline_s": min(pipeline),
        "pipeline_over_raw": min(pipeline) / min(raw),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    for key, value in run(args.seconds).items():
        print(f"{key:28s} {value:12.3f}")
