"""The report's hand-written SVG charts: round ticks, plain numbers, gaps, escaped text."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest

from evalsentry.reports.svg import MAX_LABELS, WeekChart, nice_ticks, tick_text

WEEKS = [f"2026-W{w:02d}" for w in range(40, 46)]


@pytest.mark.parametrize(
    ("low", "high"),
    [(0.9138, 0.9805), (0.0, 3.2e-6), (0.0, 760.0), (5.0, 5.0), (-0.2, 0.3), (0.0, 0.0)],
)
def test_ticks_are_round_steps_that_cover_the_values(low: float, high: float) -> None:
    ticks = nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and 3 <= len(ticks) <= 12
    steps = {round(b - a, 12) for a, b in itertools.pairwise(ticks)}
    assert len({round(s / min(steps), 6) for s in steps}) == 1  # evenly spaced
    step = min(steps)
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5))


def test_tick_labels_are_plain_decimals_never_exponents() -> None:
    ticks = nice_ticks(0.0, 3.2e-6)
    labels = [tick_text(t, ticks[1] - ticks[0]) for t in ticks]
    assert labels[:2] == ["0.000000", "0.000001"] and not any("e" in x for x in labels)
    assert tick_text(0.975, 0.025) == "0.975" and tick_text(400.0, 200.0) == "400"


def test_a_chart_is_one_svg_element_with_every_shape_and_escaped_text() -> None:
    chart = WeekChart(WEEKS, "<accuracy> & more")
    chart.band([0.8] * 6, [0.9] * 6, "#90a4ae", "95% CI")
    chart.line([0.85, 0.86, math.nan, 0.84, 0.83, 0.8], "#37474f", "accuracy")
    chart.level(0.85, "#1565c0", "baseline 2026-W40")
    chart.divider(3, "v2")
    chart.mark(5, 0.8, "#c62828", cross=True)
    svg = chart.render()
    root = ET.fromstring(svg)  # well-formed XML, as a browser needs inline
    assert root.tag.endswith("svg") and "&lt;accuracy&gt; &amp; more" in svg
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert [t for t in texts if t and t[0] == "W"] == ["W40", "W41", "W42", "W43", "W44", "W45"]
    assert {"95% CI", "accuracy", "baseline 2026-W40", "v2"} <= set(texts)
    lines = [p.get("d") for p in root.iter("{http://www.w3.org/2000/svg}path")]
    drawn = [d for d in lines if d and d.count("L") >= 1 and not d.endswith("Z")]
    assert len(drawn) == 2  # the NaN week breaks the line in two runs (2 and 3 weeks)


def test_a_long_history_labels_every_other_week() -> None:
    weeks = [f"2025-W{w:02d}" for w in range(1, 53)] + [f"2026-W{w:02d}" for w in range(1, 30)]
    chart = WeekChart(weeks, "cost per week")
    chart.bars([1.0] * len(weeks), "#5c6bc0", "money (USD)")
    labels = re.findall(r">(W\d\d)</text>", chart.render())
    assert len(labels) <= MAX_LABELS and labels[:2] == ["W01", "W05"]


def test_stacked_bars_start_where_the_part_below_ends() -> None:
    chart = WeekChart(WEEKS[:2], "the bill per week, by part")
    chart.bars([2.0, 1.0], "#8e24aa", "training")
    chart.bars([1.0, 1.0], "#26a69a", "evaluation", bottom=[2.0, 1.0])
    rects = re.findall(
        r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" fill="(#\w+)"/>',
        chart.render(),
    )
    bars = [(float(y), float(h), c) for y, h, c in rects if float(y) < 250]  # not the legend's
    training = [(y, h) for y, h, c in bars if c == "#8e24aa"]
    evaluation = [(y, h) for y, h, c in bars if c == "#26a69a"]
    assert len(training) == 2 and len(evaluation) == 2
    for (ty, _), (ey, eh) in zip(training, evaluation, strict=True):
        assert ey + eh == pytest.approx(ty, abs=0.2)  # each evaluation bar sits on its training bar


def test_a_missing_value_draws_no_mark_and_no_baseline() -> None:
    chart = WeekChart(WEEKS[:2], "accuracy")
    chart.line([0.9, math.nan], "#37474f", "accuracy")
    chart.level(math.nan, "#1565c0", "baseline 2026-W40")
    chart.mark(1, math.nan, "#c62828", cross=True)
    svg = chart.render()
    ET.fromstring(svg)
    assert "nan" not in svg.lower()
