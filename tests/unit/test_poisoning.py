"""Results that cannot be poisoned: swapped files, stray modules, bad config values, odd text.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evalsentry.checkpoint import load_checkpoint
from tests.models import TRUST


class TestSwappedCheckpoint:
    def test_60_the_bytes_hashed_are_the_bytes_loaded(
        self, toy_checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """60: the file swapped for another between its hash check and its load changes nothing.

        The swap happens the moment torch starts loading: what loads is what was hashed.
        """
        from evalsentry.storage import sha256_file

        path = tmp_path / "pinned.pt"
        path.write_bytes(toy_checkpoints["good"].read_bytes())
        pinned = sha256_file(path)[0]
        good = torch.load(toy_checkpoints["good"], weights_only=True)["model_state_dict"]
        real_load = torch.load

        def swap_then_load(source: Any, *args: Any, **kwargs: Any) -> Any:
            path.write_bytes(toy_checkpoints["degraded"].read_bytes())  # the racing writer
            return real_load(source, *args, **kwargs)

        monkeypatch.setattr(torch, "load", swap_then_load)
        loaded = load_checkpoint(path, trust=TRUST, expected_sha256=pinned)
        assert loaded.sha256 == pinned
        assert all(torch.equal(good[k], v) for k, v in loaded.model.state_dict().items())
        assert sha256_file(path)[0] != pinned  # the file on disk did change


class TestRacingRegistrations:
    def test_61_the_same_file_registered_four_times_at_once_is_one_version(
        self, tmp_path: Path, tiny_checkpoint: Path
    ) -> None:
        """61: four `register` processes of one file at the same time: v1 only, all exit 0."""
        import os
        import subprocess
        import sys

        from evalsentry.registry import Registry
        from tests.models import TRUSTED_YAML

        (tmp_path / "evalsentry.yaml").write_text(TRUSTED_YAML)
        root = Path(__file__).parents[2]
        env = {**os.environ, "PYTHONPATH": str(root)}
        argv = [sys.executable, "-m", "evalsentry.cli", "register", str(tiny_checkpoint)]
        argv += ["--model", "m", "--new-model"]
        runs = [
            subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        outs = [run.communicate(timeout=300)[0] for run in runs]
        assert [run.returncode for run in runs] == [0, 0, 0, 0], outs
        entries = Registry(str(tmp_path / ".evalsentry" / "registry")).list("m")
        assert [e.version for e in entries] == [1]
        assert all("m@v1" in out or "m v1 is already this file" in out for out in outs), outs
