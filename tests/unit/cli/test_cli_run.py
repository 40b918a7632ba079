"""`evalsentry run` and `demo` entry points: the Prefect API check before anything starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.models import TRUST

ROOT = Path(__file__).parents[3]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_prefect_api_is_a_clear_message_not_a_hang() -> None:
    """PREFECT_API_URL pointing nowhere fails in seconds with one line and exit 2."""
    env = {**os.environ, "PREFECT_API_URL": f"http://127.0.0.1:{_closed_port()}/api"}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "evalsentry.cli", "run", "--week", "2026-W40"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no Prefect API answers there" in result.stderr and "make server" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert time.monotonic() - start < 30


def test_run_refuses_a_malformed_week_before_starting_prefect() -> None:
    """A bad --week is a usage error before any flow machinery starts."""
    result = subprocess.run(
        [sys.executable, "-m", "evalsentry.cli", "run", "--week", "49"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "ISO week" in result.stderr


def test_temporary_prefect_server_gets_time_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PREFECT_API_URL, the temporary server's startup limit is raised (fresh machines need ~16 s)."""
    from evalsentry.evaluation.orchestration import EPHEMERAL_STARTUP_ENV, ensure_prefect_api

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv(
        EPHEMERAL_STARTUP_ENV, ""
    )  # recorded, so the test leaves the variable as it was
    monkeypatch.delenv(EPHEMERAL_STARTUP_ENV)
    ensure_prefect_api()
    assert int(os.environ[EPHEMERAL_STARTUP_ENV]) >= 60


def test_prefect_settings_a_team_set_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Telemetry is turned off only where nobody chose; with PREFECT_API_URL nothing is set."""
    from evalsentry.evaluation.orchestration import TELEMETRY_OFF, local_server_defaults

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "")
    monkeypatch.delenv("DO_NOT_TRACK")
    assert local_server_defaults() is True
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "true"
    assert os.environ["DO_NOT_TRACK"] == TELEMETRY_OFF["DO_NOT_TRACK"]
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    monkeypatch.delenv("DO_NOT_TRACK")
    assert local_server_defaults() is False and "DO_NOT_TRACK" not in os.environ


def test_run_with_nothing_to_evaluate_exits_2_before_starting_prefect(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty registry, or a mistyped model, is one line and exit 2, with no server started."""
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.cli import main

    config = tmp_path / "evalsentry.yaml"
    config.write_text("store: store\nregistry: registry\n")
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "register one with `evalsentry register" in err
    Registry(str(tmp_path / "registry")).register(
        tiny_checkpoint, "wine", stage="production", trust=TRUST
    )
    assert main(["run", "--model", "wien", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == "error: model 'wien' is not registered. Did you mean 'wine'?\n"


def test_run_into_a_store_that_is_a_file_exits_2_before_starting_prefect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`store:` naming a file: one line and exit 2 before any evaluation, not exit 1 after all."""
    from evalsentry.cli import main

    (tmp_path / "store").write_text("not a folder")
    config = tmp_path / "evalsentry.yaml"
    config.write_text("store: store\nregistry: registry\n")
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the store is a file, not a folder" in err
