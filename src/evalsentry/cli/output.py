"""Tables as the commands print them: aligned plain text, for people and for CI logs alike."""

from __future__ import annotations

import os
import sys
import unicodedata
from collections.abc import Sequence
from typing import TextIO

from evalsentry.harnesses.example_text import visible


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """``text`` and a newline on stdout (stderr with ``err``), as Typer's echo but importing nothing.

    A reader that has left (``evalsentry gate | head -1``) ends nothing: the rest of the output
    is dropped and the command finishes, so it still exits with its verdict's code.
    """
    stream = sys.stderr if err else sys.stdout
    try:
        stream.write(text + ("\n" if nl else ""))
    except BrokenPipeError:
        _reader_left(stream)


def flush_output() -> None:
    """Flush stdout and stderr; a closed pipe drops what is left instead of raising."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            _reader_left(stream)


def _reader_left(stream: TextIO) -> None:
    """Point ``stream``'s file at /dev/null: what is buffered and written later goes nowhere."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a file (a test's capture): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A titled table as aligned plain-text columns, never cut to the terminal's width.

    A cell is one line: line breaks inside a value print as spaces.
    """
    cells = [
        [visible(str(c)) for c in columns],
        *([visible(" ".join(str(v).split("\n"))) for v in row] for row in rows),
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
