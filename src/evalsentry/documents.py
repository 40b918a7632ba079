"""Reading YAML documents, and naming what is wrong in one: the file, the field, the fix.

YAML is read strictly (a repeated key is an error, not the last one winning), and a pydantic
validation error becomes one line naming the file and the field (``config_error``), for
``evalsentry.yaml``, evalset manifests and registry entries alike; and what is wrong with a
folder a document names (``folder_problem``).
"""

from __future__ import annotations

import os
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from evalsentry.errors import ConfigError

#: The field that holds the folder relative locations resolve in: set from the file's place,
#: never by the file itself.
ROOT_FIELD = "root"
#: How YAML keys that are not text read to a person (``1:``, ``null:``, ``2026-01-01:``).
_KEY_KINDS: dict[type, str] = {
    bool: "true/false",
    int: "a number",
    float: "a number",
    type(None): "null",
    date: "a date",
    datetime: "a date",
}


class DuplicateKey(yaml.YAMLError):
    """A mapping of a settings document names one key twice."""

    def __init__(self, key: str, first: int, line: int) -> None:
        self.key, self.first, self.line = key, first, line
        super().__init__(f"duplicate key {key!r}")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (it keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping, once each text key is known to be given once.

        Raises:
            DuplicateKey: naming the key and both lines.
        """
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, str) and key in seen:
                raise DuplicateKey(key, seen[key], line)
            if isinstance(key, str):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(file: Path, text: str) -> dict[str, object]:
    """The document's top-level mapping, its keys checked to be setting names."""
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except DuplicateKey as exc:
        raise ConfigError(
            file,
            exc.key,
            f"given twice (lines {exc.first} and {exc.line}); YAML keeps only the last, so the "
            "first would be silently lost: keep one",
        ) from None
    except yaml.YAMLError as exc:
        detail = exc.__class__.__name__
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
            mark = exc.problem_mark
            detail = exc.problem + (f", line {mark.line + 1}" if mark is not None else "")
        raise ConfigError(file, "", f"not valid YAML ({detail}); fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            file,
            "(top level)",
            f"expected a mapping of settings (like `store: .evalsentry`), got a "
            f"{type(data).__name__}",
        )
    for key in data:
        if not isinstance(key, str):
            kind = _KEY_KINDS.get(type(key), f"a {type(key).__name__}")
            raise ConfigError(
                file,
                "null" if key is None else str(key),
                f"a setting name must be text, not {kind}; remove it or check its spelling",
            )
    if ROOT_FIELD in data:
        raise ConfigError(
            file,
            ROOT_FIELD,
            "not a setting: relative locations resolve against the folder holding this file; "
            "remove it",
        )
    return data


_TYPE_TAGS = frozenset({"float", "int", "str", "bool"})


def config_error(file: object, exc: ValidationError) -> ConfigError:
    """The first pydantic error as a ``ConfigError`` naming file and field."""
    first = exc.errors()[0]
    # A union's member (``max_drop: float | str`` -> ``.float``) is no part of the setting's name.
    field = ".".join(
        str(p)
        for p in first["loc"]
        if str(p) not in _TYPE_TAGS and not str(p).startswith("function-")
    ) or ("(top level)")
    message = first["msg"].removeprefix("Value error, ")  # pydantic's wrapping of a ValueError
    given = first.get("input")
    if first["type"] == "extra_forbidden":
        message = "unknown field; remove it or check its spelling"
    elif isinstance(given, bool):
        message = (
            f"{str(given).lower()} is not a value this setting takes ({message[0].lower()}"
            f"{message[1:]}); YAML reads yes/no/on/off as true/false: write the value itself"
        )
    elif first["type"] == "finite_number":
        message = f"{given} is not a finite number; give one"
    return ConfigError(file, field, message)


def folder_problem(path: Path, role: str) -> str | None:
    """Why ``path`` cannot be the local folder of ``role`` (``store``); None when it can be.

    Missing is fine (a store or registry is made on first write). A dangling symbolic link, a
    file, or a folder that cannot be read, there or in a folder above it, is not: the history
    behind it would read as empty.
    """
    for part in (path, *path.parents):
        what = f"the {role} is" if part == path else f"the {role} cannot be a folder: {part} is"
        if part.is_symlink() and not part.exists():
            return f"{what} a symbolic link to {part.readlink()}, which does not exist"
        if not part.exists():
            continue
        if not part.is_dir():
            return f"{what} a file" + (", not a folder" if part == path else "")
        if part == path and not os.access(part, os.R_OK | os.X_OK):
            return f"the {role} cannot be read (permission denied)"
        return None
    return None
