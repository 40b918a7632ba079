"""Real logs of lm-evaluation-harness and Inspect, written once per test session, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.built_once import built_once

ROOT = Path(__file__).parents[3]
#: Model versions run on each harness's task: NAME=SKILL (the share of sums it gets right).
VERSIONS = ["good=1.0", "same=1.0", "worse=0.5"]
#: The lm-eval task again, with another prompt template.
PROMPT_CHANGED = "prompt=1.0:Q: {{question}} A:"
#: The group of two tasks (the sums, and the sums asked in words), run by two model versions.
GROUPS = ["group-good=1.0@evalsentry_math", "group-worse=0.5@evalsentry_math"]
#: The Inspect task again, each epoch answered afresh and reduced by at_least_1.
REDUCED = "reduced=0.5:at_least_1"


def _run_harnesses(out: Path) -> None:
    """Both harnesses in their own process, side by side, Hugging Face's libraries offline."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.harness_runs", harness, str(out / folder), *versions],
            cwd=out,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for harness, folder, versions in (
            ("lm-eval", "lm", [*VERSIONS, PROMPT_CHANGED, *GROUPS]),
            ("inspect", "inspect", [*VERSIONS, REDUCED]),
        )
    ]
    for run in runs:
        output, _ = run.communicate(timeout=600)
        assert run.returncode == 0, output[-3000:]


@pytest.fixture(scope="session")
def harness_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``lm/<version>/`` (lm_eval --log_samples folders) and ``inspect/<version>/*.eval``.

    Real runs of both harnesses, made once per test run (every worker reads the same logs),
    outside the checkout.
    """
    return built_once(tmp_path_factory, "harness-logs", _run_harnesses)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose history is its own; the --config argument's file."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n")
    return tmp_path / "evalsentry.yaml"
