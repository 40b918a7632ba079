"""`evalsentry evaluate` with a broken model: one line naming why, exit 2, the error recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsentry.history.store import History
from tests.models import TRUSTED_YAML, RaisingNet, SleepingNet, TupleNet
from tests.unit.cli.test_faults_cli import one_line_error
from tests.unit.evaluation.test_pipeline import save_model
from tests.validated import validated

REPO = Path(__file__).parents[3]


def evaluate_cli(checkpoint: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``evalsentry evaluate`` in a fresh process that can import the test models' module."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    args = ["evaluate", "--checkpoint", str(checkpoint), "--model", "toy-model", "--new-model"]
    return subprocess.run(
        [sys.executable, "-m", "evalsentry.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def project(tmp_path: Path, toy_evalset: Path) -> Path:
    """A project with the toy evalset, its own store, and a one-second inference timeout.

    Its evalset was validated by an earlier run (tests.validated): the model is the subject.
    """
    (tmp_path / "evalsentry.yaml").write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n{TRUSTED_YAML}"
        "inference_timeout_s: 1\n"
    )
    validated(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("model_class", "reason"),
    [
        (RaisingNet, "the model's forward raised RuntimeError: boom: this forward is broken"),
        (TupleNet, "model output breaks the contract: expected float logits of shape [300, 3]"),
        (SleepingNet, "timed out after 1 s running the model; its process was killed"),
    ],
    ids=["raises", "tuple", "hangs"],
)
def test_broken_candidate_exits_2_with_one_line_and_is_recorded(
    project: Path,
    train_data: Path,
    pinned_git: str,
    model_class: type,
    reason: str,
) -> None:
    """A raising, contract-breaking or hung model exits 2 with its reason, no traceback."""
    path = save_model(model_class, project / "candidate.pt", train_data)
    err = one_line_error(evaluate_cli(path, project))
    assert err.startswith("error: candidate.pt on toy: ") and reason in err
    rows = History(str(project / "store")).evaluations(include_superseded=True)
    assert rows["status"].tolist() == ["error"] and reason in rows["error"].iloc[0]
