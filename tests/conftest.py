"""Shared fixtures: isolated environments and tiny real checkpoints."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

FAKE_SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def pinned_git(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pin the code commit through the environment, as a CI build would."""
    monkeypatch.setenv("EVALSENTRY_GIT_SHA", FAKE_SHA)
    monkeypatch.delenv("EVALSENTRY_GIT_DIRTY", raising=False)
    return FAKE_SHA


@pytest.fixture
def train_data(tmp_path: Path) -> Path:
    """A small training-data file to hash into lineage."""
    path = tmp_path / "train.csv"
    path.write_text("x,y\n1,0\n2,1\n")
    return path


@pytest.fixture
def tiny_checkpoint(tmp_path: Path, pinned_git: str, train_data: Path) -> Path:
    """A real checkpoint of a tiny model, saved through save_checkpoint."""
    import torch

    from evalsentry.checkpoint import save_checkpoint
    from tests.models import TinyNet

    torch.manual_seed(0)
    return save_checkpoint(
        TinyNet(),
        tmp_path / "ckpt" / "tiny.pt",
        metrics={"val_accuracy": 0.5},
        config={"lr": 0.1, "layers": [4, 8, 3]},
        seed=0,
        data=train_data,
        factory_kwargs={"features": 4, "classes": 3},
    )


@pytest.fixture
def chdir_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run the test in its own folder, so nothing lands in the working directory."""
    monkeypatch.chdir(tmp_path)
    yield tmp_path
