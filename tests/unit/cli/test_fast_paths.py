"""The CI paths stay light and single: the gate loads no heavy module; one candidate wiring."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalsentry.history.store import History
from tests.synthetic import accuracy_mask, record_week

ROOT = Path(__file__).parents[3]
HEAVY = ("torch", "great_expectations", "prefect", "scipy", "sklearn", "s3fs")
#: What runs an evalset's suite: the gate reads evalsets (their manifests) but never validates one.
VALIDATION = "evalsentry.evalsets.validation"


def test_gate_command_loads_no_heavy_module(tmp_path: Path) -> None:
    """`evalsentry gate` on a recorded local history runs without torch, GX, Prefect or scipy,
    without Typer or Rich (it parses and prints on its own), and without the module that
    validates evalsets."""
    history = History(str(tmp_path / "store"))
    correct = accuracy_mask(200, 0.9)
    record_week(history, "2026-W40", correct)
    record_week(history, "2026-W41", correct)
    (tmp_path / "evalsentry.yaml").write_text(f"store: {tmp_path / 'store'}\n")
    code = (
        "import sys\n"
        "from evalsentry.cli import main\n"
        "code = main(['gate', '--model', 'm'])\n"
        "assert 'evalsentry.evalsets.evalset' in sys.modules  # it did read evalsets\n"
        f"loaded = sorted(m for m in {(*HEAVY, 'typer', 'rich', VALIDATION)!r} if m in sys.modules)\n"
        "print('LOADED', loaded, 'EXIT', code, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert "LOADED [] EXIT 0" in out.stderr


def _called_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_candidate_evaluation_is_wired_once() -> None:
    """`evalsentry evaluate` and the evaluate-candidate flow both run the library's
    `evaluate_candidate`; neither evaluates, records or gates a checkpoint itself."""
    cli = _called_names(ROOT / "src" / "evalsentry" / "cli" / "ci.py")
    flow = _called_names(ROOT / "flows" / "evaluate_candidate.py")
    assert "evaluate_candidate" in cli
    assert "evaluate_candidate_" in flow  # the library function, renamed beside the flow
    for own_wiring in ("evaluate_checkpoint", "record", "check_model_line", "evalsets_for"):
        assert own_wiring not in cli
        assert own_wiring not in flow


def test_dense_and_sparse_swaps_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense product the gate uses for small comparisons gives the sparse one's values."""
    from evalsentry.gate import resampling
    from evalsentry.gate.metrics import get_metric

    rng = np.random.default_rng(5)
    n, k = 400, 4
    target = rng.integers(0, k, n)

    def columns() -> dict[str, np.ndarray]:
        probs = rng.dirichlet(np.ones(k), n)
        return {
            "target": target,
            "prediction": probs.argmax(1),
            "confidence": probs.max(1),
            "loss": -np.log(probs[np.arange(n), target]),
        }

    ref, cur = columns(), columns()
    metrics = [get_metric(name) for name in ("accuracy", "nll", "ece", "macro_f1")]
    masks = (None, np.arange(n) % 2 == 0)

    def values() -> list[resampling.SwapValues]:
        return resampling.swap_values(
            metrics, ref, cur, num_classes=k, masks=masks, n_swaps=64, seed=1
        )

    dense = values()
    monkeypatch.setattr(resampling, "_DENSE_CELLS", 0)
    sparse = values()
    for a, b in zip(dense, sparse, strict=True):
        np.testing.assert_allclose(a.reference, b.reference, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a.current, b.current, rtol=1e-12, atol=1e-12)


#: The gate program, reporting at its exit (it ends with os._exit, past any atexit) what it saw.
_GATE_PROGRAM = """
import os, sys
from evalsentry import cli
from pydantic.plugin import _loader

def report(code):
    scanned = _loader._plugins is not None
    print("PLUGINS", os.environ.get(cli.PYDANTIC_PLUGINS), "SCANNED", scanned, "EXIT", code)
    sys.stdout.flush()
    exit_now(code)

exit_now, os._exit = os._exit, report
sys.argv = ["evalsentry", "gate", "--model", "m"]
cli.entry()
"""


@pytest.mark.parametrize(
    ("given", "seen"), [(None, "__all__ SCANNED False"), ("logfire", "logfire SCANNED True")]
)
def test_the_gate_program_looks_for_no_pydantic_plugin(
    tmp_path: Path, given: str | None, seen: str
) -> None:
    """`evalsentry gate` turns off pydantic's plugin lookup (a scan of every installed package's
    metadata) for its own configuration; a value the environment gives is kept, and used."""
    history = History(str(tmp_path / "store"))
    for week in ("2026-W40", "2026-W41"):
        record_week(history, week, accuracy_mask(200, 0.9))
    (tmp_path / "evalsentry.yaml").write_text(f"store: {tmp_path / 'store'}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env.update({} if given is None else {"PYDANTIC_DISABLE_PLUGINS": given})
    out = subprocess.run(
        [sys.executable, "-c", _GATE_PROGRAM], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert f"PLUGINS {seen} EXIT 0" in out.stdout, (out.stdout, out.stderr[-2000:])
