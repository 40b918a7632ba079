"""One Prefect test harness for every flow test: a real (temporary) Prefect API."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from tests.models import TRUST, TRUSTED_YAML
from tests.prefect_database import seed

#: The file prefect_test_harness points its temporary server at, in the folder it makes.
HARNESS_DATABASE = "prefect-test.db"


@pytest.fixture(autouse=True, scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory, prefect_database: Path) -> Iterator[None]:
    """A session-wide harness with heartbeats and telemetry off, its database in a temp folder.

    The harness's folder starts with a copy of the run's migrated database
    (``tests/prefect_database.py``), so its server skips the migrations.
    """
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.pop("PREFECT_API_URL", None)
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing import utilities
    from prefect.testing.utilities import prefect_test_harness

    def seeded_folder() -> str:
        folder = tempfile.mkdtemp()
        seed(Path(folder), prefect_database, HARNESS_DATABASE)
        return folder

    with (
        mock.patch.object(utilities, "mkdtemp", seeded_folder),
        prefect_test_harness(server_startup_timeout=90),
        temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
    ):
        yield


@pytest.fixture
def toy_project(tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]) -> Path:
    """A project with the toy evalset, and the good checkpoint as production of 'toy-model'."""
    from evalsentry.checkpoints.registry import Registry

    config = tmp_path / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
    )
    Registry(str(tmp_path / "registry")).register(
        toy_checkpoints["good"], "toy-model", stage="production", trust=TRUST
    )
    return config
