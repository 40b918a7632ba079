"""The commands' plain-text tables: aligned as a terminal draws them, one line a row."""

from __future__ import annotations

import pytest

from evalsentry.cli.output import _width, print_table


def test_columns_align_where_a_terminal_draws_them(capsys: pytest.CaptureFixture[str]) -> None:
    """Emoji take two columns (with or without a variation selector): the next column lines up."""
    print_table("t", ["verdict", "model"], [["✅ PASS", "a"], ["⚠️ WARN", "b"], ["FAIL", "c"]])
    title, header, rule, *rows = capsys.readouterr().out.splitlines()
    assert (title, rule) == ("t", "-------  -----")
    starts = {_width(row[: row.index(name)]) for row, name in zip(rows, "abc", strict=True)}
    assert starts == {_width(header[: header.index("model")])} == {9}


def test_a_line_break_in_a_value_stays_in_its_row(capsys: pytest.CaptureFixture[str]) -> None:
    print_table("t", ["a", "b"], [["two\nlines", 1]])
    assert capsys.readouterr().out.splitlines()[3] == "two lines  1"
