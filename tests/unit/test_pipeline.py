"""One evaluation end to end: rows, metrics per slice, cost, and failures as error rows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evalsentry.config import Config
from evalsentry.cost import CostMeter, Measurement, cost_fields
from evalsentry.evalsets import load_evalset
from evalsentry.history import History
from evalsentry.pipeline import Target, evaluate_checkpoint, new_run_id, record
from evalsentry.storage import sha256_file


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
            config=Config(root=str(tmp_path)),
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
            config=Config(root=str(tmp_path)),
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
            config=Config(root=str(tmp_path)),
            run_id="r",
            week="2026-W40",
        )
        assert "changed since registration" in outcome.evaluation["error"]

    def test_record_writes_every_outcome(
        self, toy_evalset: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """Recorded outcomes, good and failed, are all in the history."""
        evalset, config, run = load_evalset(toy_evalset), Config(root=str(tmp_path)), new_run_id()
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
