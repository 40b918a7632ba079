"""The shared real Prefect server of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.prefect_server import prefect_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`prefect server start` on a free loopback port, with prefect.yaml deployed; its env."""
    with prefect_server(tmp_path_factory.mktemp("prefect-server")) as env:
        yield env
