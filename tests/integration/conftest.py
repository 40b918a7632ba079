"""The shared real Prefect server of the integration tests, and its worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.prefect_server import (
    SHARED_WORKER,
    WORKER_LOG,
    prefect_server,
    wait_queue_ready,
    workers,
)


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, prefect_database: Path
) -> Iterator[dict[str, str]]:
    """`prefect server start` on a free loopback port, with prefect.yaml deployed, and a process
    worker polling the gpu pool's default queue (as `make worker` runs one); their env.

    One of each per test run: the tests that use them run one after another on one worker of
    `pytest -n` (tests/conftest.py). The env names the worker's log (``WORKER_LOG``).
    """
    folder = tmp_path_factory.mktemp("prefect-server")
    with (
        prefect_server(folder, database=prefect_database) as env,
        workers(
            {**env, "PREFECT_WORKER_QUERY_SECONDS": "2"},
            folder,
            {SHARED_WORKER: ["--work-queue", "default"]},
        ),
    ):
        wait_queue_ready(env, "gpu", "default")
        yield {**env, WORKER_LOG: str(folder / f"worker-{SHARED_WORKER}.log")}
