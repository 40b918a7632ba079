"""Results that cannot be poisoned: swapped files, stray modules, bad config values, odd text.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evalsentry.checkpoints.checkpoint import load_checkpoint
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

        from evalsentry.checkpoints.registry import Registry
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


TEAM_MODELS = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    """The team's model, as the project reviewed it."""

    def __init__(self, features=4, classes=3, hidden=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.body(x.flatten(1))
'''


def _marker_module(marker: Path) -> str:
    """Python source that proves it ran: importing it creates ``marker``."""
    return f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"


class TestStrayModules:
    @pytest.fixture
    def team(self, tmp_path: Path, toy_evalset: Path) -> tuple[Path, Path, Path]:
        """A project with team_models.py beside its config; a checkpoint naming its TinyNet."""
        import shutil

        from tests.conftest import _teacher
        from tests.unit.checkpoints.test_handwritten_checkpoints import LINEAGE

        project = tmp_path / "project"
        project.mkdir()
        shutil.copytree(toy_evalset, project / "evalsets" / "toy")
        (project / "team_models.py").write_text(TEAM_MODELS)
        (project / "evalsentry.yaml").write_text("trusted_factories: [team_models]\n")
        elsewhere = tmp_path / "downloads"
        elsewhere.mkdir()
        checkpoint = elsewhere / "candidate.pt"
        model = {
            "factory": "team_models:TinyNet",
            "kwargs": {"features": 4, "classes": 3, "hidden": 8},
        }
        torch.save(
            {"model_state_dict": _teacher().state_dict(), "lineage": {**LINEAGE, "model": model}},  # type: ignore[attr-defined]
            checkpoint,
        )
        return project, elsewhere, checkpoint

    def _evaluate(
        self, project: Path, cwd: Path, checkpoint: Path, *, python_path: str, module: bool
    ) -> Any:
        import os
        import subprocess
        import sys

        root = Path(__file__).parents[2]
        env = {**os.environ, "PYTHONPATH": f"{python_path}{os.pathsep}{root}"}
        env.pop("PYTHONSAFEPATH", None)
        command = (
            [sys.executable, "-m", "evalsentry.cli"]
            if module
            else [str(Path(sys.executable).with_name("evalsentry"))]
        )
        argv = [*command, "evaluate", "--checkpoint", str(checkpoint), "--model", "toy"]
        argv += ["--new-model", "--config", str(project / "evalsentry.yaml")]
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)

    @pytest.mark.parametrize(
        ("module", "python_path"),
        [(False, "/nowhere"), (True, "/nowhere"), (False, "")],
        ids=["evalsentry", "python -m", "PYTHONPATH with an empty entry"],
    )
    def test_62_a_module_beside_the_checkpoint_never_runs(
        self, team: tuple[Path, Path, Path], tmp_path: Path, module: bool, python_path: str
    ) -> None:
        """62: evaluate run in a folder holding queue.py: neither process imports it.

        An empty PYTHONPATH entry (``:/x``) means the working folder: it is dropped too.
        """
        project, elsewhere, checkpoint = team
        marker = tmp_path / "queue-ran"
        (elsewhere / "queue.py").write_text(_marker_module(marker))
        result = self._evaluate(
            project, elsewhere, checkpoint, python_path=python_path, module=module
        )
        assert result.returncode == 0, result.stderr
        assert not marker.exists()

    def test_63_a_stray_team_models_never_stands_in_for_the_project_s(
        self, team: tuple[Path, Path, Path], tmp_path: Path
    ) -> None:
        """63: team_models.py in the working folder and first on PYTHONPATH: the project's runs."""
        project, elsewhere, checkpoint = team
        marker = tmp_path / "stray-ran"
        (elsewhere / "team_models.py").write_text(_marker_module(marker) + TEAM_MODELS)
        result = self._evaluate(
            project, elsewhere, checkpoint, python_path=f"{elsewhere}:{project}", module=False
        )
        assert result.returncode == 0, result.stderr
        assert not marker.exists()


class TestBaselinesAndReferences:
    @pytest.fixture
    def project(self, tmp_path: Path) -> Path:
        """A project whose history is written by the tests."""
        (tmp_path / "evalsentry.yaml").write_text("store: store\n")
        return tmp_path

    def test_64_a_baseline_pinned_to_a_week_without_production_is_refused(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """64: `baseline set` to a week holding only a candidate's row: exit 2, nothing pinned."""
        from evalsentry.cli import main
        from evalsentry.history.store import History
        from tests.synthetic import accuracy_mask, record_week

        history = History(str(project / "store"))
        record_week(history, "2026-W39", accuracy_mask(500, 0.9), stage="candidate")
        record_week(history, "2026-W40", accuracy_mask(500, 0.9))
        config = ["--config", str(project / "evalsentry.yaml")]
        assert main(["baseline", "set", "--model", "m", "--week", "2026-W39", *config]) == 2
        err = capsys.readouterr().err
        assert "no production result of 'm' recorded in week 2026-W39" in err
        assert "candidate ok" in err and err.count("\n") == 1
        assert history.baseline_week("m") is None

    def test_64_a_pinned_baseline_with_no_result_is_an_error_not_a_skip(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """64: a pin (set before, or by hand) to a week with no production: ERROR, exit 2.

        Skipped, the degraded week would PASS: it matches the previous week, degraded too.
        """
        import json

        import numpy as np

        from evalsentry.cli import main
        from evalsentry.history.store import History
        from tests.synthetic import accuracy_mask, record_week

        history = History(str(project / "store"))
        good = accuracy_mask(500, 0.9)
        worse = good.copy()
        worse[np.flatnonzero(good)[:40]] = False
        record_week(history, "2026-W40", good)
        record_week(history, "2026-W41", worse, version=2, checkpoint="2" * 64)
        record_week(history, "2026-W42", worse, version=2, checkpoint="2" * 64)
        pin = project / "store" / "baselines" / "m.json"
        pin.parent.mkdir(parents=True)
        pin.write_text(json.dumps({"model": "m", "week": "2026-W39"}))
        config = ["--config", str(project / "evalsentry.yaml")]
        assert main(["gate", "--week", "2026-W42", *config]) == 2
        err = capsys.readouterr().err
        assert "the pinned baseline 2026-W39 holds no production result of m on toy" in err

    def test_65_a_candidate_of_a_line_whose_production_all_failed_is_an_error(
        self,
        tmp_path: Path,
        toy_evalset: Path,
        toy_checkpoints: dict[str, Path],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """65: `evaluate` when every production evaluation of the line failed: exit 2, not 0."""
        from evalsentry.cli import main
        from evalsentry.history.store import History
        from tests.models import TRUSTED_YAML
        from tests.synthetic import accuracy_mask, record_week

        config = tmp_path / "evalsentry.yaml"
        config.write_text(f"store: store\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML)
        history = History(str(tmp_path / "store"))
        record_week(history, "2026-W40", accuracy_mask(300, 0.9), model="toy-model", status="error")
        argv = ["evaluate", "--checkpoint", str(toy_checkpoints["good"]), "--model", "toy-model"]
        assert main([*argv, "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert "every production evaluation of toy-model on toy failed" in err
        assert "(latest, 2026-W40: checkpoint corrupt)" in err


class TestConfigValues:
    @pytest.mark.parametrize(
        ("text", "says"),
        [
            (
                "gate:\n  metrics:\n    accuracy: {max_drop: .nan}\n",
                "evalsentry.yaml: gate.metrics.accuracy.max_drop: nan is not a finite number",
            ),
            (
                "gate:\n  metrics:\n    accuracy: {max_drop: yes}\n",
                "evalsentry.yaml: gate.metrics.accuracy.max_drop: true is not a value this "
                "setting takes",
            ),
            (
                "inference_timeout_s: on\n",
                "evalsentry.yaml: inference_timeout_s: true is not a value this setting takes",
            ),
            (
                "gate:\n  strict: true\nstore: s\ngate:\n  alpha: 0.1\n",
                "evalsentry.yaml: gate: given twice (lines 1 and 4); YAML keeps only the last",
            ),
            (
                "gate:\n  alpha: 0.1\n  alpha: 0.2\n",
                "evalsentry.yaml: alpha: given twice (lines 2 and 3)",
            ),
        ],
        ids=["nan", "yes", "on", "duplicate gate", "duplicate alpha"],
    )
    def test_66_a_value_that_would_mislead_the_gate_is_refused_naming_its_key(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
    ) -> None:
        """66: NaN, a boolean where a number belongs, a key given twice: one line, exit 2."""
        from evalsentry.cli import main

        (tmp_path / "evalsentry.yaml").write_text(text)
        assert main(["gate", "--config", str(tmp_path / "evalsentry.yaml")]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err


class TestOddText:
    def test_67_control_characters_in_a_slice_keep_junit_and_markdown_whole(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """67: a slice value holding a bell and a newline: JUnit valid, one Markdown row each."""
        import xml.etree.ElementTree as ET

        import numpy as np
        import xmlschema

        from evalsentry.cli import main
        from evalsentry.history.store import History
        from tests import synthetic
        from tests.unit.reports.test_report import JUNIT_XSD

        plain = synthetic.predictions

        def odd_slices(correct: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
            columns = plain(correct, seed)
            columns["slice:half"] = np.where(columns["slice:half"] == "even", "ev\x07en", "o\ndd|x")
            return columns

        monkeypatch.setattr(synthetic, "predictions", odd_slices)
        (tmp_path / "evalsentry.yaml").write_text("store: store\n")
        history = History(str(tmp_path / "store"))
        synthetic.record_week(history, "2026-W40", synthetic.accuracy_mask(400, 0.9))
        synthetic.record_week(history, "2026-W41", synthetic.accuracy_mask(400, 0.9, seed=1))
        junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
        argv = ["gate", "--slices", "--junit", str(junit), "--markdown", str(markdown)]
        main([*argv, "--config", str(tmp_path / "evalsentry.yaml")])
        text = junit.read_text()
        xmlschema.XMLSchema(JUNIT_XSD).validate(text)
        names = [case.get("name") for case in ET.fromstring(text).iter("testcase")]
        assert any("half=ev\\x07en" in str(name) for name in names)
        rows = [line for line in markdown.read_text().splitlines() if line.startswith("| ")]
        sliced = [row for row in rows if "half=" in row]
        assert len(sliced) == 2 * 2  # two slices, two metrics: one row each, none split
        assert all(row.endswith(" |") for row in sliced)
        assert any("half=o dd\\|x" in row for row in sliced)

    def test_68_a_checkpoint_name_that_is_not_utf8_is_refused_at_the_door(
        self,
        tmp_path: Path,
        tiny_checkpoint: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """68: `register` of a file named with a byte that is not UTF-8: exit 2; the registry lists."""
        import os

        from evalsentry.cli import main
        from tests.models import TRUSTED_YAML

        (tmp_path / "evalsentry.yaml").write_text(TRUSTED_YAML)
        monkeypatch.chdir(tmp_path)
        odd = os.fsencode(tmp_path) + b"/model-\xff.pt"  # bytes: Path cannot hold them
        with open(odd, "wb") as handle:
            handle.write(tiny_checkpoint.read_bytes())
        name = os.fsdecode(odd)  # as the shell hands it over: undecodable bytes escaped
        assert main(["register", name, "--model", "m", "--new-model"]) == 2
        err = capsys.readouterr().err
        assert "model-\\xff.pt: the file name is not valid UTF-8 text; rename the file" in err
        assert err.count("\n") == 1
        assert main(["registry", "list"]) == 0


class TestUnwritable:
    @pytest.mark.parametrize(
        "argv",
        [
            ["run"],
            ["evaluate", "--checkpoint", "CKPT", "--model", "m", "--new-model"],
            ["history", "compact"],
        ],
        ids=["run", "evaluate", "history compact"],
    )
    def test_69_a_store_that_cannot_be_written_stops_every_writer_before_work(
        self,
        tmp_path: Path,
        tiny_checkpoint: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        argv: list[str],
    ) -> None:
        """69: a read-only store: one line naming it, exit 2, before anything is evaluated."""
        from evalsentry.cli import main
        from tests.conftest import make_read_only
        from tests.models import TRUSTED_YAML

        (tmp_path / "evalsentry.yaml").write_text("store: store\n" + TRUSTED_YAML)
        monkeypatch.chdir(tmp_path)
        undo = make_read_only(tmp_path / "store")
        try:
            code = main([str(tiny_checkpoint) if a == "CKPT" else a for a in argv])
        finally:
            undo()
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
        assert f"{tmp_path / 'store'}: cannot write to the store (" in err

    @pytest.mark.parametrize("where", ["read-only/week.html", "a-folder"])
    def test_69_report_out_that_cannot_be_written_is_one_line(
        self,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        where: str,
    ) -> None:
        """69: `report --out` into a read-only folder, or onto a folder: one line, exit 2."""
        from evalsentry.cli import main
        from evalsentry.history.store import History
        from tests.conftest import make_read_only
        from tests.synthetic import accuracy_mask, record_week

        (tmp_path / "evalsentry.yaml").write_text("store: store\n")
        record_week(History(str(tmp_path / "store")), "2026-W40", accuracy_mask(200, 0.9))
        (tmp_path / "a-folder").mkdir()
        monkeypatch.chdir(tmp_path)
        undo = make_read_only(tmp_path / "read-only")
        try:
            code = main(["report", "--out", str(tmp_path / where)])
        finally:
            undo()
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
        assert f"--out {tmp_path / where}: cannot write the report there (" in err


class TestPublishedFiles:
    @pytest.fixture
    def weeks(self, tmp_path: Path) -> Path:
        """A project whose history holds two weeks of one line."""
        from evalsentry.history.store import History
        from tests.synthetic import accuracy_mask, record_week

        (tmp_path / "evalsentry.yaml").write_text("store: store\n")
        history = History(str(tmp_path / "store"))
        record_week(history, "2026-W40", accuracy_mask(400, 0.9))
        record_week(history, "2026-W41", accuracy_mask(400, 0.88, seed=1))
        return tmp_path

    def test_72_any_flipped_byte_of_a_predictions_file_is_one_line_naming_it(
        self, weeks: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """72: 25 single-byte flips across a predictions file: each is exit 2, never other numbers."""
        import numpy as np

        from evalsentry.cli import main

        path = next((weeks / "store" / "predictions").glob("*.parquet"))
        original = path.read_bytes()
        config = ["--config", str(weeks / "evalsentry.yaml")]
        for offset in np.random.default_rng(0).choice(len(original), 25, replace=False):
            flipped = bytearray(original)
            flipped[int(offset)] ^= 0x10
            path.write_bytes(bytes(flipped))
            assert main(["gate", "--week", "2026-W41", *config]) == 2, offset
            err = capsys.readouterr().err
            assert f"{path}: changed since the history published it" in err
            assert err.count("\n") == 1 and "Traceback" not in err
        path.write_bytes(original)
        assert main(["gate", "--week", "2026-W41", *config]) != 2

    @pytest.mark.parametrize("week", [[], ["--week", "2026-W41"]], ids=["latest", "named"])
    def test_73_a_deleted_week_is_an_error_naming_its_file(
        self, weeks: Path, capsys: pytest.CaptureFixture[str], week: list[str]
    ) -> None:
        """73: the latest week's evaluations file deleted: never the week before read as latest."""
        from evalsentry.cli import main
        from evalsentry.history.store import History

        ledger = History(str(weeks / "store")).ledger
        latest = max(ledger.files("evaluations"), key=lambda f: Path(f).stat().st_mtime)
        Path(latest).unlink()
        assert main(["gate", *week, "--config", str(weeks / "evalsentry.yaml")]) == 2
        err = capsys.readouterr().err
        assert f"{latest}: missing: the history published it" in err

    def test_73_forget_drops_a_lost_file_so_the_rest_reads_again(
        self, weeks: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """73: `history forget` records the loss; the gate then judges what is left."""
        from evalsentry.cli import main
        from evalsentry.history.store import History

        config = ["--config", str(weeks / "evalsentry.yaml")]
        ledger = History(str(weeks / "store")).ledger
        latest = max(ledger.files("evaluations"), key=lambda f: Path(f).stat().st_mtime)
        Path(latest).unlink()
        assert main(["history", "forget", latest, *config]) == 0
        assert "forgot evaluations/" in capsys.readouterr().out
        assert main(["gate", *config]) == 0
        assert "evalsentry gate 2026-W40: BASELINE" in capsys.readouterr().out

    def test_74_a_history_written_before_the_ledger_is_adopted_on_its_next_write(
        self, tmp_path: Path
    ) -> None:
        """74: the next write records every existing file; a file lost after that is found."""
        from evalsentry.errors import HistoryError
        from evalsentry.history.store import History
        from tests.synthetic import accuracy_mask, pre_ledger, record_week

        history = History(str(tmp_path / "store"))
        old = record_week(history, "2026-W40", accuracy_mask(200, 0.9))
        pre_ledger(tmp_path / "store")
        record_week(History(str(tmp_path / "store")), "2026-W41", accuracy_mask(200, 0.9))
        (tmp_path / "store" / "predictions" / f"{old}.parquet").unlink()
        with pytest.raises(HistoryError, match=rf"{old}\.parquet: missing: the history published"):
            History(str(tmp_path / "store")).predictions(old)
