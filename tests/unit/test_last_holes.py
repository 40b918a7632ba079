"""The last holes a hostile or careless checkpoint found, through the real entry points.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from tests.conftest import _teacher
from tests.models import TRUSTED_YAML
from tests.unit.checkpoints.test_handwritten_checkpoints import LINEAGE

MODEL = {"factory": "tests.models:TinyNet", "kwargs": {"features": 4, "classes": 3, "hidden": 8}}


def checkpoint_with(path: Path, **lineage: Any) -> Path:
    """The teacher's weights with a lineage whose fields ``lineage`` replaces."""
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))  # pickling a deeply nested value recurses
    try:
        _save(path, lineage)
    finally:
        sys.setrecursionlimit(limit)
    return path


def _save(path: Path, lineage: dict[str, Any]) -> None:
    torch.save(
        {
            "model_state_dict": _teacher().state_dict(),  # type: ignore[attr-defined]
            "lineage": {**LINEAGE, "seed": 1, "model": MODEL, **lineage},
        },
        path,
    )


def shared_bomb() -> list[Any]:
    """A small list that expands to 2**30 values: each level holds the level below twice."""
    level: list[Any] = [0]
    for _ in range(30):
        level = [level, level]
    return level


def deep(levels: int) -> list[Any]:
    """A list nested ``levels`` deep."""
    root: list[Any] = []
    inner = root
    for _ in range(levels):
        inner.append([])
        inner = inner[0]
    return root


@pytest.fixture
def project(trusted_project: Path) -> Path:
    """A project folder trusting the test models, as the working folder."""
    return trusted_project


class TestLineageValues:
    @pytest.mark.parametrize(
        ("lineage", "says"),
        [
            ({"seed": "abc"}, "lineage.seed: expected an integer within int64, or null, got str"),
            ({"seed": 2**80}, "lineage.seed: expected an integer within int64, or null, got int"),
            ({"git_dirty": "no"}, "lineage.git_dirty: expected true, false or null, got str"),
            ({"git_sha": 12345}, "lineage.git_sha: expected a hex digest as text, got int"),
            ({"data_sha": ["d" * 64]}, "lineage.data_sha: expected a hex digest as text, got list"),
            ({"config": {1: "a"}}, "lineage.config: a key must be text, got int 1"),
            ({"config": {"lr": float("nan")}}, "lineage.config.lr: nan is not a reproducible"),
            ({"config": {"x": shared_bomb()}}, "lineage.config: too large written out"),
            ({"config": {"x": deep(3_000)}}, "lineage.config: nested more than 32 deep"),
            ({"teacher": "teacher.pt"}, "lineage.teacher: expected {sha256: <64 hex digits>}"),
            ({"teacher": {"sha256": "ab" * 31}}, "lineage.teacher: expected {sha256: <64 hex"),
        ],
        ids=[
            "seed text",
            "seed huge",
            "dirty text",
            "sha int",
            "data list",
            "int key",
            "nan",
            "bomb",
            "deep",
            "teacher a path",
            "teacher short sha",
        ],
    )
    def test_75_a_lineage_value_of_the_wrong_type_or_size_is_refused_at_register(
        self,
        project: Path,
        capsys: pytest.CaptureFixture[str],
        lineage: dict[str, Any],
        says: str,
    ) -> None:
        """75: one line naming the field, exit 2, nothing registered; fast, bomb or not."""
        path = checkpoint_with(project / "odd.pt", **lineage)
        started = time.perf_counter()
        assert main(["register", str(path), "--model", "m", "--new-model"]) == 2
        assert time.perf_counter() - started < 60  # not the billion values it expands to
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and "Traceback" not in err
        assert Registry(str(project / ".evalsentry" / "registry")).list() == []

    def test_75_a_candidate_with_a_bad_lineage_is_refused_by_evaluate(
        self,
        project: Path,
        toy_evalset: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """75: `evaluate` of such a file: exit 2, the field named; its ERROR recorded, no result."""
        from evalsentry.history.store import History

        (project / "evalsentry.yaml").write_text(f"evalsets: {toy_evalset.parent}\n" + TRUSTED_YAML)
        path = checkpoint_with(project / "odd.pt", seed="abc")
        assert main(["evaluate", "--checkpoint", str(path), "--model", "m", "--new-model"]) == 2
        assert "lineage.seed: expected an integer" in capsys.readouterr().err
        rows = History(str(project / ".evalsentry")).evaluations()
        assert rows["status"].tolist() == ["error"]


class TestNonFiniteWeights:
    def test_76_weights_holding_nan_are_refused_naming_the_tensor(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """76: NaN in a weight: exit 2 naming the tensor; --allow-nonfinite registers it."""
        teacher = _teacher()
        state = teacher.state_dict()  # type: ignore[attr-defined]
        state["body.2.bias"][1] = float("nan")
        path = project / "nan.pt"
        torch.save({"model_state_dict": state, "lineage": {**LINEAGE, "model": MODEL}}, path)
        assert main(["register", str(path), "--model", "m", "--new-model"]) == 2
        err = capsys.readouterr().err
        assert "weights: body.2.bias holds 1 NaN or infinite value(s) of 3" in err
        assert "--allow-nonfinite" in err and err.count("\n") == 1
        argv = ["register", str(path), "--model", "m", "--new-model", "--allow-nonfinite"]
        assert main(argv) == 0
        assert [e.version for e in Registry(str(project / ".evalsentry" / "registry")).list()] == [
            1
        ]


class TestRecordingOnePairFails:
    def test_77_a_row_the_history_cannot_hold_is_its_pair_s_error_the_rest_recorded(
        self, tmp_path: Path
    ) -> None:
        """77: one evaluation row with a value its column cannot hold: that pair alone is ERROR."""
        from evalsentry.history.store import History
        from tests.synthetic import accuracy_mask, record_week

        history = History(str(tmp_path / "store"))
        good = record_week(history, "2026-W40", accuracy_mask(200, 0.9), model="good")
        odd = record_week(history, "2026-W40", accuracy_mask(200, 0.9), model="odd", seed="abc")
        rows = history.evaluations().set_index("evaluation_id")
        assert rows.loc[good, "status"] == "ok"
        assert rows.loc[odd, "status"] == "error"
        assert rows.loc[odd, "error"] == "could not be recorded: seed: str 'abc' is not int64"
        assert history.metrics([odd]).empty and history.predictions(odd) is None
