"""Strict ISO weeks: ASCII digits, real weeks, plausible years, and "latest" meaning latest in time."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.errors import InvalidName, UsageError
from evalsentry.history.store import History
from evalsentry.weeks import check_begun, check_week, iso_week, now_utc, week_span, week_start
from tests.models import TRUSTED_YAML
from tests.synthetic import accuracy_mask, record_week

N = 1000  # enough examples to show that an unchanged model is within a 1-point tolerance
# "2026" in full-width digits: Python's \d (and int()) accept them, a string sort puts them last.
FULL_WIDTH_2026 = "\uff12\uff10\uff12\uff16"
REFUSED = [
    f"{FULL_WIDTH_2026}-W10",
    "2027-W53",  # 2027 has 52 ISO weeks
    "0000-W01",  # no year 0, and outside 2000-2199
    "1999-W10",
    "2200-W01",
    "2026-W00",
    "2026-W1",
    "2026-w10",
    "2026-W10\n",
    "49",
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose config points at its own store."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n" + TRUSTED_YAML)
    return tmp_path


def cli(project: Path, *args: str) -> int:
    """Run the CLI with the project's config; the exit code."""
    return main([*args, "--config", str(project / "evalsentry.yaml")])


class TestCheckWeek:
    @pytest.mark.parametrize("week", REFUSED)
    def test_refused(self, week: str) -> None:
        """Anything but a real ISO week in ASCII digits within 2000-2199 is refused."""
        with pytest.raises(InvalidName, match="YYYY-Www with ASCII digits"):
            check_week(week)

    @pytest.mark.parametrize("week", ["2026-W53", "2020-W53", "2026-W01", "2000-W01", "2199-W52"])
    def test_accepted(self, week: str) -> None:
        """Real ISO weeks pass, week 53 included in the years that have one."""
        assert check_week(week) == week

    def test_week_53_follows_the_calendar(self) -> None:
        """Week 53 is accepted exactly where the calendar has it (2026 yes, 2027 no)."""
        assert week_start("2026-W53") == date.fromisocalendar(2026, 53, 1) == date(2026, 12, 28)
        with pytest.raises(ValueError):
            date.fromisocalendar(2027, 53, 1)
        with pytest.raises(InvalidName, match="2027 has ISO weeks 01 to 52"):
            check_week("2027-W53")


class TestWeekBegun:
    def test_a_week_is_recorded_from_its_first_moment_never_before(self) -> None:
        """Sunday 23:59 UTC of 2026-W49 refuses 2026-W50; its Monday 00:00 accepts it."""
        sunday = datetime(2026, 12, 6, 23, 59, tzinfo=UTC)
        with pytest.raises(UsageError) as refused:
            check_begun("2026-W50", now=sunday)
        assert str(refused.value) == (
            "week 2026-W50 has not begun (it is 2026-W49 now, UTC); record a week during or "
            "after it"
        )
        assert check_begun("2026-W50", now=sunday + timedelta(minutes=1)) == "2026-W50"
        assert check_begun("2026-W10", now=sunday) == "2026-W10"
        with pytest.raises(InvalidName):
            check_begun("2026-50", now=sunday)

    def test_run_refuses_a_week_not_begun_in_one_line(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`evalsentry run --week` of next week: exit 2 before any Prefect server starts."""
        next_week = iso_week(now_utc() + timedelta(days=7))
        assert main(["run", "--week", next_week, "--config", str(project / "evalsentry.yaml")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: week {next_week} has not begun") and err.count("\n") == 1


class TestWeekSpan:
    def test_a_span_lists_its_weeks_in_order_across_a_53_week_year(self) -> None:
        """2026 has 53 ISO weeks: W52..2027-W02 is four weeks."""
        later = datetime(2027, 2, 1, tzinfo=UTC)
        assert week_span("2026-W52..2027-W02", now=later) == [
            "2026-W52",
            "2026-W53",
            "2027-W01",
            "2027-W02",
        ]
        assert week_span("2026-W40..2026-W40", now=later) == ["2026-W40"]

    @pytest.mark.parametrize(
        ("span", "words"),
        [
            ("2026-W40", "give FROM..TO"),
            ("2026-W44..2026-W40", "2026-W40 comes before 2026-W44"),
            ("2000-W01..2026-W40", "more than 260; backfill in parts"),
            ("2026-W40..{next}", "week {next} has not begun"),  # next week, whenever it runs
        ],
    )
    def test_a_bad_span_is_one_line_exit_2(
        self, project: Path, capsys: pytest.CaptureFixture[str], span: str, words: str
    ) -> None:
        """`evalsentry backfill` refuses before any Prefect server starts."""
        next_week = iso_week(now_utc() + timedelta(days=7))
        span, words = span.format(next=next_week), words.format(next=next_week)
        assert cli(project, "backfill", span) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1


class TestCommandLine:
    @pytest.mark.parametrize("week", [f"{FULL_WIDTH_2026}-W10", "2027-W53", "0000-W01"])
    @pytest.mark.parametrize(
        "command", [["run"], ["gate"], ["baseline", "set", "--model", "m"], ["report"]]
    )
    def test_bad_week_exits_2_with_one_line(
        self, project: Path, capsys: pytest.CaptureFixture[str], command: list[str], week: str
    ) -> None:
        """Every command taking --week refuses a bad one with exit 2 and one line, no traceback."""
        record_week(History(str(project / "store")), "2026-W10", accuracy_mask(N, 0.9))
        argv = [*command, "--week", week]
        code = main(argv) if command == ["run"] else cli(project, *argv)
        err = capsys.readouterr().err
        assert code == 2
        assert err.startswith(f"error: invalid week name {week!r}") and err.count("\n") == 1

    def test_week_53_of_2026_is_gated(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """2026-W53 exists, so it can be recorded, gated and pinned as a baseline."""
        history = History(str(project / "store"))
        record_week(history, "2026-W52", accuracy_mask(N, 0.9))
        record_week(history, "2026-W53", accuracy_mask(N, 0.9))
        assert cli(project, "gate", "--week", "2026-W53") == 0
        assert "evalsentry gate 2026-W53: PASS" in capsys.readouterr().out
        assert cli(project, "baseline", "set", "--model", "m", "--week", "2026-W53") == 0


class TestLatestWeek:
    @pytest.mark.parametrize(
        ("weeks", "latest"),
        [
            (["2026-W09", "2025-W52", "2026-W10"], "2026-W10"),
            (["2025-W52", "2026-W01"], "2026-W01"),  # the year boundary
            (["2026-W53", "2027-W01", "2026-W52"], "2027-W01"),
        ],
    )
    def test_gate_without_a_week_gates_the_latest_in_time(
        self, project: Path, capsys: pytest.CaptureFixture[str], weeks: list[str], latest: str
    ) -> None:
        """`gate` with no --week gates the latest recorded week, by date, across year ends."""
        history = History(str(project / "store"))
        for week in weeks:
            record_week(history, week, accuracy_mask(N, 0.9))
        assert cli(project, "gate") == 0
        assert f"evalsentry gate {latest}:" in capsys.readouterr().out

    def test_an_invalid_week_left_in_the_history_is_never_the_latest(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A full-width week written before weeks were checked (a larger string) is not picked."""
        history = History(str(project / "store"))
        record_week(history, "2026-W09", accuracy_mask(N, 0.9))
        record_week(history, "2026-W10", accuracy_mask(N, 0.9))
        invalid = f"{FULL_WIDTH_2026}-W11"
        record_week(history, invalid, accuracy_mask(N, 0.5))
        assert max(["2026-W10", invalid]) == invalid  # what the string max picked
        assert cli(project, "gate") == 0
        assert "evalsentry gate 2026-W10: PASS" in capsys.readouterr().out
