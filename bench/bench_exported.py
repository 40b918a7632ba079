"""What a ``torch.export`` program (``.pt2``) would cost next to a state-dict checkpoint.

    python -m bench.bench_exported [--repeats 20]

The digits CNN is saved both ways in the same run: a ``torch.save`` state dict (what
``save_checkpoint`` writes) and ``torch.export.save`` with a dynamic batch dimension. Reported:
file sizes, export time, load time (``torch.load(weights_only=True)`` + factory + load_state_dict
against ``torch.export.load`` + ``.module()``), and CPU inference per batch, eager against the
exported module, at batch sizes other than the one exported with. Medians of ``--repeats`` runs.

This measures the format only; evalsentry does not accept ``.pt2`` files, because
``torch.export.load`` runs code from the archive (see bench/exported_findings.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from examples.digits.model import DigitsCNN

EXAMPLE_BATCH = 2
BATCHES = (1, 64, 512)


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _interleaved_median_ms(
    first: Callable[[], Any], second: Callable[[], Any], repeats: int
) -> tuple[float, float]:
    """Time two calls alternately, so a noisy neighbour slows both alike."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeats):
        for fn, times in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(a), 1000 * statistics.median(b)


def _load_state_dict_checkpoint(path: Path) -> torch.nn.Module:
    model = DigitsCNN()
    model.load_state_dict(torch.load(path, weights_only=True)["model_state_dict"], strict=True)
    return model.eval()


def _load_exported(path: Path) -> torch.nn.Module:
    return torch.export.load(path).module()


def run(repeats: int = 20) -> dict[str, float]:
    """Measure sizes, load and inference times; return them keyed by name."""
    torch.manual_seed(0)
    model = DigitsCNN().eval()
    example = (torch.rand(EXAMPLE_BATCH, 1, 8, 8) * 16,)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pt, pt2 = Path(tmp) / "digits.pt", Path(tmp) / "digits.pt2"
        torch.save({"model_state_dict": model.state_dict()}, pt)
        start = time.perf_counter()
        program = torch.export.export(
            model, example, dynamic_shapes=({0: torch.export.Dim("batch")},)
        )
        torch.export.save(program, pt2)
        results["exported_export_and_save_s"] = time.perf_counter() - start
        results["state_dict_file_bytes"] = pt.stat().st_size
        results["exported_file_bytes"] = pt2.stat().st_size

        results["state_dict_load_s"] = _median_s(lambda: _load_state_dict_checkpoint(pt), repeats)
        results["exported_load_s"] = _median_s(lambda: torch.export.load(pt2), repeats)
        results["exported_load_and_module_s"] = _median_s(lambda: _load_exported(pt2), repeats)

        eager = _load_state_dict_checkpoint(pt)
        exported = _load_exported(pt2)
        for batch in BATCHES:
            inputs = torch.rand(batch, 1, 8, 8) * 16
            with torch.inference_mode():
                exported(inputs)  # warm both alike before timing
                eager(inputs)
                same = torch.allclose(eager(inputs), exported(inputs), rtol=1e-5, atol=1e-6)
                if not same:
                    raise AssertionError(f"exported predictions differ at batch {batch}")
                eager_ms, exported_ms = _interleaved_median_ms(
                    partial(eager, inputs), partial(exported, inputs), repeats
                )
                results[f"eager_batch{batch}_ms"] = eager_ms
                results[f"exported_batch{batch}_ms"] = exported_ms
    return results


def main() -> None:
    """Print the measurements as a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    for name, value in run(args.repeats).items():
        print(f"{name:32s} {value:.4g}")


if __name__ == "__main__":
    main()
