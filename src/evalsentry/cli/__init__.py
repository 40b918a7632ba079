"""The ``evalsentry`` command line: a thin shell over the library.

Exit codes: 0 ok, 1 a check failed (integrity, regression), 2 unusable input. User errors print
one line and no traceback. Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import typer

from evalsentry.cli import evalsets, project, registry, results, runs  # register the commands
from evalsentry.cli._app import app
from evalsentry.errors import EXIT_USAGE, EvalsentryError

__all__ = ["app", "evalsets", "main", "project", "registry", "results", "runs"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map evalsentry errors to one line on stderr and an exit code."""
    # Like `python -m`: the current folder is importable, so model factories and flows of the
    # project the command runs in resolve.
    # Library warnings (a checkpoint recorded as failed, an out-of-memory retry) go to stderr
    # only when asked for: a user error stays one line. EVALSENTRY_LOG_LEVEL=INFO shows them.
    handler = logging.StreamHandler()
    handler.setLevel(os.environ.get("EVALSENTRY_LOG_LEVEL", "ERROR").upper())
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=handler.level, handlers=[handler])
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        app(args=argv, prog_name="evalsentry")  # click's standalone mode ends in SystemExit
    except EvalsentryError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return 0
