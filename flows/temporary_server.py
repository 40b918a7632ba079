"""Prefect's temporary server, tied to the process that starts it: it dies with it, even on SIGKILL.

``evalsentry run`` and ``evalsentry demo`` call :func:`tie_temporary_server` when no
PREFECT_API_URL is set (the library never imports Prefect, so this lives with the flows).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Any

#: ``prctl`` option (linux/prctl.h): the signal this process gets when its parent thread exits.
PR_SET_PDEATHSIG = 1


def tie_temporary_server() -> None:
    """Make the temporary Prefect server that this process may start die with it, even on SIGKILL.

    Prefect starts its temporary server as a child process (``SubprocessASGIServer``) and stops
    it from an ``atexit`` hook, which a SIGKILL (or SIGTERM, or an out-of-memory kill) never
    runs: each killed run used to leave a ~250 MB server behind. No cleanup in this process can
    help then, so the child asks the kernel: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, set between
    fork and exec, kills it as soon as its parent goes. Unlike a watchdog process it needs no
    polling and cannot itself be left behind; unlike starting a server of our own behind
    PREFECT_API_URL it keeps Prefect's lazy start (no server for a run that fails before its
    first flow), startup timeout, port retry and ``atexit`` stop. This only registers, before
    Prefect makes its own, the server object Prefect will use, which spawns the child so.

    The child also gets a session of its own, so a terminal's Ctrl-C reaches only this process:
    Prefect then marks the run Crashed on a server still up and stops the server at exit (2 s
    here), instead of retrying a server that Ctrl-C had already killed (70 s of tracebacks).

    The kernel sends the signal when the *thread* that forked the child ends, so all this is done
    only when the main thread starts the server (Prefect's engine does, on the first flow run);
    the main thread ends last, after the ``atexit`` hook. Started from another thread, or on
    systems other than Linux, the server is started as Prefect does it.
    """
    if not sys.platform.startswith("linux"):
        return
    from prefect.server.api.server import SubprocessASGIServer

    if None in SubprocessASGIServer._instances:  # already made, or a test harness's
        return
    prctl = ctypes.CDLL(None).prctl  # looked up here: the child only calls it

    class TiedServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            if threading.current_thread() is not threading.main_thread():
                return super()._run_uvicorn_command()
            parent = os.getpid()

            def die_with_parent() -> None:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != parent:  # the parent died before prctl took effect
                    os.kill(os.getpid(), signal.SIGKILL)

            # Prefect 3.9's own command and environment (SubprocessASGIServer._run_uvicorn_command).
            return subprocess.Popen(  # noqa: S603 - a fixed command, no shell
                _uvicorn_command(self.port),
                env=_server_environment(),
                # preexec_fn is unsafe only if the child takes a lock another thread held at
                # fork; this one calls prctl, getppid and kill, none of which takes one.
                preexec_fn=die_with_parent,  # noqa: PLW1509
                start_new_session=True,  # Ctrl-C is for this process, which then stops it
            )

    TiedServer()  # now the instance that Prefect's SubprocessASGIServer() returns


def _uvicorn_command(port: int | None) -> list[str]:
    """Prefect's own command for its temporary server on ``port``."""
    import prefect

    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(prefect.__module_path__.parent),
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]


def _server_environment() -> dict[str, str]:
    """Prefect's own environment for its temporary server: this one's, settings included."""
    from prefect.settings import get_current_settings

    return {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        **get_current_settings().to_environment_variables(exclude_unset=True),
    }
