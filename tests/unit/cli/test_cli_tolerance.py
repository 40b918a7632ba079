"""`evalsentry tolerance suggest`: a line's seed reruns measured, tolerances proposed from them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.history.store import History
from tests.conftest import _teacher
from tests.models import TRUST, TRUSTED_YAML

KWARGS = {"features": 4, "classes": 3, "hidden": 8}


def retrain(path: Path, train_data: Path, seed: int, lr: float = 0.01) -> Path:
    """The teacher with its weights moved by a seed's noise: what another seed trains."""
    model = _teacher()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():  # type: ignore[attr-defined]
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return save_checkpoint(
        model,  # type: ignore[arg-type]
        path,
        metrics={},
        config={"lr": lr},
        seed=seed,
        data=train_data,
        factory="tests.models:TinyNet",
        factory_kwargs=KWARGS,
        training=training_cost(seed),  # each run's own cost: not part of the recipe
    )


def training_cost(seed: int) -> dict[str, object]:
    """What a training run of ``seed`` cost, as track_training records it."""
    return {
        "started_at": "2026-11-30T06:00:00+00:00",
        "ended_at": f"2026-11-30T06:{seed:02d}:00+00:00",
        "wall_s": 60.0 * seed,
        "device": "cpu",
        "device_hours": seed / 60,
        "energy_kwh": 0.001 * seed,
        "energy_method": "codecarbon 3.3.2",
        "co2_kg": 0.0004 * seed,
        "cost": 0.01 * seed,
        "currency": "USD",
    }


@pytest.fixture
def project(tmp_path: Path, toy_evalset: Path, train_data: Path, pinned_git: str) -> Path:
    """Three seed reruns of one recipe and a version of another, each evaluated on toy."""
    config = tmp_path / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
    )
    settings = load_config(config)
    registry = Registry(settings.registry_url)
    evalset = load_evalset(toy_evalset)
    for index, (seed, lr) in enumerate([(1, 0.01), (2, 0.01), (3, 0.01), (4, 0.1)]):
        path = retrain(tmp_path / f"v{index + 1}.pt", train_data, seed, lr)
        entry = registry.register(path, "toy", trust=TRUST)
        outcome = evaluate_checkpoint(
            Target.from_entry(entry), evalset, config=settings, run_id=f"r{index}", week="2026-W40"
        )
        record(History(settings.store_url), [outcome])
    return config


def test_the_seed_spread_suggests_each_tolerance(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """v1-v3 (lr 0.01, seeds 1-3) are the reruns, v4 (lr 0.1) another recipe; each metric's
    suggestion is t(0.95, 2) sqrt(2) times the sample sd of the three, from the history."""
    assert main(["tolerance", "suggest", "--model", "toy", "--config", str(project)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "evalsentry tolerance suggest toy: 3 seed reruns (v1 seed 1, v2 seed 2, v3 seed 3); "
        "an honest retrain stays within each suggestion with probability 0.95"
    )
    history = History(str(project.parent / "store"))
    rows = history.evaluations(model="toy", include_superseded=True)  # one week, four runs
    ids = rows[rows["version"] <= 3]["evaluation_id"].tolist()
    metrics = history.metrics(ids)
    accuracy = metrics[(metrics["metric"] == "accuracy") & (metrics["slice"] == "")]["value"]
    assert len(accuracy) == 3 and accuracy.nunique() > 1  # the seeds do move it
    spread = float(np.std(accuracy.to_numpy(), ddof=1))
    suggested = float(stats.t.ppf(0.95, 2)) * math.sqrt(2) * spread
    line = next(line for line in out.splitlines() if re.match(r"toy\s+accuracy\s", line))
    cells = line.split()
    assert cells[2] == "3" and cells[3] == f"{spread:.4g}" and cells[4] == f"{suggested:.4g}"
    block = out[out.index("gate:\n") :]
    assert block.startswith("gate:\n  evalsets:\n    toy:\n      accuracy: {max_drop: ")
    # Pasted as printed, it is the project's gate: each metric's tolerance on toy.
    project.write_text(project.read_text() + block)
    policy = load_config(project).gate
    accuracy_setting = re.search(r"accuracy: \{max_drop: ([0-9.e-]+)\}", block)
    assert accuracy_setting is not None
    assert float(policy.tolerance("accuracy", "toy").max_drop) == float(accuracy_setting[1])
    assert float(accuracy_setting[1]) >= suggested  # rounded up, never down


def test_a_line_without_seed_reruns_says_what_to_register(
    project: Path, tmp_path: Path, train_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One version per recipe: exit 2, one line saying what a seed rerun is."""
    registry = Registry(str(project.parent / "registry"))
    registry.register(retrain(tmp_path / "other.pt", train_data, 9, lr=0.5), "other", trust=TRUST)
    assert main(["tolerance", "suggest", "--model", "other", "--config", str(project)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no two of its 1 version(s) differ only in the seed; register seed reruns" in err
