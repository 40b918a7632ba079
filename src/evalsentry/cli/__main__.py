"""``python -m evalsentry.cli``."""

from evalsentry.cli import entry

entry()
