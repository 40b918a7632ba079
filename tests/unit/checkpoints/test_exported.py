"""Why evalsentry does not accept ``torch.export`` programs (``.pt2``) as checkpoints.

Issue 14 asked whether a ``.pt2`` program loads without running code, so that it could be a
checkpoint that needs no factory. It does not: ``torch.export.load`` unpickles parts of the
archive with ``weights_only=False`` and evaluates strings from it as Python. These tests pin the
finding on the installed torch with marker files, each on a small hostile archive made from a
real one. If one starts failing after a torch upgrade, torch has closed that path: read
bench/exported_findings.md before considering the format again.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

EXAMPLE_BATCH = 2
LINEAGE = {"git_sha": "0" * 40, "seed": 0}
MARKER_ENV = "EVALSENTRY_TEST_MARKER"
#: A shared library whose constructor creates the file named in MARKER_ENV when it is loaded.
CONSTRUCTOR_C = f"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {{
    const char *path = getenv("{MARKER_ENV}");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) fclose(f);
}}
"""


class _TouchOnUnpickle:
    """Unpickles into a call that creates ``marker``: what a hostile archive carries."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.marker,))


def _torch_pickle(marker: Path) -> bytes:
    buffer = io.BytesIO()
    torch.save(_TouchOnUnpickle(marker), buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nn.Module]:
    """A small CNN exported with a dynamic batch and saved with lineage; and the eager model."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)
    ).eval()
    exported = torch.export.export(
        model,
        (torch.randn(EXAMPLE_BATCH, 1, 8, 8),),
        dynamic_shapes=({0: torch.export.Dim("batch")},),
    )
    path = tmp_path_factory.mktemp("program") / "model.pt2"
    torch.export.save(exported, path, extra_files={"lineage.json": json.dumps(LINEAGE)})
    return path, model


def _member(archive: Path, relative: str) -> str:
    """The archive's name for ``relative`` (members sit under one root folder)."""
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
    root = names[0].split("/")[0]
    name = f"{root}/{relative}"
    if name not in names:
        pytest.fail(f"the .pt2 layout changed ({relative} is gone): re-run the investigation")
    return name


def _read_json(archive: Path, relative: str) -> Any:
    with zipfile.ZipFile(archive) as zf:
        return json.loads(zf.read(_member(archive, relative)))


def _tamper(
    archive: Path,
    target: Path,
    replace: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
) -> Path:
    """Copy ``archive`` to ``target``, members at ``replace`` paths swapped, ``add`` added."""
    swaps = {_member(archive, relative): data for relative, data in (replace or {}).items()}
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(target, "w") as out:
        names = src.namelist()
        for name in names:
            out.writestr(name, swaps.get(name, src.read(name)))
        root = names[0].split("/")[0]
        for relative, data in (add or {}).items():
            out.writestr(f"{root}/{relative}", data)
    return target


def _pickled_sample_inputs(archive: Path, tmp_path: Path, marker: Path) -> Path:
    """A copy of ``archive`` whose sample inputs are a pickle that creates ``marker``."""
    return _tamper(
        archive, tmp_path / "hostile.pt2", {"data/sample_inputs/model.pt": _torch_pickle(marker)}
    )


class TestExportedProgram:
    def test_roundtrip_predicts_like_the_eager_model_at_any_batch_size(
        self, program: tuple[Path, nn.Module]
    ) -> None:
        """An untampered program loads, keeps its extra files and predicts like the model."""
        path, model = program
        extra: dict[str, Any] = {"lineage.json": ""}
        loaded = torch.export.load(path, extra_files=extra).module()
        assert json.loads(extra["lineage.json"]) == LINEAGE
        for batch in (1, 7):
            inputs = torch.randn(batch, 1, 8, 8)
            with torch.inference_mode():
                torch.testing.assert_close(loaded(inputs), model(inputs))


class TestLoadRunsArchiveCode:
    def test_a_pickle_in_the_sample_inputs_runs_on_load(
        self, program: tuple[Path, nn.Module], tmp_path: Path
    ) -> None:
        """The sample inputs are unpickled with weights_only=False when weights_only fails."""
        marker = tmp_path / "ran"
        hostile = _pickled_sample_inputs(program[0], tmp_path, marker)
        with contextlib.suppress(Exception):  # what load does afterwards does not matter
            torch.export.load(hostile)
        assert marker.exists()

    def test_a_weight_marked_as_pickled_runs_on_load(
        self, program: tuple[Path, nn.Module], tmp_path: Path
    ) -> None:
        """A weight the archive's own config marks ``use_pickle`` is read with weights_only=False."""
        marker = tmp_path / "ran"
        config = _read_json(program[0], "data/weights/model_weights_config.json")
        first = next(iter(config["config"].values()))
        first["use_pickle"] = True
        hostile = _tamper(
            program[0],
            tmp_path / "hostile.pt2",
            {
                "data/weights/model_weights_config.json": json.dumps(config).encode(),
                f"data/weights/{first['path_name']}": _torch_pickle(marker),
            },
        )
        with contextlib.suppress(Exception):
            torch.export.load(hostile)
        assert marker.exists()

    def test_a_shape_expression_runs_on_load_and_the_model_still_works(
        self, program: tuple[Path, nn.Module], tmp_path: Path
    ) -> None:
        """A symbolic size is parsed with sympy.sympify (eval); no pickle, and nothing fails."""
        path, model = program
        marker = tmp_path / "ran"
        graph = _read_json(path, "models/model.json")
        tensors = graph["graph_module"]["graph"]["tensor_values"].values()
        size = next(t["sizes"][0] for t in tensors if "as_expr" in t["sizes"][0])  # the batch
        size["as_expr"]["expr_str"] = (
            f"(__import__('pathlib').Path({str(marker)!r}).touch() or 0) + "
            + size["as_expr"]["expr_str"]
        )
        hostile = _tamper(
            path, tmp_path / "hostile.pt2", {"models/model.json": json.dumps(graph).encode()}
        )
        loaded = torch.export.load(hostile)
        assert marker.exists()
        batch = torch.randn(5, 1, 8, 8)
        with torch.inference_mode():
            torch.testing.assert_close(loaded.module()(batch), model(batch))

    def test_guard_code_runs_on_every_call(
        self, program: tuple[Path, nn.Module], tmp_path: Path
    ) -> None:
        """``guards_code`` strings are exec-ed into the module's input check by ``.module()``."""
        path, model = program
        marker = tmp_path / "ran"
        graph = _read_json(path, "models/model.json")
        graph["guards_code"] = [f"__import__('pathlib').Path({str(marker)!r}).touch() is None"]
        hostile = _tamper(
            path, tmp_path / "hostile.pt2", {"models/model.json": json.dumps(graph).encode()}
        )
        module = torch.export.load(hostile).module()
        assert not marker.exists()
        batch = torch.randn(3, 1, 8, 8)
        with torch.inference_mode():
            torch.testing.assert_close(module(batch), model(batch))
        assert marker.exists()

    @pytest.mark.skipif(
        sys.platform != "linux" or shutil.which("cc") is None, reason="needs Linux and a C compiler"
    )
    def test_a_native_library_in_the_archive_is_loaded_on_load(
        self, program: tuple[Path, nn.Module], tmp_path: Path
    ) -> None:
        """Files under data/aotinductor/ are taken for AOTInductor code and dlopen-ed."""
        marker = tmp_path / "ran"
        source = tmp_path / "ran.c"
        source.write_text(CONSTRUCTOR_C)
        library = tmp_path / "ran.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
        hostile = _tamper(
            program[0],
            tmp_path / "hostile.pt2",
            add={
                "data/aotinductor/model/x.wrapper.so": library.read_bytes(),
                "data/aotinductor/model/x.wrapper.cpp": b"",
                "data/aotinductor/model/x.wrapper_metadata.json": b'{"AOTI_DEVICE_KEY": "cpu"}',
            },
        )
        # In a child: the library stays out of this process, and so does what loading it
        # imports (torch._inductor puts setuptools' vendored packages on sys.path).
        load = "import sys, torch\ntry:\n    torch.export.load(sys.argv[1])\nexcept Exception:\n    pass"
        env = {**os.environ, MARKER_ENV: str(marker), "TMPDIR": str(tmp_path)}
        subprocess.run([sys.executable, "-c", load, hostile], check=True, env=env, timeout=300)
        assert marker.exists()


class TestEvalsentryRefusesPrograms:
    def test_a_program_is_refused_unread_at_register_and_evaluate(
        self, program: tuple[Path, nn.Module], tmp_path: Path
    ) -> None:
        """A .pt2, plain or carrying a pickle, is refused by name before anything is read."""
        from evalsentry.checkpoints.checkpoint import load_checkpoint
        from evalsentry.checkpoints.payload import check_archive
        from evalsentry.checkpoints.registry import Registry
        from evalsentry.errors import UnsafeCheckpoint
        from evalsentry.trust import Trust

        marker = tmp_path / "ran"
        hostile = _pickled_sample_inputs(program[0], tmp_path, marker)
        for path in (program[0], hostile):
            with pytest.raises(UnsafeCheckpoint, match=r"a torch\.export program \(\.pt2\)"):
                check_archive(path, 1 << 30)
            with pytest.raises(UnsafeCheckpoint):
                Registry(str(tmp_path / "registry")).register(path, "m", trust=Trust())
            with pytest.raises(UnsafeCheckpoint):
                load_checkpoint(path, trust=Trust())
        assert not marker.exists()
        assert not (tmp_path / "registry").exists() or not list(
            (tmp_path / "registry").rglob("*.json")
        )
