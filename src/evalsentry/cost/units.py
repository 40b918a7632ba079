"""Cost numbers in units people read: durations, energy, carbon and money, never ``1.452e-07``.

Each function picks the unit that puts the number between 1 and 1000 where it can and shows
three significant digits; the largest unit takes larger numbers whole, with thousands
separators, and the smallest one takes smaller numbers in plain decimals down to a floor. A
missing amount (None or NaN, or an infinity, which no bill holds) prints ``n/a``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MISSING = "n/a"
SIGNIFICANT = 3
SMALLEST_SHOWN = 0.001  # of the smallest unit; below it, "< 0.001 µWh"
MONEY_FLOOR = 0.000001  # below it, "< 0.000001 USD"
MONEY_CENTS = 0.01  # from here up, two decimals; below, two significant digits
MONEY_SIGNIFICANT = 2
#: A month of serving at a declared daily traffic: the mean month of the Gregorian year.
DAYS_PER_MONTH = 365.25 / 12

#: (suffix, size in the base unit, first number that belongs to the next unit), smallest first.
Scale = Sequence[tuple[str, float, float]]
DURATION: Scale = (
    ("ms", 0.001, 1000),
    ("s", 1.0, 60),
    ("min", 60.0, 60),
    ("h", 3600.0, math.inf),
)
ENERGY: Scale = (  # base unit kWh
    ("µWh", 1e-9, 1000),
    ("mWh", 1e-6, 1000),
    ("Wh", 1e-3, 1000),
    ("kWh", 1.0, math.inf),
)
CARBON: Scale = (  # base unit kg
    ("µg", 1e-9, 1000),
    ("mg", 1e-6, 1000),
    ("g", 1e-3, 1000),
    ("kg", 1.0, math.inf),
)


def _round_significant(value: float, digits: int) -> float:
    """``value`` (> 0) rounded to ``digits`` significant digits."""
    return round(value, digits - 1 - math.floor(math.log10(value)))


def _plain(value: float, digits: int) -> str:
    """``value`` (> 0, < 10 ** digits) to ``digits`` significant digits in plain decimals."""
    rounded = _round_significant(value, digits)
    decimals = max(digits - 1 - math.floor(math.log10(rounded)), 0)
    text = f"{rounded:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _unit(size: float, scale: Scale) -> tuple[str, float, float]:
    """The suffix, size and number of the unit of ``scale`` that suits ``size`` (> 0)."""
    for index, (suffix, unit, limit) in enumerate(scale):
        # Past the smallest unit the amount rounded up to at least 1 of this one (59.97 s: 1 min).
        number = size / unit if index == 0 else max(size / unit, 1.0)
        if _round_significant(number, SIGNIFICANT) < limit:
            return suffix, unit, number
    raise AssertionError("the largest unit of a scale takes any amount")  # pragma: no cover


def _scaled(value: float | None, scale: Scale, zero: str, tail: str = "") -> str:
    """``value`` in the base unit of ``scale``, shown in the unit that suits its size."""
    if value is None or not math.isfinite(value):
        return MISSING
    if value == 0:
        return f"0 {zero}{tail}"
    sign, size = ("-" if value < 0 else ""), abs(float(value))
    suffix, _, number = _unit(size, scale)
    if number < SMALLEST_SHOWN:  # only in the smallest unit
        text = f"{'> -' if sign else '< '}{SMALLEST_SHOWN:g}"
    elif number >= 10**SIGNIFICANT:  # only in the largest unit: whole, every digit kept
        text = f"{sign}{number:,.0f}"
    else:
        text = sign + _plain(number, SIGNIFICANT)
    return f"{text} {suffix}{tail}"


def duration(seconds: float | None) -> str:
    """A length of time in ms, s, min or h.

    Examples:
        >>> duration(0.35), duration(1.2), duration(59.97), duration(204), duration(7560)
        ('350 ms', '1.2 s', '1 min', '3.4 min', '2.1 h')
        >>> duration(0), duration(None), duration(3_600_000)
        ('0 s', 'n/a', '1,000 h')
    """
    return _scaled(seconds, DURATION, "s")


def device_hours(hours: float | None) -> str:
    """Device time billed in hours, shown as a duration.

    Examples:
        >>> device_hours(0.0004), device_hours(1.0), device_hours(None)
        ('1.44 s', '1 h', 'n/a')
    """
    return duration(None if hours is None else hours * 3600)


def energy(kwh: float | None) -> str:
    """Energy given in kWh, shown in µWh, mWh, Wh or kWh.

    Examples:
        >>> energy(1.452e-07), energy(1.45e-06), energy(0.00207), energy(0.9996), energy(12345)
        ('145 µWh', '1.45 mWh', '2.07 Wh', '1 kWh', '12,345 kWh')
        >>> energy(0), energy(5e-16), energy(float("nan"))
        ('0 Wh', '< 0.001 µWh', 'n/a')
    """
    return _scaled(kwh, ENERGY, "Wh")


def carbon(kg: float | None) -> str:
    """CO2 given in kg, shown in µg, mg, g or kg.

    Examples:
        >>> carbon(5.809e-08), carbon(5.809e-05), carbon(0.0123), carbon(4.2), carbon(0)
        ('58.1 µg CO2', '58.1 mg CO2', '12.3 g CO2', '4.2 kg CO2', '0 g CO2')
    """
    return _scaled(kg, CARBON, "g", " CO2")


def money(amount: float | None, currency: str | None = "") -> str:
    """An amount of money: two decimals from 0.01 up, two significant digits below, then a floor.

    Examples:
        >>> money(1234.5, "USD"), money(0.0149, "USD"), money(0.00001734, "USD")
        ('1,234.50 USD', '0.01 USD', '0.000017 USD')
        >>> money(0, "EUR"), money(4e-9, "USD"), money(None, "USD"), money(0.5)
        ('0 EUR', '< 0.000001 USD', 'n/a', '0.50')
    """
    if amount is None or not math.isfinite(amount):
        return MISSING
    value = float(amount)
    sign, size = ("-" if value < 0 else ""), abs(value)
    if size == 0:
        text = "0"
    elif size < MONEY_FLOOR:
        text = f"{'> -' if sign else '< '}{MONEY_FLOOR:f}"
    elif _round_significant(size, MONEY_SIGNIFICANT) < MONEY_CENTS:
        text = sign + _plain(size, MONEY_SIGNIFICANT)
    else:
        text = f"{sign}{size:,.2f}"
    return f"{text} {currency or ''}".rstrip()


def count(number: float | None) -> str:
    """A count (tokens, tokens per second): whole with thousands separators, or 3 digits below 100.

    Examples:
        >>> count(1_234_567), count(843.4), count(70), count(2.345), count(0), count(None)
        ('1,234,567', '843', '70', '2.35', '0', 'n/a')
    """
    if number is None or not math.isfinite(number):
        return MISSING
    if number == 0 or abs(number) >= 100:
        return f"{number:,.0f}"
    return ("-" if number < 0 else "") + _plain(abs(float(number)), SIGNIFICANT)


def energy_scale(largest_kwh: float) -> tuple[str, float]:
    """The energy unit for a set of amounts whose largest is ``largest_kwh``, and its size in kWh.

    For a chart axis: divide the amounts by the size and label the axis with the unit.

    Examples:
        >>> energy_scale(2.3e-06), energy_scale(0.5), energy_scale(0.9996), energy_scale(0)
        (('mWh', 1e-06), ('Wh', 0.001), ('kWh', 1.0), ('Wh', 0.001))
    """
    if not math.isfinite(largest_kwh) or largest_kwh <= 0:
        return "Wh", 1e-3
    suffix, unit, _ = _unit(largest_kwh, ENERGY)
    return suffix, unit
