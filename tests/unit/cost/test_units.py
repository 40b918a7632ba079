"""Cost numbers in human units: the unit chosen, the rounding at its edges, and no ``e-07``."""

from __future__ import annotations

import doctest
import math
import re
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.cost import units
from evalsentry.history.store import History
from tests.models import TRUSTED_YAML
from tests.synthetic import accuracy_mask, record_week

SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")
#: A number that reads as zero ("0.0000"), unlike "0.000017" or the floor "< 0.000001".
ZERO_LOOKING = re.compile(r"(?<![\d.])0\.0+(?!\d)")


def test_docstring_examples_hold() -> None:
    """Every example in the module's docstrings prints what it says."""
    failed, tried = doctest.testmod(units)
    assert tried > 0 and failed == 0


class TestDuration:
    @pytest.mark.parametrize(
        ("seconds", "shown"),
        [
            (0, "0 s"),
            (0.35, "350 ms"),
            (0.0004, "0.4 ms"),
            (1e-9, "< 0.001 ms"),
            (1.2, "1.2 s"),
            (59.4, "59.4 s"),
            (204, "3.4 min"),
            (7560, "2.1 h"),
            (7530, "2.09 h"),
            (360_000, "100 h"),
            (3_600_000, "1,000 h"),
        ],
    )
    def test_picks_the_unit_that_keeps_the_number_readable(
        self, seconds: float, shown: str
    ) -> None:
        """Under a second in ms, under a minute in s, under an hour in min, then hours."""
        assert units.duration(seconds) == shown

    @pytest.mark.parametrize(
        ("seconds", "shown"),
        [(0.9996, "1 s"), (59.97, "1 min"), (3599.9, "1 h"), (999.6 * 3600, "1,000 h")],
    )
    def test_rounding_up_to_the_next_unit_moves_into_it(self, seconds: float, shown: str) -> None:
        """An amount that rounds to the next unit's threshold is shown as 1 of that unit."""
        assert units.duration(seconds) == shown

    @pytest.mark.parametrize("missing", [None, math.nan, math.inf])
    def test_missing_is_not_available(self, missing: float | None) -> None:
        """None, NaN and infinities print n/a."""
        assert units.duration(missing) == "n/a"

    def test_device_hours_are_a_duration(self) -> None:
        """Device time billed in hours reads as a duration; None stays n/a."""
        assert units.device_hours(0.0004) == "1.44 s"
        assert units.device_hours(1.0) == "1 h"
        assert units.device_hours(0.5) == "30 min"
        assert units.device_hours(0) == "0 s"
        assert units.device_hours(None) == "n/a"


class TestEnergy:
    @pytest.mark.parametrize(
        ("kwh", "shown"),
        [
            (0, "0 Wh"),
            (5e-16, "< 0.001 µWh"),
            (5e-10, "0.5 µWh"),
            (1.452e-07, "145 µWh"),
            (1.45e-06, "1.45 mWh"),
            (0.00207, "2.07 Wh"),
            (0.5, "500 Wh"),
            (2.5, "2.5 kWh"),
            (12_345.0, "12,345 kWh"),
        ],
    )
    def test_picks_the_unit_that_keeps_the_number_readable(self, kwh: float, shown: str) -> None:
        """µWh, mWh, Wh, kWh: the number between 1 and 1000, three significant digits."""
        assert units.energy(kwh) == shown

    @pytest.mark.parametrize(
        ("kwh", "shown"),
        [(999.6e-9, "1 mWh"), (999.4e-9, "999 µWh"), (0.9996, "1 kWh"), (999.6, "1,000 kWh")],
    )
    def test_rounding_to_1000_moves_into_the_next_unit(self, kwh: float, shown: str) -> None:
        """What rounds to 1000 of a unit is 1 of the next, never "1e+03" nor "1000" of the same."""
        assert units.energy(kwh) == shown

    def test_negative_keeps_its_sign(self) -> None:
        """A negative amount (a correction) is shown with its sign, in the same units."""
        assert units.energy(-0.002) == "-2 Wh"
        assert units.energy(-5e-16) == "> -0.001 µWh"

    @pytest.mark.parametrize("missing", [None, math.nan])
    def test_missing_is_not_available(self, missing: float | None) -> None:
        """None and NaN print n/a."""
        assert units.energy(missing) == "n/a"

    @pytest.mark.parametrize(
        ("largest", "scale"),
        [
            (2.3e-7, ("µWh", 1e-9)),
            (2.3e-6, ("mWh", 1e-6)),
            (0.5, ("Wh", 1e-3)),
            (0.9996, ("kWh", 1.0)),
            (4000.0, ("kWh", 1.0)),
            (0.0, ("Wh", 1e-3)),
            (math.nan, ("Wh", 1e-3)),
        ],
    )
    def test_scale_for_an_axis_follows_the_largest_amount(
        self, largest: float, scale: tuple[str, float]
    ) -> None:
        """A chart's energy axis takes the unit its largest amount is shown in."""
        assert units.energy_scale(largest) == scale


class TestCarbon:
    @pytest.mark.parametrize(
        ("kg", "shown"),
        [
            (0, "0 g CO2"),
            (1e-20, "< 0.001 µg CO2"),
            (5.809e-08, "58.1 µg CO2"),
            (5.809e-05, "58.1 mg CO2"),
            (0.0123, "12.3 g CO2"),
            (0.9995, "1 kg CO2"),
            (4.2, "4.2 kg CO2"),
            (2500.0, "2,500 kg CO2"),
            (None, "n/a"),
            (math.nan, "n/a"),
        ],
    )
    def test_picks_the_unit_that_keeps_the_number_readable(
        self, kg: float | None, shown: str
    ) -> None:
        """µg, mg, g, kg of CO2, three significant digits; missing is n/a."""
        assert units.carbon(kg) == shown


class TestMoney:
    @pytest.mark.parametrize(
        ("amount", "shown"),
        [
            (0, "0 USD"),
            (4e-9, "< 0.000001 USD"),
            (9.99e-7, "< 0.000001 USD"),
            (0.000001, "0.000001 USD"),
            (0.00001734, "0.000017 USD"),
            (0.005, "0.005 USD"),
            (0.009996, "0.01 USD"),
            (0.0149, "0.01 USD"),
            (3.0, "3.00 USD"),
            (1234.5, "1,234.50 USD"),
            (-0.5, "-0.50 USD"),
            (-3e-9, "> -0.000001 USD"),
            (None, "n/a"),
            (math.nan, "n/a"),
        ],
    )
    def test_cents_above_a_cent_two_digits_below_and_a_floor(
        self, amount: float | None, shown: str
    ) -> None:
        """Two decimals from 0.01 up, two significant digits below, "< 0.000001" under that."""
        assert units.money(amount, "USD") == shown

    @pytest.mark.parametrize("currency", ["", None])
    def test_no_currency_leaves_no_trailing_space(self, currency: str | None) -> None:
        """Without a currency the amount stands alone."""
        assert units.money(0.5, currency) == "0.50"

    @pytest.mark.parametrize(
        "amount", [1e-12, 3.3e-7, 1e-6, 1.2345e-5, 0.00099, 0.0099, 0.01, 0.1, 7.0, 1e9]
    )
    def test_never_scientific_nor_zero_for_a_non_zero_amount(self, amount: float) -> None:
        """No "e-05" and no "0.0000" however small the amount."""
        shown = units.money(amount, "USD")
        assert not SCIENTIFIC.search(shown)
        assert not ZERO_LOOKING.search(shown) and not shown.startswith("0 ")


@pytest.mark.parametrize(
    "value", [1e-300, 1e-18, 3.3e-12, 1.452e-7, 5.809e-8, 0.0004, 0.99999, 999.5, 1e12]
)
def test_no_function_ever_prints_scientific_notation(value: float) -> None:
    """Every unit function prints plain decimals across many orders of magnitude."""
    for shown in (
        units.duration(value),
        units.device_hours(value),
        units.energy(value),
        units.carbon(value),
        units.money(value, "USD"),
        units.count(value),
    ):
        assert not SCIENTIFIC.search(shown), shown
        assert not ZERO_LOOKING.search(shown), shown


def test_cost_command_prints_human_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalsentry cost` on tiny, zero and large bills prints no "e-07" and no "0.0000"."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n" + TRUSTED_YAML)
    history = History(str(tmp_path / "store"))
    for week, model, wall_s, kwh, co2, cost in (
        ("2026-W40", "tiny", 0.4, 1.452e-07, 5.809e-08, 1.7e-05),
        ("2026-W41", "free", 12.0, 0.0, 0.0, 0.0),
        ("2026-W42", "big", 7560.0, 2.5, 1.0, 12.34),
    ):
        record_week(
            history,
            week,
            accuracy_mask(100, 0.9),
            model=model,
            wall_s=wall_s,
            energy_kwh=kwh,
            co2_kg=co2,
            cost=cost,
            currency="USD",
        )
    config = str(tmp_path / "evalsentry.yaml")
    for by in ("week", "model"):
        assert main(["cost", "--config", config, "--by", by]) == 0
        out = capsys.readouterr().out
        assert not SCIENTIFIC.search(out)
        assert not ZERO_LOOKING.search(out)
        for shown in ("400 ms", "145 µWh", "58.1 µg CO2", "0.000017 USD", "0 USD", "2.1 h"):
            assert shown in out
        assert "12.34 USD" in out and "2.5 kWh" in out


def test_weekly_markdown_bills_in_human_units() -> None:
    """The Markdown report's lineage-and-cost row and its bill line use human units."""
    from evalsentry.gate.week import GateReport
    from evalsentry.reports.weekly import weekly_markdown

    row = {
        "evaluation_id": "a",
        "model": "m",
        "version": 1,
        "status": "ok",
        "seed": 0,
        "device": "cpu",
        "examples_per_s": 1200.0,
        "energy_kwh": 1.452e-07,
        "co2_kg": 5.809e-08,
        "cost": 1.7e-05,
        "currency": "USD",
    }
    failed = {
        **row,
        "evaluation_id": "b",
        "status": "error",
        "error": "boom",
        "energy_kwh": None,
        "co2_kg": None,
    }
    text = weekly_markdown(GateReport("2026-W41", []), [row, {**failed, "cost": None}], [], {})
    assert "| 145 µWh | 58.1 µg CO2 | 0.000017 USD |" in text
    assert "| n/a | n/a | n/a |" in text
    assert "**This week's bill:** 0.000017 USD, 145 µWh." in text
    assert not SCIENTIFIC.search(text) and not ZERO_LOOKING.search(text)
