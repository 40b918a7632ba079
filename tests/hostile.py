"""Hostile checkpoints: each names code that leaves a mark if it runs, or inflates past a limit.

Built with ``torch.save`` directly (``save_checkpoint`` would call the factory), with complete
lineage, so nothing but the factory, the size or the registry entry gives them away. Marks go
to ``<folder>/marks``; ``<folder>/victim`` is a folder one of them deletes if it runs.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tests.models import Marker, TinyNet

#: A module on the import path whose import alone leaves a mark.
SIDE_EFFECT_MODULE = "evalsentry_side_effect"
#: The bomb's tensor: 16 MiB of zeros that deflate to about 17 KiB.
BOMB_BYTES = 16 * 2**20
#: ``max_checkpoint_bytes`` of a hostile project: far above a toy checkpoint, far below the bomb.
SMALL_LIMIT = 2**20


@dataclass(frozen=True)
class Hostile:
    """A hostile checkpoint: its file and the factory its lineage names."""

    name: str
    path: Path
    factory: str
    kwargs: dict[str, Any]


def lineage(factory: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Complete lineage naming ``factory`` with ``kwargs``."""
    return {
        "git_sha": "0" * 40,
        "git_dirty": False,
        "data_sha": "d" * 64,
        "config": {},
        "seed": 0,
        "model": {"factory": factory, "kwargs": kwargs},
        "torch_version": str(torch.__version__),
        "timestamp_utc": "2026-11-30T06:00:00+00:00",
    }


def save(path: Path, factory: str, kwargs: dict[str, Any], state: Any = None) -> Path:
    """A checkpoint of TinyNet's weights (or ``state``) whose lineage names ``factory``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = TinyNet().state_dict() if state is None else state
    torch.save(
        {"model_state_dict": weights, "metrics": {}, "lineage": lineage(factory, kwargs)}, path
    )
    return path


def marks(folder: Path) -> Path:
    """The folder hostile code would leave its marks in (created empty)."""
    found = folder / "marks"
    found.mkdir(parents=True, exist_ok=True)
    return found


def victim(folder: Path) -> Path:
    """A folder with a file in it, which ``remove_tree`` would delete."""
    found = folder / "victim"
    found.mkdir(parents=True, exist_ok=True)
    (found / "keep.txt").write_text("still here\n")
    return found


def side_effect_path(folder: Path) -> Path:
    """A folder holding ``SIDE_EFFECT_MODULE``, whose import writes ``marks/import``."""
    found = folder / "pythonpath"
    found.mkdir(parents=True, exist_ok=True)
    mark = marks(folder) / "import"
    (found / f"{SIDE_EFFECT_MODULE}.py").write_text(
        f"from pathlib import Path\nPath({str(mark)!r}).touch()\n"
        "from torch import nn\n\n\nclass Net(nn.Module):\n    pass\n"
    )
    return found


def factory_checkpoints(folder: Path) -> list[Hostile]:
    """One checkpoint per hostile factory, each with kwargs that leave a mark if it is called."""
    mark = marks(folder)
    pickled = {}
    for name in ("numpy", "pandas"):  # pickles whose loading runs `touch`
        pickled[name] = folder / f"{name}.pkl"
        pickled[name].write_bytes(pickle.dumps(Marker(str(mark / name))))
    cases = {
        "yaml-unsafe-load": (
            "yaml:unsafe_load",
            {"stream": f"!!python/object/apply:os.system ['touch {mark / 'yaml'}']"},
        ),
        "numpy-load": ("numpy:load", {"file": str(pickled["numpy"]), "allow_pickle": True}),
        "pandas-read-pickle": (
            "pandas:read_pickle",
            {"filepath_or_buffer": str(pickled["pandas"])},
        ),
        "distutils-spawn": (
            "setuptools._distutils.spawn:spawn",
            {"cmd": ["touch", str(mark / "spawn")]},
        ),
        "distutils-remove-tree": (
            "setuptools._distutils.dir_util:remove_tree",
            {"directory": str(victim(folder))},
        ),
        "import-side-effect": (f"{SIDE_EFFECT_MODULE}:Net", {}),
    }
    side_effect_path(folder)
    return [
        Hostile(name, save(folder / f"{name}.pt", factory, kwargs), factory, kwargs)
        for name, (factory, kwargs) in cases.items()
    ]


def bomb(folder: Path) -> Path:
    """A small checkpoint whose zip entry inflates to ``BOMB_BYTES`` (a real, loadable one)."""
    stored = save(
        folder / "bomb-stored.pt",
        "tests.models:TinyNet",
        {},
        state={"body.0.weight": torch.zeros(BOMB_BYTES // 4)},
    )
    path = folder / "bomb.pt"
    with zipfile.ZipFile(stored) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            out.writestr(info.filename, source.read(info.filename))
    stored.unlink()
    return path


def assert_nothing_ran(folder: Path) -> None:
    """No mark was left, the victim folder is whole, and the side-effect module was not imported."""
    import sys

    assert sorted(p.name for p in marks(folder).iterdir()) == []
    assert (folder / "victim" / "keep.txt").is_file()
    assert SIDE_EFFECT_MODULE not in sys.modules


def write_entry(
    registry: Path, model: str, checkpoint: Path, model_lineage: dict[str, Any]
) -> Path:
    """A production registry entry written by hand, as someone who can write the registry could."""
    data = checkpoint.read_bytes()
    entry = {
        "model": model,
        "version": 1,
        "uri": str(checkpoint),
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "stage": "production",
        "lineage": model_lineage,
        "metrics": {},
        "registered_at": "2026-11-30T06:00:00+00:00",
        "stage_history": [
            {"stage": "production", "at": "2026-11-30T06:00:00+00:00", "by": "someone"}
        ],
    }
    path = registry / model / "v000001.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=2))
    return path
