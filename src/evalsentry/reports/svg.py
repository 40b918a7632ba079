"""The report's charts as plain SVG: weeks along x, one or two y axes, lines, bands and bars.

Written by hand because a chart is a few dozen shapes: matplotlib took 80-130 ms to lay out and
write each one (a five-line report draws seventeen), this takes well under a millisecond, and
the page's own font draws the text. Values that are NaN are left out (a line breaks there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH = 600
LEFT, TOP, BOTTOM = 72, 30, 70  # the bottom holds the week labels and the legend
RIGHT_PLAIN, RIGHT_AXIS = 16, 72
FONT = 'font-family="sans-serif"'
GRID, INK, MUTED = "#e0e0e0", "#37474f", "#616161"
#: At most this many week labels along x; a longer history labels every other (third, ...) week.
MAX_LABELS = 26


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = 0.0, 1.0
    if high <= low:
        pad = abs(low) * 0.05 or 0.5
        low, high = low - pad, high + pad
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(s * power for s in (1, 2, 2.5, 5, 10) if s * power >= raw * (1 - 1e-9))
    first = math.floor(low / step + 1e-9) * step
    ticks = [first]
    while ticks[-1] < high - step * 1e-9:
        ticks.append(first + len(ticks) * step)
    return ticks


def tick_text(value: float, step: float) -> str:
    """A tick's label in plain decimals, as many as the step needs (never ``1e-05``)."""
    decimals = 0
    while decimals < 12 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return f"{value:.{decimals}f}"


@dataclass
class _Axis:
    """The values drawn against one y axis, and its label."""

    label: str = ""
    values: list[float] = field(default_factory=list)

    def ticks(self) -> list[float]:
        finite = [v for v in self.values if math.isfinite(v)]
        return nice_ticks(min(finite, default=0.0), max(finite, default=1.0))


@dataclass
class WeekChart:
    """A chart over ``weeks`` (ISO week strings), drawn in the order shapes are added."""

    weeks: Sequence[str]
    title: str
    height: int = 300
    left: _Axis = field(default_factory=_Axis)
    right: _Axis | None = None
    _shapes: list[tuple[str, str, tuple[object, ...]]] = field(default_factory=list)
    _legend: list[tuple[str, str, str]] = field(default_factory=list)  # label, colour, kind

    def _axis(self, side: str) -> _Axis:
        if side == "right":
            self.right = self.right or _Axis()
            return self.right
        return self.left

    def _add(self, kind: str, side: str, values: Sequence[float], *args: object) -> None:
        self._axis(side).values.extend(float(v) for v in values)
        self._shapes.append((kind, side, args))

    def line(
        self, values: Sequence[float], colour: str, label: str = "", *, side: str = "left"
    ) -> None:
        """A line through each week's value with a small dot at each."""
        self._add("line", side, values, [float(v) for v in values], colour)
        if label:
            self._legend.append((label, colour, "line"))

    def band(self, low: Sequence[float], high: Sequence[float], colour: str, label: str) -> None:
        """A shaded band between two series (an interval)."""
        self._add(
            "band", "left", [*low, *high], [float(v) for v in low], [float(v) for v in high], colour
        )
        self._legend.append((label, colour, "band"))

    def level(self, value: float, colour: str, label: str) -> None:
        """A dotted horizontal line at ``value`` (a baseline)."""
        self._add("level", "left", [value], float(value), colour)
        self._legend.append((label, colour, "line"))

    def divider(self, week_index: int, text: str) -> None:
        """A dashed vertical line just before ``week_index``, labelled at the top (a new version)."""
        self._shapes.append(("divider", "left", (week_index, text)))

    def mark(self, week_index: int, value: float, colour: str, *, cross: bool) -> None:
        """A verdict's marker on a week's value: a cross, or a filled circle."""
        self._add("mark", "left", [value], week_index, float(value), colour, cross)

    def bars(
        self,
        values: Sequence[float],
        colour: str,
        label: str,
        *,
        bottom: Sequence[float] | None = None,
        side: str = "left",
    ) -> None:
        """A bar per week from ``bottom`` (default 0) up by ``values`` (stacked when given)."""
        base = [float(b) for b in bottom] if bottom is not None else [0.0] * len(values)
        tops = [b + float(v) for b, v in zip(base, values, strict=True)]
        self._add("bars", side, [0.0, *tops], base, tops, colour)
        self._legend.append((label, colour, "bar"))

    def label_axis(self, side: str, label: str) -> None:
        """Name the left or right axis (its unit)."""
        self._axis(side).label = label

    def render(self) -> str:
        """The chart as one ``<svg>`` element."""
        return _Canvas(self).draw()


class _Canvas:
    """Places a :class:`WeekChart`'s shapes in pixels."""

    def __init__(self, chart: WeekChart) -> None:
        self.chart = chart
        self.right = RIGHT_AXIS if chart.right is not None else RIGHT_PLAIN
        self.plot_w = WIDTH - LEFT - self.right
        self.plot_h = chart.height - TOP - BOTTOM
        self.ticks = {"left": chart.left.ticks()}
        if chart.right is not None:
            self.ticks["right"] = chart.right.ticks()

    def x(self, index: float) -> float:
        return LEFT + (index + 0.5) * self.plot_w / max(len(self.chart.weeks), 1)

    def y(self, value: float, side: str) -> float:
        ticks = self.ticks[side]
        low, high = ticks[0], ticks[-1]
        return TOP + self.plot_h * (1 - (value - low) / ((high - low) or 1.0))

    def draw(self) -> str:
        chart = self.chart
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{chart.height}" '
            f'viewBox="0 0 {WIDTH} {chart.height}" {FONT} font-size="12">',
            f'<rect width="{WIDTH}" height="{chart.height}" fill="#ffffff"/>',
            f'<text x="{WIDTH / 2:.1f}" y="18" text-anchor="middle" font-size="15" '
            f'fill="{INK}">{escape(chart.title)}</text>',
            *self._axes(),
        ]
        for kind, side, args in chart._shapes:
            parts.extend(getattr(self, f"_{kind}")(side, *args))
        parts.extend(self._legend())
        parts.append("</svg>")
        return "".join(parts)

    def _axes(self) -> list[str]:
        out: list[str] = []
        for side, ticks in self.ticks.items():
            step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
            edge = LEFT if side == "left" else WIDTH - self.right
            anchor, dx = ("end", -5) if side == "left" else ("start", 5)
            for tick in ticks:
                y = self.y(tick, side)
                if side == "left":
                    out.append(f'<path d="M{LEFT} {y:.1f}H{WIDTH - self.right}" stroke="{GRID}"/>')
                out.append(
                    f'<text x="{edge + dx}" y="{y + 3:.1f}" text-anchor="{anchor}" '
                    f'fill="{MUTED}">{tick_text(tick, step)}</text>'
                )
            label = (self.chart.left if side == "left" else self.chart.right or _Axis()).label
            if label:
                x = 12 if side == "left" else WIDTH - 8
                y = TOP + self.plot_h / 2
                out.append(
                    f'<text transform="translate({x} {y:.1f}) rotate(-90)" text-anchor="middle" '
                    f'fill="{MUTED}">{escape(label)}</text>'
                )
        bottom = TOP + self.plot_h
        out.append(
            f'<path d="M{LEFT} {TOP}V{bottom}H{WIDTH - self.right}" stroke="{MUTED}" fill="none"/>'
        )
        every = math.ceil(len(self.chart.weeks) / MAX_LABELS) or 1
        for i, week in enumerate(self.chart.weeks):
            if i % every == 0:
                out.append(
                    f'<text transform="translate({self.x(i):.1f} {bottom + 10}) rotate(-45)" '
                    f'text-anchor="end" font-size="11" fill="{MUTED}">'
                    f"{escape(str(week).split('-', 1)[-1])}</text>"
                )
        return out

    def _points(self, values: Sequence[float], side: str) -> list[list[tuple[float, float]]]:
        """The finite values as runs of (x, y) points; a NaN breaks a run."""
        runs: list[list[tuple[float, float]]] = [[]]
        for i, value in enumerate(values):
            if math.isfinite(value):
                runs[-1].append((self.x(i), self.y(value, side)))
            elif runs[-1]:
                runs.append([])
        return [run for run in runs if run]

    def _line(self, side: str, values: list[float], colour: str) -> list[str]:
        out = []
        for run in self._points(values, side):
            path = "M" + "L".join(f"{x:.1f} {y:.1f}" for x, y in run)
            out.append(f'<path d="{path}" stroke="{colour}" stroke-width="1.5" fill="none"/>')
            out.extend(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>' for x, y in run
            )
        return out

    def _band(self, side: str, low: list[float], high: list[float], colour: str) -> list[str]:
        keep = [i for i, (a, b) in enumerate(zip(low, high, strict=True)) if math.isfinite(a + b)]
        if not keep:
            return []
        upper = [(self.x(i), self.y(high[i], side)) for i in keep]
        lower = [(self.x(i), self.y(low[i], side)) for i in reversed(keep)]
        path = "M" + "L".join(f"{x:.1f} {y:.1f}" for x, y in upper + lower) + "Z"
        return [f'<path d="{path}" fill="{colour}" fill-opacity="0.35" stroke="none"/>']

    def _level(self, side: str, value: float, colour: str) -> list[str]:
        if not math.isfinite(value):
            return []
        y = self.y(value, side)
        return [
            f'<path d="M{LEFT} {y:.1f}H{WIDTH - self.right}" stroke="{colour}" '
            'stroke-dasharray="2 3" stroke-width="1.2"/>'
        ]

    def _divider(self, _side: str, index: int, text: str) -> list[str]:
        x = self.x(index - 0.5)
        return [
            f'<path d="M{x:.1f} {TOP}V{TOP + self.plot_h}" stroke="#9e9e9e" stroke-dasharray="4 3"/>',
            f'<text x="{x + 3:.1f}" y="{TOP + 10}" font-size="11" fill="{MUTED}">{escape(text)}</text>',
        ]

    def _mark(self, side: str, index: int, value: float, colour: str, cross: bool) -> list[str]:
        if not math.isfinite(value):
            return []
        x, y = self.x(index), self.y(value, side)
        if cross:
            d = f"M{x - 5:.1f} {y - 5:.1f}l10 10m0 -10l-10 10"
            return [f'<path d="{d}" stroke="{colour}" stroke-width="3"/>']
        return [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"/>']

    def _bars(self, side: str, base: list[float], tops: list[float], colour: str) -> list[str]:
        width = 0.6 * self.plot_w / max(len(self.chart.weeks), 1)
        out = []
        for i, (b, t) in enumerate(zip(base, tops, strict=True)):
            if not math.isfinite(b + t) or t == b:
                continue
            y0, y1 = sorted((self.y(b, side), self.y(t, side)))
            out.append(
                f'<rect x="{self.x(i) - width / 2:.1f}" y="{y0:.1f}" width="{width:.1f}" '
                f'height="{y1 - y0:.1f}" fill="{colour}"/>'
            )
        return out

    def _legend(self) -> list[str]:
        """One row under the week labels: a swatch and a label per named shape."""
        out, x, y = [], LEFT, self.chart.height - 8
        for label, colour, kind in self.chart._legend:
            opacity = ' fill-opacity="0.35"' if kind == "band" else ""
            out.append(
                f'<path d="M{x} {y - 4}h12" stroke="{colour}" stroke-width="2"/>'
                if kind == "line"
                else f'<rect x="{x}" y="{y - 8}" width="12" height="8" fill="{colour}"{opacity}/>'
            )
            out.append(f'<text x="{x + 16}" y="{y}" fill="{INK}">{escape(label)}</text>')
            x += 30 + 7 * len(label)
        return out
