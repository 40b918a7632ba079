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


def test_control_characters_from_the_data_are_shown_not_obeyed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A slice value holding ESC or NUL prints as its escape: no colour, no cursor move."""
    print_table("t", ["slice", "n"], [["\x1b[31mred\x1b[0m", 1], ["nul\x00here", 2]])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x00" not in out
    assert "\\x1b[31mred\\x1b[0m" in out and "nul\\x00here" in out
