"""What the CLI needs to start flows without importing Prefect itself.

The library never imports Prefect; these helpers import evalsentry's installed Prefect side
(``evalsentry.flows``, built from this repository's ``flows/``) by name, and check the Prefect
API before a run.
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from evalsentry.errors import UsageError

API_URL_ENV = "PREFECT_API_URL"
CONNECT_TIMEOUT_S = 3.0
#: Prefect's temporary server needs ~16 s to create its database on a fresh machine here, close
#: to its default 20 s limit; a busy machine goes past it.
EPHEMERAL_STARTUP_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
EPHEMERAL_STARTUP_S = "120"
#: Prefect's usage telemetry, off where evalsentry starts the server: its heartbeat hit "database
#: is locked" on the temporary server's SQLite file and printed a 100-line traceback mid-run.
TELEMETRY_OFF = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}


def local_server_defaults() -> bool:
    """Without PREFECT_API_URL, give Prefect's temporary server time to start and no telemetry.

    Each is set unless already set. ``evalsentry run`` and ``demo`` call this, and so does the
    flows package when imported: a flow called from Python gets the same settings.

    Returns:
        Whether Prefect will start a temporary server (no PREFECT_API_URL).
    """
    if os.environ.get(API_URL_ENV):
        return False
    os.environ.setdefault(EPHEMERAL_STARTUP_ENV, EPHEMERAL_STARTUP_S)
    for name, value in TELEMETRY_OFF.items():
        os.environ.setdefault(name, value)
    return True


def ensure_prefect_api() -> bool:
    """Fail fast, with a clear message, when PREFECT_API_URL points at nothing.

    Without PREFECT_API_URL, Prefect starts a temporary local server for the run; give it time
    to start on a fresh machine, and turn its telemetry off (unless set otherwise).

    Returns:
        True when Prefect will start a temporary server (``evalsentry.flows.temporary_server`` ties it to
        this process), False when PREFECT_API_URL answers.
    """
    if local_server_defaults():
        return True
    url = os.environ[API_URL_ENV]
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=CONNECT_TIMEOUT_S):
            return False
    except OSError as exc:
        raise UsageError(
            f"{API_URL_ENV}={url}: no Prefect API answers there ({exc.strerror or exc}); "
            f"start one with `make server`, or unset {API_URL_ENV} to use a temporary local one"
        ) from None


def import_flow(module: str, name: str) -> Callable[..., Any]:
    """Import ``module:name`` of evalsentry's Prefect side."""
    try:
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"cannot import {module} ({exc}); reinstall evalsentry: its flows come with the package"
        ) from None
