"""Hostile checkpoints through `register`, `evaluate` and the weekly flow (issue 14).

Each names code that leaves a mark if it runs (a file written, a folder deleted, a module whose
import writes a file), or inflates far past ``max_checkpoint_bytes``, or hides behind a
registry entry edited to point at another file. Nothing runs, nothing is inflated beyond the
limit, and each is refused with one line.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from tests.hostile import (
    SMALL_LIMIT,
    assert_nothing_ran,
    bomb,
    factory_checkpoints,
    lineage,
    marks,
    save,
    side_effect_path,
    write_entry,
)
from tests.models import TRUST

WEEK = "2026-W40"
FACTORIES = [
    "yaml-unsafe-load",
    "numpy-load",
    "pandas-read-pickle",
    "distutils-spawn",
    "distutils-remove-tree",
    "import-side-effect",
]


@pytest.fixture
def project(toy_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy project with a 1 MiB max_checkpoint_bytes; the side-effect module is importable."""
    toy_project.write_text(toy_project.read_text() + f"max_checkpoint_bytes: {SMALL_LIMIT}\n")
    monkeypatch.syspath_prepend(str(side_effect_path(tmp_path / "hostile")))
    return toy_project


def untrusted(factory: str, config: Path) -> str:
    """The one line a factory outside trusted_factories is refused with."""
    module = factory.split(":", maxsplit=1)[0]
    return (
        f"model factory '{factory}': not trusted, nothing was imported; add the module "
        f"'{module}' or '{factory}' to trusted_factories in {config}"
    )


def too_large(path: Path) -> str:
    """The one line the bomb is refused with."""
    with zipfile.ZipFile(path) as archive:
        inflated = sum(i.file_size for i in archive.infolist())
    return (
        f"{path}: refused unread: its archive inflates to {inflated} bytes (16.0 MiB), more "
        f"than max_checkpoint_bytes: {SMALL_LIMIT} bytes (1.0 MiB); raise it in "
        "evalsentry.yaml only for a checkpoint you expect to be that large"
    )


def hostile(name: str, folder: Path, config: Path) -> tuple[Path, str]:
    """The checkpoint ``name`` names, and the line it must be refused with."""
    cases = {c.name: c for c in factory_checkpoints(folder)}  # with the marks' folders
    if name == "bomb":
        path = bomb(folder)
        return path, too_large(path)
    return cases[name].path, untrusted(cases[name].factory, config)


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's stderr, checked to be one line."""
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def refuse_to_load(*args: object, **kwargs: object) -> None:
    """Stands in for ``torch.load`` where nothing may be inflated."""
    raise AssertionError("torch.load was called on a checkpoint that must stay unread")


@pytest.mark.parametrize("name", [*FACTORIES, "bomb"])
def test_register_refuses_it_with_one_line_and_nothing_runs(
    name: str,
    project: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`register` exits 2 with one line; no mark, no import, no inflating; nothing registered."""
    folder = tmp_path / "hostile"
    path, reason = hostile(name, folder, project)
    if name == "bomb":
        monkeypatch.setattr(torch, "load", refuse_to_load)
    code = main(["register", str(path), "--model", name, "--new-model", "--config", str(project)])
    assert (code, error_line(capsys)) == (2, f"error: {reason}")
    assert_nothing_ran(folder)
    assert name not in Registry(load_config(project).registry_url).models()


@pytest.mark.parametrize("name", [*FACTORIES, "bomb"])
def test_evaluate_refuses_it_with_one_line_and_nothing_runs(
    name: str, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evaluate --checkpoint` exits 2 naming why, records the error row; nothing ran."""
    folder = tmp_path / "hostile"
    path, reason = hostile(name, folder, project)
    code = main(
        ["evaluate", "--checkpoint", str(path), "--model", "toy-model", "--config", str(project)]
    )
    assert (code, error_line(capsys)) == (2, f"error: {path.name} on toy: {reason}")
    rows = History(load_config(project).store_url).evaluations(include_superseded=True)
    assert rows["status"].tolist() == ["error"] and rows["error"].tolist() == [reason]
    assert_nothing_ran(folder)


def test_the_weekly_run_refuses_each_one_and_evaluates_the_rest(
    project: Path, tmp_path: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """Entries written by hand for every hostile file, and one edited to point at another file.

    Each is its model's ERROR row with its one line; the good model is evaluated; nothing ran.
    """
    folder = tmp_path / "hostile"
    registry = Path(load_config(project).registry_url)
    expected = {}
    for case in factory_checkpoints(folder):
        write_entry(registry, case.name, case.path, lineage(case.factory, case.kwargs))
        expected[case.name] = untrusted(case.factory, project)
    path = bomb(folder)
    write_entry(registry, "bomb", path, lineage("tests.models:TinyNet", {}))
    expected["bomb"] = too_large(path)
    # toy-model@v1 pins TinyNet; its entry now points at a file whose own factory would run.
    other = save(
        folder / "other.pt",
        "tests.models:MarkerNet",
        {"marker": str(marks(folder) / "edit")},
    )
    entry_file = registry / "toy-model" / "v000001.json"
    entry = json.loads(entry_file.read_text())
    data = other.read_bytes()
    entry.update(uri=str(other), sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    entry_file.write_text(json.dumps(entry))
    expected["toy-model"] = (
        f"{other}: the checkpoint names model tests.models:MarkerNet(marker="
        f"'{marks(folder) / 'edit'}'), not the pinned tests.models:TinyNet(classes=3, "
        "features=4, hidden=8); what runs is what was registered: register this file as a new "
        "version"
    )
    Registry(str(registry)).register(
        toy_checkpoints["good"], "good-model", stage="production", trust=TRUST
    )

    state = weekly_eval(week=WEEK, config_path=str(project), return_state=True)

    assert state.is_failed()
    rows = History(load_config(project).store_url).evaluations().set_index("model")
    assert rows.loc["good-model", "status"] == "ok"
    assert rows.drop("good-model")["error"].to_dict() == expected
    assert str(state.message).startswith(f"{WEEK}: ERROR ") and "and 7 more" in str(state.message)
    assert_nothing_ran(folder)


def test_register_with_a_factory_runs_a_factory_less_checkpoint_end_to_end(
    project: Path,
    tmp_path: Path,
    toy_checkpoints: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A plain-recipe checkpoint registered with --factory is evaluated with that factory."""
    payload = torch.load(toy_checkpoints["good"], weights_only=True)
    del payload["lineage"]["model"]
    plain = tmp_path / "plain.pt"
    torch.save(payload, plain)
    kwargs = {"features": 4, "classes": 3, "hidden": 8}
    args = ["--factory", "tests.models:TinyNet", "--factory-kwargs", json.dumps(kwargs)]
    config = ["--config", str(project)]
    assert main(["register", str(plain), "--model", "plain", "--new-model", *args, *config]) == 0
    assert main(["registry", "promote", "plain", "1", *config]) == 0
    assert main(["registry", "show", "plain", *config]) == 0
    shown = json.loads(capsys.readouterr().out.split("\n", 2)[2])
    assert shown["lineage"]["model"] == {"factory": "tests.models:TinyNet", "kwargs": kwargs}

    state = weekly_eval(week=WEEK, config_path=str(project), return_state=True)

    assert state.is_completed(), state.message
    rows = History(load_config(project).store_url).evaluations().set_index("model")
    assert rows.loc["plain", "status"] == "ok"


def test_a_registry_entry_with_an_unknown_stage_fails_the_week_naming_the_file(
    project: Path,
) -> None:
    """An entry edited to a stage that does not exist: the run fails with one line naming it."""
    entry_file = Path(load_config(project).registry_url) / "toy-model" / "v000001.json"
    entry = json.loads(entry_file.read_text())
    entry["stage"] = "prod"
    entry_file.write_text(json.dumps(entry))
    state = weekly_eval(week=WEEK, config_path=str(project), return_state=True)
    assert state.is_failed()
    assert (
        f"{entry_file}: stage: 'prod' is not a stage; use one of candidate, production, archived"
        in str(state.message)
    )
