"""Things a test run builds once and every test process shares (the harness logs).

Under `pytest -n` each worker is a process with its own session, so a session-scoped fixture
alone would build the same thing once per worker. :func:`built_once` builds it in the folder
all workers share, under a file lock: the first worker to ask builds, the others wait for it and
read the result. The result is the run's, never reused by a later run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

#: Marks a folder whose build finished; a folder without it is an interrupted build, redone.
DONE = ".built"


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this test run that all its workers share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The folder ``name``, filled by ``build(folder)`` once per test run; treat it as read-only.

    A build that raised leaves no mark, so the next worker that asks builds again (and most
    likely fails the same way, in its own test).
    """
    root = shared_root(tmp_path_factory) / "built-once"
    root.mkdir(exist_ok=True)
    folder = root / name
    with (root / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / DONE).touch()
    return folder
