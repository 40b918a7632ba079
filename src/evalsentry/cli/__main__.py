"""``python -m evalsentry.cli``."""

import sys
from pathlib import Path

# `python -m` puts the working folder first on sys.path; the command never imports from it (a
# file there named like a module must not run), so it goes before anything else is imported.
if sys.path and sys.path[0] in ("", str(Path.cwd())):
    del sys.path[0]

from evalsentry.cli import entry

entry()
