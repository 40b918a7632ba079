"""Tables as the commands print them: aligned plain text, for people and for CI logs alike."""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence


def echo(text: str, *, err: bool = False) -> None:
    """``text`` and a newline on stdout (stderr with ``err``), as Typer's echo but importing nothing."""
    (sys.stderr if err else sys.stdout).write(text + "\n")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A titled table as aligned plain-text columns, never cut to the terminal's width.

    A cell is one line: line breaks inside a value print as spaces.
    """
    cells = [
        [str(c) for c in columns],
        *([" ".join(str(v).split("\n")) for v in row] for row in rows),
    ]
    widths = [max(_width(row[i]) for row in cells) for i in range(len(columns))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            cell + " " * (w - _width(cell)) for cell, w in zip(row, widths, strict=True)
        ).rstrip()

    echo(title)
    echo(line(cells[0]))
    echo("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        echo(line(row))


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: wide characters (emoji) two, a variation one more."""
    width = 0
    for char in text:
        if char == "\ufe0f":  # emoji presentation: the symbol before it is drawn two wide
            width += 1
        elif not unicodedata.combining(char):
            width += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return width
