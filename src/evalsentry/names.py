"""Validation of user-supplied names that become parts of storage paths."""

from __future__ import annotations

import re

from evalsentry.errors import InvalidName

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
STAGES = ("candidate", "production", "archived")


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it is safe as one path segment, else raise ``InvalidName``.

    Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 100
    characters, and never ``..``: a name can never climb out of its folder.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidName(
            kind, str(name), "use letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def check_stage(stage: str) -> str:
    """Return ``stage`` if it is one of ``STAGES``."""
    if stage not in STAGES:
        raise InvalidName("stage", stage, f"choose one of {', '.join(STAGES)}")
    return stage
