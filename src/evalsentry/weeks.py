"""ISO weeks: the unit a history is kept, gated and reported in (``2026-W49``).

Weeks are checked strictly (ASCII digits, a year within ``WEEK_YEARS``, a week the year has)
and ordered as the dates of their Mondays, never as strings.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from evalsentry.errors import InvalidName, UsageError

log = logging.getLogger(__name__)

# [0-9], not \d: in Python \d also matches full-width and other Unicode digits.
_WEEK = re.compile(r"([0-9]{4})-W([0-9]{2})")
_WEEK_FORM = "use the ISO week form YYYY-Www with ASCII digits, e.g. 2026-W49"
# Weeks are sorted and compared as dates, and the latest recorded one is gated by default: a
# typo such as 0202-W10 or 2206-W10 would silently become the baseline or the latest week for
# ever. No evaluation of a PyTorch model predates 2000, and 2199 leaves two centuries of room.
WEEK_YEARS = (2000, 2199)


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


def check_begun(week: str, now: datetime | None = None) -> str:
    """``week`` if it is valid and has begun (by UTC): results are recorded in or after a week.

    Raises:
        InvalidName: see ``check_week``.
        UsageError: a later week than the current one; nothing of it can have run yet.
    """
    current = iso_week(now)
    if week_start(week) > week_start(current):
        raise UsageError(
            f"week {week} has not begun (it is {current} now, UTC); record a week during or "
            "after it"
        )
    return week


#: The most weeks one backfill runs: five years, one after another.
MAX_SPAN_WEEKS = 260


def week_span(text: str, now: datetime | None = None) -> list[str]:
    """``2026-W40..2026-W44`` as its weeks, in order, both ends included.

    Raises:
        InvalidName: an end that is not a week.
        UsageError: not ``FROM..TO``, TO before FROM, TO not begun, or more than
            ``MAX_SPAN_WEEKS`` weeks.
    """
    first, sep, last = text.partition("..")
    if not sep:
        raise UsageError(f"weeks {text!r}: give FROM..TO, e.g. 2026-W40..2026-W44")
    start, end = week_start(first.strip()), week_start(check_begun(last.strip(), now))
    if start > end:
        raise UsageError(
            f"weeks {text!r}: {last.strip()} comes before {first.strip()}; give FROM..TO"
        )
    count = (end - start).days // 7 + 1
    if count > MAX_SPAN_WEEKS:
        raise UsageError(
            f"weeks {text!r}: {count} weeks, more than {MAX_SPAN_WEEKS}; backfill in parts"
        )
    days = (start + timedelta(weeks=k) for k in range(count))
    return [f"{d.isocalendar().year}-W{d.isocalendar().week:02d}" for d in days]


def is_aware_timestamp(stamp: str) -> bool:
    """Whether ``stamp`` is an ISO 8601 timestamp that names its timezone."""
    try:
        return datetime.fromisoformat(stamp).tzinfo is not None
    except ValueError:
        return False


def now_utc() -> datetime:
    """The current time, timezone-aware."""
    return datetime.now(UTC)


def iso_week(moment: datetime | None = None) -> str:
    """The ISO week of ``moment`` (default now), like ``2026-W49``."""
    year, week, _ = (moment or now_utc()).isocalendar()
    return check_week(f"{year}-W{week:02d}")


def weeks_in_order(weeks: Iterable[object]) -> list[str]:
    """The distinct valid weeks among ``weeks``, oldest first, ordered as dates.

    A week string that is not a valid ISO week (written before weeks were checked strictly,
    e.g. with full-width digits) is left out with a warning, never picked as the latest.
    """
    valid: dict[str, date] = {}
    for week in {str(w) for w in weeks}:
        try:
            valid[week] = week_start(week)
        except InvalidName as exc:
            log.warning("history: ignoring a row of an invalid week (%s)", exc)
    return sorted(valid, key=valid.__getitem__)


def weeks_up_to(weeks: Iterable[object], week: str) -> list[str]:
    """The valid weeks among ``weeks`` up to and including ``week``, oldest first.

    What a report of ``week`` shows: it reads as it did then, whatever weeks came after.
    """
    end = week_start(week)
    return [w for w in weeks_in_order(weeks) if week_start(w) <= end]


def latest_week(weeks: Iterable[object]) -> str | None:
    """The latest valid week among ``weeks`` (compared as dates), or None when there is none."""
    ordered = weeks_in_order(weeks)
    return ordered[-1] if ordered else None
