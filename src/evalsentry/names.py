"""Validation of user-supplied names that become parts of storage paths."""

from __future__ import annotations

import re
from datetime import date

from evalsentry.errors import InvalidName

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# [0-9], not \d: in Python \d also matches full-width and other Unicode digits.
_WEEK = re.compile(r"([0-9]{4})-W([0-9]{2})")
_WEEK_FORM = "use the ISO week form YYYY-Www with ASCII digits, e.g. 2026-W49"
# Weeks are sorted and compared as dates, and the latest recorded one is gated by default: a
# typo such as 0202-W10 or 2206-W10 would silently become the baseline or the latest week for
# ever. No evaluation of a PyTorch model predates 2000, and 2199 leaves two centuries of room.
WEEK_YEARS = (2000, 2199)
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


def week_start(week: str) -> date:
    """The Monday that starts the ISO week ``week`` (``2026-W49``); weeks order as these dates.

    Raises:
        InvalidName: not ``YYYY-Www`` in ASCII digits, a year outside ``WEEK_YEARS``, or a week
            the year does not have (week 53 exists only in years with 53 ISO weeks).
    """
    match = _WEEK.fullmatch(week) if isinstance(week, str) else None
    if match is None:
        raise InvalidName("week", str(week), _WEEK_FORM)
    year, number = int(match.group(1)), int(match.group(2))
    low, high = WEEK_YEARS
    if not low <= year <= high:
        raise InvalidName("week", week, f"year {year:04d} is outside {low}-{high}; {_WEEK_FORM}")
    weeks_in_year = date(year, 12, 28).isocalendar().week  # 28 December is always in the last week
    if not 1 <= number <= weeks_in_year:
        raise InvalidName("week", week, f"{year} has ISO weeks 01 to {weeks_in_year}; {_WEEK_FORM}")
    return date.fromisocalendar(year, number, 1)


def check_week(week: str) -> str:
    """Return an ISO week like ``2026-W49`` if valid (see ``week_start``), else raise ``InvalidName``."""
    week_start(week)
    return week
