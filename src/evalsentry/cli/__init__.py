"""The ``evalsentry`` command line: a thin shell over the library.

Owns: parsing commands and printing their results. Imports every layer of the library (the
top one); nothing in the library imports it.

Exit codes: 0 ok, 1 a check failed (integrity, regression), 2 unusable input. User errors print
one line and no traceback. Heavy modules are imported inside the commands that need them, and
the CI commands, ``evalsentry gate`` and ``evaluate``, start without Typer (:mod:`.ci`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from evalsentry.cli.ci import COMMANDS
from evalsentry.cli.output import echo, flush_output
from evalsentry.errors import EXIT_USAGE, EvalsentryError

if TYPE_CHECKING:
    import typer

__all__ = ["app", "entry", "main"]

#: pydantic's switch for its plugins, read when a model first validates.
PYDANTIC_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        return _typer_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _typer_app() -> typer.Typer:
    """The Typer application with every command registered."""
    from evalsentry.cli import (  # noqa: F401 (commands)
        evalsets,
        imports,
        profile,
        project,
        registry,
        results,
        runs,
        tolerances,
    )
    from evalsentry.cli._app import app

    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; map evalsentry errors to one line on stderr and an exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    # Library warnings (a checkpoint recorded as failed, an out-of-memory retry) go to stderr
    # only when asked for: a user error stays one line. EVALSENTRY_LOG_LEVEL=INFO shows them.
    handler = logging.StreamHandler()
    handler.setLevel(os.environ.get("EVALSENTRY_LOG_LEVEL", "ERROR").upper())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=handler.level, handlers=[handler])
    # The working folder is not put on sys.path: a file there named like a module (a queue.py
    # beside a checkpoint) must never run. Trusted model modules come from the project folder
    # (evalsentry.trust), flows from the installed package.
    try:
        return _run(args)
    finally:
        flush_output()  # a reader that left (`| head -1`) changes no exit code


def _run(args: list[str]) -> int:
    """The command's exit code: its verdict's, or an error's."""
    try:
        if args and args[0] in COMMANDS:
            return COMMANDS[args[0]](args[1:])
        # click's standalone mode ends in SystemExit
        _typer_app()(args=args, prog_name="evalsentry")
    except EvalsentryError as exc:
        echo(f"error: {exc}", err=True)
        return exc.exit_code
    except BrokenPipeError:  # a write outside `echo` met a reader that left: its verdict is lost
        flush_output()
        return 1
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return 0


def entry() -> NoReturn:
    """The ``evalsentry`` program: :func:`main`, then exit with its code.

    The gate's process ends without the interpreter's teardown (freeing every pandas and
    pyarrow object it loaded: about a tenth of a second of each CI build), once its output is
    flushed; its files are written and closed before it prints. Other commands exit normally:
    their atexit handlers (a temporary Prefect server's shutdown) must run.
    """
    from evalsentry.trust import import_path

    # The program imports from no working folder: PYTHONPATH's empty entries ("", as in
    # ":/x") mean the folder of the moment, and a module there named like a standard one
    # (a queue.py beside a checkpoint) must never run, here or in the Python processes this
    # one starts (py-cpuinfo's probe, where /proc/cpuinfo names no CPU); the standard library
    # comes first.
    sys.path[:] = import_path(sys.path)
    if "PYTHONPATH" in os.environ:
        entries = [e for e in os.environ["PYTHONPATH"].split(os.pathsep) if e]
        os.environ["PYTHONPATH"] = os.pathsep.join(entries)
    gate = sys.argv[1:2] == ["gate"]
    if gate:
        # pydantic validates the gate's own configuration only: no pydantic plugin (an
        # observability hook) is looked for, a scan of every installed package's metadata
        # (20-30 ms of the gate's start). A value the environment sets is kept.
        os.environ.setdefault(PYDANTIC_PLUGINS, "__all__")
    code = main()
    if gate:
        logging.shutdown()
        with contextlib.suppress(OSError):  # a closed pipe: nothing more can be said
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
