"""A Prefect database migrated once per test run, copied into the home of each server a test starts.

Creating Prefect's SQLite database (every migration) is most of a server's start here: 11 s of
a fresh server's 16 s against 5 s for one started on a database already migrated. The suite
starts about eight; each gets a copy of one database migrated at the start of the run, by the
same Prefect (`prefect server database upgrade`). The demo's own test keeps a fresh machine's
first start, migrations included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.built_once import built_once

PREFECT = str(Path(sys.executable).parent / "prefect")
#: The file ``prefect server start`` (and the temporary server) use in ``PREFECT_HOME``.
DATABASE = "prefect.db"


def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's migrated database (built by the first worker that asks); read-only."""
    return built_once(tmp_path_factory, "prefect-database", _migrate) / DATABASE


def _migrate(folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(folder), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    subprocess.run(
        [PREFECT, "server", "database", "upgrade", "-y"],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    if not (folder / DATABASE).is_file():
        raise RuntimeError(f"`prefect server database upgrade` wrote no {folder / DATABASE}")


def seed(home: Path, database: Path, name: str = DATABASE) -> Path:
    """Copy ``database`` into ``home`` as ``name`` (a server's home, before it starts)."""
    home.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(database, home / name))
