"""One evaluation end to end: rows, metrics per slice, cost, and failures as error rows."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from evalsentry.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from evalsentry.config import Config
from evalsentry.cost.meter import CostMeter, Measurement, cost_fields
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.inference import run_inference
from evalsentry.evaluation.isolation import idle_pids, prestart, shutdown
from evalsentry.evaluation.pipeline import Outcome, Target, evaluate_checkpoint, new_run_id, record
from evalsentry.history.store import History
from evalsentry.storage import sha256_file
from tests.models import (
    TRUST,
    TRUSTED_FACTORIES,
    CrashingNet,
    FlatNet,
    RaisingNet,
    SleepingNet,
    StuckInC,
    TinyNet,
    TupleNet,
)
from tests.unit.evaluation.test_inference import OOMAbove

#: Broken toy models by name: class, its kwargs beside the toy's (4 features, 8 hidden), and the
#: one-line reason each must be recorded with (the toy evalset has 300 rows and 3 classes).
BROKEN: dict[str, tuple[type[nn.Module], dict[str, int], str]] = {
    "raises": (
        RaisingNet,
        {},
        "the model's forward raised RuntimeError: boom: this forward is broken "
        "(batch starting at example 0)",
    ),
    "seven-classes": (
        TinyNet,
        {"classes": 7},
        "model output breaks the contract: expected float logits of shape [300, 3] "
        "(one column per class of 'toy', in order: 0, 1, 2), got a float32 tensor of shape [300, 7]",
    ),
    "one-d": (
        FlatNet,
        {},
        "model output breaks the contract: expected float logits of shape [300, 3] "
        "(one column per class of 'toy', in order: 0, 1, 2), got a float32 tensor of shape [300]",
    ),
    "tuple": (
        TupleNet,
        {},
        "model output breaks the contract: expected float logits of shape [300, 3] "
        "(one column per class of 'toy', in order: 0, 1, 2), got a tuple of 2 (a float32 tensor of shape [300, 3], "
        "a float32 tensor of shape [300, 4])",
    ),
}


def save_model(model_class: type[nn.Module], path: Path, train_data: Path, **kwargs: int) -> Path:
    """A checkpoint of a toy-shaped ``model_class`` (its class is the factory)."""
    factory_kwargs = {"features": 4, "classes": 3, "hidden": 8, **kwargs}
    torch.manual_seed(0)
    return save_checkpoint(
        model_class(**factory_kwargs),
        path,
        metrics={},
        config={"model": model_class.__name__},
        seed=0,
        data=train_data,
        factory_kwargs=factory_kwargs,
    )


def target(path: Path, sha: str | None = None) -> Target:
    """A production target for a checkpoint file."""
    return Target(
        "toy-model", str(path), 1, "production", sha if sha is not None else sha256_file(path)[0]
    )


class TestEvaluateCheckpoint:
    def test_ok_row_carries_lineage_environment_cost_and_metrics(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """A good checkpoint yields an ok row, metrics overall and per slice, and predictions."""
        outcome = evaluate_checkpoint(
            target(toy_checkpoints["good"]),
            load_evalset(toy_evalset),
            config=Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES)),
            run_id=new_run_id(),
            week="2026-W40",
        )
        row = outcome.evaluation
        assert outcome.ok and row["status"] == "ok"
        assert row["git_sha"] and row["data_sha"] and row["seed"] == 7
        assert row["device"] == "cpu" and row["torch_version"]
        assert row["examples_per_s"] > 0 and row["energy_kwh"] > 0 and row["cost"] >= 0
        assert row["energy_method"].startswith("estimate")
        by_key = {(m["metric"], m["slice"]): m for m in outcome.metrics}
        assert by_key[("accuracy", "")]["value"] == 1.0
        assert {s for _, s in by_key} == {"", "half=even", "half=odd"}
        assert by_key[("accuracy", "half=even")]["n"] == 150
        assert outcome.predictions is not None and len(outcome.predictions["prediction"]) == 300

    def test_corrupt_checkpoint_becomes_an_error_row(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """A truncated checkpoint fails itself: an error row with the reason, no exception."""
        path = toy_checkpoints["good"]
        path.write_bytes(path.read_bytes()[:100])
        outcome = evaluate_checkpoint(
            target(path),
            load_evalset(toy_evalset),
            config=Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES)),
            run_id="r",
            week="2026-W40",
        )
        assert not outcome.ok and outcome.metrics == [] and outcome.predictions is None
        assert "corrupt or truncated" in outcome.evaluation["error"]

    def test_replaced_checkpoint_is_refused(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """A file that differs from its registered hash is an error row, not evaluated."""
        outcome = evaluate_checkpoint(
            target(toy_checkpoints["good"], sha="0" * 64),
            load_evalset(toy_evalset),
            config=Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES)),
            run_id="r",
            week="2026-W40",
        )
        assert "changed since registration" in outcome.evaluation["error"]

    def test_record_writes_every_outcome(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """Recorded outcomes, good and failed, are all in the history."""
        evalset, config, run = (
            load_evalset(toy_evalset),
            Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES)),
            new_run_id(),
        )
        good = evaluate_checkpoint(
            target(toy_checkpoints["good"]), evalset, config=config, run_id=run, week="2026-W40"
        )
        bad = evaluate_checkpoint(
            target(tmp_path / "missing.pt", sha=""),
            evalset,
            config=config,
            run_id=run,
            week="2026-W40",
        )
        history = History(str(tmp_path / "store"))
        record(history, [good, bad])
        frame = history.evaluations(include_superseded=True)
        assert sorted(frame["status"]) == ["error", "ok"]
        assert history.predictions(good.evaluation["evaluation_id"]) is not None


def run_one(path: Path, toy_evalset: Path, tmp_path: Path, **config: float) -> Outcome:
    """Evaluate one checkpoint file on the toy evalset, as production of 'toy-model'."""
    return evaluate_checkpoint(
        target(path),
        load_evalset(toy_evalset),
        config=Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES), **config),
        run_id=new_run_id(),
        week="2026-W40",
        device="cpu",
    )


class TestBrokenModels:
    @pytest.mark.parametrize("kind", sorted(BROKEN))
    def test_broken_forward_is_an_error_row_with_its_reason(
        self, kind: str, toy_evalset: Path, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """A forward that raises or breaks the output contract is an error row naming why."""
        model_class, kwargs, reason = BROKEN[kind]
        path = save_model(model_class, tmp_path / f"{kind}.pt", train_data, **kwargs)
        outcome = run_one(path, toy_evalset, tmp_path)
        assert not outcome.ok and outcome.metrics == [] and outcome.predictions is None
        assert outcome.evaluation["error"] == reason
        assert outcome.evaluation["git_sha"] == pinned_git  # the lineage of what loaded is kept

    def test_factory_that_raises_is_an_error_row(
        self, toy_checkpoints: dict[str, Path], toy_evalset: Path, tmp_path: Path
    ) -> None:
        """A factory raising while the model is built names the phase, the type and the message."""
        payload = torch.load(toy_checkpoints["good"], weights_only=True)
        payload["lineage"]["model"]["factory"] = "tests.models:exploding_factory"
        path = tmp_path / "exploding.pt"
        torch.save(payload, path)
        outcome = run_one(path, toy_evalset, tmp_path)
        assert outcome.evaluation["error"] == (
            "model factory 'tests.models:exploding_factory': raised ValueError: cannot build a "
            "4x8x3 net today when called with kwargs {'features': 4, 'classes': 3, 'hidden': 8}"
        )

    @pytest.mark.parametrize("model_class", [SleepingNet, StuckInC], ids=["sleeps", "stuck-in-c"])
    def test_hung_forward_times_out_and_the_next_evaluation_runs(
        self,
        model_class: type[nn.Module],
        toy_evalset: Path,
        toy_checkpoints: dict[str, Path],
        tmp_path: Path,
        train_data: Path,
    ) -> None:
        """A forward that never returns, even in C holding the GIL, is killed at the timeout."""
        path = save_model(model_class, tmp_path / "hung.pt", train_data)
        start = time.monotonic()
        hung = run_one(path, toy_evalset, tmp_path, inference_timeout_s=1)
        assert time.monotonic() - start < 60  # the timeout, plus at most starting a process
        assert hung.evaluation["error"] == (
            "timed out after 1 s running the model; its process was killed "
            "(inference_timeout_s in evalsentry.yaml)"
        )
        assert run_one(toy_checkpoints["good"], toy_evalset, tmp_path).ok

    def test_crashing_process_is_an_error_row(
        self, toy_evalset: Path, tmp_path: Path, train_data: Path
    ) -> None:
        """A model that kills its process (a segfault) is an error row naming the signal."""
        path = save_model(CrashingNet, tmp_path / "crash.pt", train_data)
        outcome = run_one(path, toy_evalset, tmp_path)
        assert outcome.evaluation["error"] == (
            "the evaluation process died (killed by signal SIGSEGV) while running the model"
        )


class TestIsolation:
    def test_results_equal_an_in_process_run_of_the_same_model(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """The child's per-example outputs are exactly what the model gives in this process."""
        outcome = run_one(toy_checkpoints["degraded"], toy_evalset, tmp_path)
        here = run_inference(
            load_checkpoint(toy_checkpoints["degraded"], trust=TRUST).model,
            load_evalset(toy_evalset),
            device="cpu",
        ).columns
        assert outcome.predictions is not None
        for column, values in here.items():
            assert np.array_equal(outcome.predictions[column], values), column

    def test_one_process_serves_evaluations_until_one_fails(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path, train_data: Path
    ) -> None:
        """Good evaluations reuse the child (torch imported once); a failure retires it."""
        shutdown()  # children other tests left idle (a pre-started one, say) are not this test's
        run_one(toy_checkpoints["good"], toy_evalset, tmp_path)
        first = idle_pids()
        run_one(toy_checkpoints["degraded"], toy_evalset, tmp_path)
        assert idle_pids() == first and len(first) == 1
        run_one(save_model(RaisingNet, tmp_path / "r.pt", train_data), toy_evalset, tmp_path)
        assert first[0] not in idle_pids()

    def test_after_shutdown_no_child_is_kept(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """shutdown() kills the idle children and keeps none of them for the next evaluation."""
        run_one(toy_checkpoints["good"], toy_evalset, tmp_path)
        prestart()
        assert idle_pids()
        shutdown()
        assert idle_pids() == []

    def test_a_prestarted_child_serves_the_next_evaluation(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """prestart starts one child, once: a second call while it is idle starts none."""
        shutdown()
        prestart()
        prestart()
        (ready,) = idle_pids()
        run_one(toy_checkpoints["good"], toy_evalset, tmp_path)
        assert idle_pids() == [ready]

    def test_progress_and_log_records_of_the_child_reach_the_caller(
        self,
        toy_evalset: Path,
        tmp_path: Path,
        pinned_git: str,
        train_data: Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Progress arrives per batch, and the child's warnings are logged here under its logger."""
        torch.manual_seed(0)
        path = save_checkpoint(
            OOMAbove(limit=200),
            tmp_path / "oom.pt",
            metrics={},
            config={},
            seed=0,
            data=train_data,
            factory_kwargs={"limit": 200},
        )
        seen: list[tuple[int, int]] = []
        with caplog.at_level(logging.WARNING, logger="evalsentry.evaluation.inference"):
            outcome = evaluate_checkpoint(
                target(path),
                load_evalset(toy_evalset),
                config=Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES)),
                run_id="r",
                week="2026-W40",
                device="cpu",
                progress=lambda done, total: seen.append((done, total)),
            )
        assert outcome.ok
        assert seen == [(128, 300), (256, 300), (300, 300)]
        assert "retrying with batch size 256" in caplog.text


class TestCost:
    def test_fallback_energy_uses_configured_power(self) -> None:
        """Without a measurement, energy is configured power x inference time, and says so."""
        rates = Config().cost
        fields = cost_fields(
            device="cpu",
            wall_s=7200.0,
            inference_s=3600.0,
            n_examples=100,
            measurement=Measurement(),
            rates=rates,
        )
        assert fields["energy_kwh"] == pytest.approx(rates.power_watts["cpu"] / 1000)
        assert fields["co2_kg"] == pytest.approx(fields["energy_kwh"] * rates.carbon_kg_per_kwh)
        assert fields["cost"] == pytest.approx(2 * rates.per_device_hour["cpu"])
        assert fields["energy_method"].startswith("estimate")

    def test_codecarbon_measures_a_block(self) -> None:
        """The offline tracker measures the energy of a block of work."""
        meter = CostMeter()
        try:
            with meter.measure("work") as measurement:
                sum(i * i for i in range(200_000))
        finally:
            meter.close()
        assert measurement.method.startswith("codecarbon")
        assert measurement.energy_kwh is not None and measurement.energy_kwh > 0
        assert not math.isnan(measurement.energy_kwh)
