"""What training cost: ``track_training`` measures a run, ``save_checkpoint`` records it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import FrozenInstanceError
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from evalsentry.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from evalsentry.checkpoints.payload import read_payload
from evalsentry.checkpoints.registry import Registry
from evalsentry.checkpoints.training import (
    TRAINING_COST_FIELDS,
    BadTrainingCost,
    TrainingRun,
    device_type,
    track_training,
)
from evalsentry.cost.meter import CostMeter
from evalsentry.sections import CostRates
from tests.models import TRUST, TinyNet

#: 100 W for half an hour is 0.05 kWh; at 0.5 kg/kWh, 0.025 kg; at 2 per hour, 1.0.
RATES = CostRates(
    currency="EUR",
    per_device_hour={"cpu": 2.0, "cuda": 8.0},
    carbon_kg_per_kwh=0.5,
    power_watts={"cpu": 100.0, "cuda": 400.0},
)


def fake_clock(*readings: float) -> Callable[[], float]:
    """A clock that returns ``readings`` in turn."""
    values: Iterator[float] = iter(readings)
    return lambda: next(values)


def finished_run(**changes: Any) -> dict[str, Any]:
    """A plausible ``training_cost`` record, with ``changes`` applied."""
    record: dict[str, Any] = {
        "device": "cuda",
        "wall_s": 3600.0,
        "device_hours": 1.0,
        "energy_kwh": 0.4,
        "co2_kg": 0.16,
        "cost": 3.0,
        "currency": "USD",
        "energy_method": "estimate: 400 W configured x wall time",
        "started_at": "2026-11-30T05:00:00+00:00",
        "ended_at": "2026-11-30T06:00:00+00:00",
    }
    return {**record, **changes}


class TestTrackTraining:
    def test_estimate_is_configured_power_times_wall_time(self) -> None:
        """Without codecarbon, energy is watts x hours, and carbon and money follow the rates."""
        with track_training(
            "cpu", rates=RATES, use_codecarbon=False, clock=fake_clock(10.0, 1810.0)
        ) as run:
            assert not run.closed
        assert run.closed
        assert run.device == "cpu"
        assert run.wall_s == 1800.0
        assert run.device_hours == 0.5
        assert run.energy_kwh == 0.05
        assert run.co2_kg == 0.025
        assert run.cost == 1.0
        assert run.currency == "EUR"
        assert run.energy_method == "estimate: 100 W configured x wall time"
        started, ended = (datetime.fromisoformat(s) for s in (run.started_at, run.ended_at))
        assert started.utcoffset() is not None and started <= ended

    def test_the_run_is_frozen_once_its_block_ends(self) -> None:
        """A finished run cannot be edited into another cost."""
        with track_training("cpu", rates=RATES, use_codecarbon=False) as run:
            run.energy_method = "hand-set inside the block"  # still open: allowed
        with pytest.raises(FrozenInstanceError):
            run.cost = 0.0

    def test_an_error_in_the_block_propagates_and_the_run_is_closed(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The training's own exception escapes; the tracker is stopped, the time spent costed."""
        closed: list[bool] = []

        class SpyMeter(CostMeter):
            def close(self) -> None:
                closed.append(True)
                super().close()

        monkeypatch.setattr("evalsentry.checkpoints.training.CostMeter", SpyMeter)
        with (
            pytest.raises(RuntimeError, match="loss is NaN"),
            track_training(
                "cuda:1", rates=RATES, use_codecarbon=False, clock=fake_clock(0.0, 900.0)
            ) as run,
        ):
            raise RuntimeError("loss is NaN")
        assert closed == [True]
        assert run.closed
        assert (run.device, run.wall_s, run.device_hours) == ("cuda", 900.0, 0.25)
        assert run.energy_kwh == 0.1
        assert run.cost == 2.0

    @pytest.mark.parametrize(
        ("device", "kind"),
        [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda"), (torch.device("cuda", 0), "cuda")],
    )
    def test_devices_are_named_as_the_rates_are_keyed(self, device: Any, kind: str) -> None:
        """``cuda:1`` and ``torch.device('cuda', 0)`` are priced as ``cuda``."""
        assert device_type(device) == kind

    def test_rates_come_from_the_project_config(self, chdir_tmp: Path) -> None:
        """Without rates, ./evalsentry.yaml's cost section prices the run."""
        (chdir_tmp / "evalsentry.yaml").write_text(
            "cost:\n  currency: GBP\n  per_device_hour: {cpu: 1.5}\n  power_watts: {cpu: 50}\n"
        )
        with track_training("cpu", use_codecarbon=False, clock=fake_clock(0.0, 3600.0)) as run:
            pass
        assert (run.currency, run.cost, run.energy_kwh) == ("GBP", 1.5, 0.05)

    def test_real_codecarbon_measures_a_tiny_torch_loop(self) -> None:
        """codecarbon's offline tracker measures a real (if tiny) training loop."""
        model = TinyNet()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(256, 4), torch.randint(0, 3, (256,))
        with track_training("cpu", rates=RATES) as run:
            for _ in range(200):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        assert run.energy_method.startswith("codecarbon"), run.energy_method
        assert run.energy_kwh > 0
        assert run.co2_kg == run.energy_kwh * RATES.carbon_kg_per_kwh
        assert run.wall_s > 0


def save(
    folder: Path, train_data: Path, training: Any, model: torch.nn.Module | None = None
) -> Path:
    """A tiny checkpoint in ``folder`` with ``training=training``."""
    return save_checkpoint(
        model or TinyNet(),
        folder / "m.pt",
        metrics={},
        config={},
        seed=0,
        data=train_data,
        training=training,
    )


class TestSaveCheckpoint:
    def test_the_run_is_recorded_in_the_lineage_and_survives_registration(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """``training=run`` writes ``lineage.training_cost``; loading and the registry keep it."""
        with track_training(
            "cpu", rates=RATES, use_codecarbon=False, clock=fake_clock(0.0, 60.0)
        ) as run:
            model = TinyNet()
        path = save(tmp_path, train_data, run, model)
        recorded = read_payload(path)["lineage"]["training_cost"]
        assert recorded == run.as_lineage()
        assert list(recorded) == list(TRAINING_COST_FIELDS)
        assert recorded["wall_s"] == 60.0
        assert load_checkpoint(path, trust=TRUST).lineage["training_cost"] == recorded
        entry = Registry(str(tmp_path / "registry")).register(path, "tiny", trust=TRUST)
        assert entry.lineage["training_cost"] == recorded

    def test_a_checkpoint_without_training_cost_still_loads_and_registers(
        self, tmp_path: Path, tiny_checkpoint: Path
    ) -> None:
        """Checkpoints written before training cost existed are as good as before."""
        assert "training_cost" not in read_payload(tiny_checkpoint)["lineage"]
        assert "training_cost" not in load_checkpoint(tiny_checkpoint, trust=TRUST).lineage
        entry = Registry(str(tmp_path / "registry")).register(tiny_checkpoint, "tiny", trust=TRUST)
        assert entry.version == 1 and "training_cost" not in entry.lineage

    def test_a_mapping_is_accepted(self, tmp_path: Path, pinned_git: str, train_data: Path) -> None:
        """Training measured elsewhere can be recorded as a mapping of the same fields."""
        record = finished_run(wall_s=3600)  # an int is a number too
        path = save(tmp_path, train_data, record)
        assert read_payload(path)["lineage"]["training_cost"] == finished_run()

    @pytest.mark.parametrize(
        ("training", "field"),
        [
            (finished_run(energy_kwh=-0.1), "energy_kwh"),
            (finished_run(cost=math.nan), "cost"),
            (finished_run(wall_s=math.inf), "wall_s"),
            (finished_run(co2_kg="0.1"), "co2_kg"),
            (finished_run(device=""), "device"),
            (finished_run(ended_at="2026-11-30 06:00"), "ended_at"),
            (finished_run(gpu_hours=1.0), "gpu_hours"),
            ({k: v for k, v in finished_run().items() if k != "currency"}, "currency"),
        ],
    )
    def test_a_bad_record_is_refused_in_one_line_naming_the_field(
        self,
        tmp_path: Path,
        pinned_git: str,
        train_data: Path,
        training: dict[str, Any],
        field: str,
    ) -> None:
        """Negative, non-finite, mistyped, missing or unknown fields are refused; nothing is written."""
        with pytest.raises(BadTrainingCost) as caught:
            save(tmp_path, train_data, training)
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(f"training_cost.{field}: ")
        assert "track_training" in message
        assert caught.value.field == field
        assert not (tmp_path / "m.pt").exists()

    def test_a_run_still_open_is_refused(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """Saving inside the block would record a cost not yet known; it says where to save."""
        with (
            pytest.raises(BadTrainingCost, match="after its with block"),
            track_training("cpu", rates=RATES, use_codecarbon=False) as run,
        ):
            save(tmp_path, train_data, run)

    def test_a_run_built_by_hand_is_checked_like_a_mapping(
        self, tmp_path: Path, pinned_git: str, train_data: Path
    ) -> None:
        """A ``TrainingRun`` constructed directly is held to the same checks."""
        run = TrainingRun(**finished_run(energy_kwh=-1.0), closed=True)
        with pytest.raises(BadTrainingCost, match=r"^training_cost\.energy_kwh: -1\.0 "):
            save(tmp_path, train_data, run)
