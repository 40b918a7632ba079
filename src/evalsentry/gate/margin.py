"""The exact test of a paired count drop against its tolerance: FAIL means beyond the margin.

A count metric (accuracy-type) FAILs only on evidence that its drop exceeds the tolerance:
``H0: p_b - p_c <= margin`` against ``H1: p_b - p_c > margin``, where ``p_b`` (``p_c``) is the
chance that an example is newly wrong (newly right) and ``margin`` is the tolerance in accuracy
units (``allowed / n``, ``allowed`` exact in examples). A model exactly at the tolerance then
FAILs at most alpha of the time; a test of "different from zero" would fail it about half the
time on a large evalset.

The statistic is Tango's score z (Tango 1998, Stat Med 17:891): the drop in examples minus the
margin, over its standard error at the cell probabilities that best fit the data *on the
margin*. Its p-value is exact and unconditional (Sidik 2003, Stat Med 22:265): the largest
probability of a z at least as large as the observed one over everything the null allows. The
margin leaves one parameter free, the discordance ``d = p_b + p_c``, and the search over the
null reduces to it: at a fixed ``d`` that probability grows with the drop (z grows with the
newly wrong examples at a fixed discordant count), so the worst case lies on the margin; below
``d = margin`` (where the margin would need ``p_c < 0``) the worst case is ``p_c = 0``, whose
probability grows with ``d``.

The search runs over a confidence interval of ``d`` given the observed discordant count, and
the interval's error ``GAMMA`` is added to the p-value (Berger and Boos 1994, JASA 89:1012):
still exact. Over all of ``d`` the worst case would be the corner where nothing is newly right,
a world a retrain that changed 30 answers both ways does not live in; its few possible outcomes
would make the p-values a few coarse steps, and a family correction of a few thousandths would
then cost a whole step of power. The interval's lower limit (``GAMMA_LOW``, 0.001) keeps the
p-values finely spaced, and is also their floor; its upper limit keeps the search's cost
growing with the discordant count, not with n.

The search is a grid over ``d``, spaced by ``0.3`` standard deviations of the discordant count
and holding ``d = margin`` itself, where the largest probabilities can sit. Between grid points
the probability moves by far less than ``GRID_SLACK`` (checked against a much finer grid in the
tests), and the p-value is raised by that factor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evalsentry.gate import critical_cache
from evalsentry.gate.binomial import binomial_pmf, binomial_tails
from evalsentry.gate.tail_tables import TAIL_SDS as _TAIL_SDS
from evalsentry.gate.tail_tables import TailTable

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

DEFAULT_POWER = 0.8
#: Berger-Boos: the discordance is searched over its confidence interval given the discordant
#: count, from the limit a count this large reaches with probability GAMMA_LOW to the one a
#: count this small reaches with GAMMA_HIGH, and their sum is added to the p-value.
GAMMA_LOW = 1e-3
GAMMA_HIGH = 1e-12
GAMMA = GAMMA_LOW + GAMMA_HIGH
#: The p-value is raised by this factor for what lies between the grid's points.
GRID_SLACK = 1.01
# Grid spacing: this many standard deviations of the discordant count, and at least this many
# expected discordant examples (where the count is nearly always zero or one).
_GRID_SDS = 0.3
_GRID_MIN_STEP = 0.25
# Within this many standard deviations above the margin, steps of _NEAR_GRID_SDS.
_NEAR_SDS = 3.0
_NEAR_GRID_SDS = 0.1
# Critical z values are found in [_Z_LOW, _Z_HIGH] (levels from 1e-15 to 0.99) to _Z_PRECISION,
# far finer than the power sums need; detectable drops to 1e-6 of their size (in at most
# _DROP_STEPS power sums).
_Z_LOW, _Z_HIGH, _Z_PRECISION = -4.0, 9.0, 1e-4
_DROP_STEPS, _DROP_PRECISION = 60, 1e-6
# Expected discordant examples at the margin from which power uses the normal critical value.
_NORMAL_COUNT = 400


def tango_z(newly_wrong: ArrayLike, newly_right: ArrayLike, n: int, margin: float) -> FloatArray:
    """Tango's score statistic for the paired drop ``p_b - p_c`` at ``margin``, elementwise.

    ``(b - c - n * margin) / sqrt(n * (2 * p_c + margin * (1 - margin)))``, with ``p_c`` the
    maximum-likelihood chance of a newly right example under ``p_b - p_c = margin``; it keeps the
    statistic honest when few or no examples changed. At margin 0 it is McNemar's
    ``(b - c) / sqrt(b + c)``. A zero variance gives 0 for no difference, else +-inf.
    """
    b = np.asarray(newly_wrong, np.float64)
    c = np.asarray(newly_right, np.float64)
    a = 2.0 * n
    slope = -b - c + (2.0 * n - b + c) * margin
    const = -c * margin * (1.0 - margin)
    p_c = (-slope + np.sqrt(np.maximum(slope * slope - 4.0 * a * const, 0.0))) / (2.0 * a)
    variance = n * (2.0 * p_c + margin * (1.0 - margin))
    difference = b - c - n * margin
    positive = variance > 0.0
    z = difference / np.sqrt(np.where(positive, variance, 1.0))
    edge = np.where(difference == 0, 0.0, np.copysign(np.inf, difference))
    return np.asarray(np.where(positive, z, edge), np.float64)


def first_at_least(discordant: ArrayLike, n: int, margin: float, z: ArrayLike) -> IntArray:
    """For each discordant count m, the fewest newly wrong b with ``tango_z(b, m - b) >= z``.

    ``m + 1`` where none is. The statistic grows with b at a fixed m (a test checks it), so
    the examples with a z at least ``z`` are exactly those with at least that many newly wrong.
    """
    m = np.asarray(discordant, np.int64)
    threshold = np.asarray(z, np.float64)
    low, high = np.zeros_like(m), m + 1
    for _ in range(math.ceil(math.log2(int(m.max(initial=0)) + 2)) + 1):
        middle = (low + high) // 2
        reached = (middle <= m) & (tango_z(middle, m - middle, n, margin) >= threshold)
        high = np.where(reached, middle, high)
        low = np.where(reached, low, middle + 1)
    return np.asarray(high, np.int64)


def _count_range(n: int, d: float) -> tuple[int, int]:
    """The discordant counts with any real probability at discordance ``d``."""
    mean, sd = n * d, math.sqrt(n * d * (1.0 - d))
    return max(0, math.floor(mean - _TAIL_SDS * sd) - 1), min(
        n, math.ceil(mean + _TAIL_SDS * sd) + 1
    )


def _count_pmf(m: IntArray, n: int, d: FloatArray) -> FloatArray:
    """``P(M = m)`` for ``M ~ Binomial(n, d)``, with ``d`` 0 or 1 allowed."""
    inner = (d > 0.0) & (d < 1.0)
    out = np.where(d <= 0.0, (m == 0).astype(np.float64), (m == n).astype(np.float64))
    if inner.any():
        out[inner] = binomial_pmf(m[inner], n, d[inner])
    return np.asarray(out, np.float64)


def discordant_counts(n: int, d: float) -> tuple[IntArray, FloatArray]:
    """The discordant counts with any real probability at discordance ``d``, and that probability.

    What every exact sum over the outcomes of ``n`` paired examples runs over.
    """
    low, high = _count_range(n, d)
    m = np.arange(low, high + 1, dtype=np.int64)
    return m, _count_pmf(m, n, np.full(m.size, d))


def _upper_tail(first: IntArray, m: IntArray, share: FloatArray) -> FloatArray:
    """``P(B >= first)`` for ``B ~ Binomial(m, share)``."""
    return np.asarray(binomial_tails(first - 1, m, share)[1], np.float64)


class MarginTest:
    """The exact margin test for one evalset size and tolerance; :func:`margin_test` caches it.

    Args:
        n: Paired examples.
        allowed: The tolerance in examples, exactly (tolerance times n).

    """

    def __init__(self, n: int, allowed: Fraction) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = n
        self.allowed = allowed
        self.margin = float(allowed / n)
        self.grid = self._grid()
        # On the margin, a discordant example is newly wrong with this probability.
        with np.errstate(divide="ignore", invalid="ignore"):
            share = (self.grid + self.margin) / (2.0 * self.grid)
        self.share = np.where(self.grid > 0.0, np.minimum(share, 1.0), 1.0)
        self._cells: tuple[IntArray, IntArray, FloatArray, IntArray] | None = None
        self._critical: dict[float, FloatArray] = {}
        self._rejects: dict[float, IntArray] = {}  # per level, of each count once asked (else -1)
        self._limits = np.full((2, n + 1), -1, np.int32)  # of each count, once asked
        self._z_table, self._z_rows = np.zeros(0), 0

    def _grid(self) -> FloatArray:
        """Discordances from the margin up to 1, spaced by a share of the count's spread."""
        n, mean = self.n, self.n * min(self.margin, 1.0)
        # Just above the margin the probabilities change fastest (below it the worst case is
        # p_c = 0): a finer grid there.
        near = mean + _NEAR_SDS * math.sqrt(mean * (1.0 - mean / n))
        points = [mean]
        while mean < n:
            spread = math.sqrt(mean * (1.0 - mean / n))
            mean += max(_GRID_MIN_STEP, (_NEAR_GRID_SDS if mean < near else _GRID_SDS) * spread)
            points.append(min(mean, float(n)))
        return np.asarray(points, np.float64) / n

    def window(self, discordant: ArrayLike) -> tuple[IntArray, IntArray]:
        """For each discordant count, the grid points that cover its confidence interval.

        ``(first, last)``: the last grid point at or below the discordance at which a count
        this large has probability ``GAMMA_LOW``, and the first at or above the one at which a
        count this small has probability ``GAMMA_HIGH``. Each count's are found when first asked,
        and remembered: the power sums ask for the same ones again and again.
        """
        m = np.asarray(discordant, np.int64)
        wanted = np.unique(m[self._limits[0, m] < 0])
        if wanted.size:
            # The first point at which the count is not implausibly large (P(M >= m) >= gamma),
            # less one; and the first at which it is implausibly small (P(M <= m) < gamma).
            plausible = self._first_point(
                lambda d: binomial_tails(wanted - 1, self.n, d)[1] >= GAMMA_LOW, wanted.size
            )
            beyond = self._first_point(
                lambda d: binomial_tails(wanted, self.n, d)[0] < GAMMA_HIGH, wanted.size
            )
            self._limits[:, wanted] = np.stack([np.maximum(plausible - 1, 0), beyond])
        return (
            np.asarray(self._limits[0, m], np.int64),
            np.asarray(self._limits[1, m], np.int64),
        )

    def _first_point(
        self, reached: Callable[[FloatArray], NDArray[np.bool_]], size: int
    ) -> IntArray:
        """For ``size`` conditions that hold from some grid point on, that point (else the last)."""
        low, high = np.zeros(size, np.int64), np.full(size, self.grid.size - 1, np.int64)
        while (low < high).any():
            middle = (low + high) // 2
            holds = reached(self.grid[middle])
            high = np.where(holds, middle, high)
            low = np.where(holds, low, np.minimum(middle + 1, high))
        return high

    def _cells_of(self, first: int, last: int) -> tuple[IntArray, IntArray, FloatArray]:
        """Grid points ``first..last`` with each plausible discordant count: (point, count, P)."""
        if self._cells is None or self._cells[3].size <= last:
            points, counts = [], []
            for i in range(last + 1):
                low, high = _count_range(self.n, float(self.grid[i]))
                counts.append(np.arange(low, high + 1, dtype=np.int64))
                points.append(np.full(counts[-1].size, i, np.int64))
            point, count = np.concatenate(points), np.concatenate(counts)
            probability = _count_pmf(count, self.n, self.grid[point])
            ends = np.cumsum([c.size for c in counts])
            self._cells = (point, count, probability, np.asarray(ends, np.int64))
        point, count, probability, ends = self._cells
        start, stop = int(ends[first - 1]) if first else 0, int(ends[last])
        return point[start:stop], count[start:stop], probability[start:stop]

    def _tails(self, z: float | FloatArray, first: int, last: int) -> FloatArray:
        """``P(Z >= z)`` at grid points ``first..last`` (``z`` one value, or one per point)."""
        point, count, probability = self._cells_of(first, last)
        threshold = z if np.ndim(z) == 0 else np.asarray(z)[point - first]
        at_least = first_at_least(count, self.n, self.margin, threshold)
        tail = _upper_tail(at_least, count, self.share[point])
        sums = np.bincount(point - first, weights=probability * tail, minlength=last + 1 - first)
        return np.asarray(sums, np.float64)

    def z_of(self, discordant: IntArray, newly_wrong: IntArray) -> FloatArray:
        """``tango_z(b, m - b)`` for counts ``0 <= b <= m``, from a table of every (m, b) so far.

        Row m of the table starts at ``m * (m + 1) / 2``; it grows (by a quarter at least, up to
        the ``n + 1`` rows there can be) to the largest m asked.
        """
        top = int(discordant.max(initial=0))
        if self._z_rows <= top:
            rows = min(self.n + 1, max(top + 1, self._z_rows + self._z_rows // 4))
            m = np.repeat(np.arange(rows), np.arange(1, rows + 1))
            b = np.arange(m.size) - m * (m + 1) // 2
            self._z_table = tango_z(b, m - b, self.n, self.margin)
            self._z_rows = rows
        return np.asarray(self._z_table[discordant * (discordant + 1) // 2 + newly_wrong])

    def p_value(self, newly_wrong: int, newly_right: int) -> float:
        """The exact one-sided p-value of ``H0: drop <= margin`` for the observed flips."""
        if self.margin >= 1.0:
            return 1.0
        z = float(tango_z(newly_wrong, newly_right, self.n, self.margin))
        first, last = (int(i[0]) for i in self.window([newly_wrong + newly_right]))
        worst = float(self._tails(z, first, last).max())
        return min(1.0, GRID_SLACK * worst + GAMMA)

    def _critical_upto(self, level: float, last: int) -> FloatArray:
        """Each grid point's smallest z whose tail is within the level (points ``0..last``).

        Found by bisection to ``_Z_PRECISION``, for the points not yet known at this level, a
        few points at a time (a :class:`TailTable` holds their tails). A level at or below
        ``GAMMA``, the p-value's floor, is out of reach: its critical z is ``_Z_HIGH``, beyond
        any outcome with a real probability. What is known is kept on disk for later runs
        (:mod:`evalsentry.gate.critical_cache`).
        """
        done = self._critical.get(level)
        if done is None:
            done = critical_cache.load(self.n, self.allowed, level, _Z_LOW, _Z_HIGH)
            if done is None or done.size > self.grid.size:
                done = np.zeros(0)
            self._critical[level] = done
        if done.size <= last:
            target = (level - GAMMA) / GRID_SLACK
            # Grow by a quarter at least: a search that asks for ever more points pays a few
            # times at most, and never for points far beyond any it asks (larger counts).
            last = min(self.grid.size - 1, max(last, done.size + done.size // 4))
            found = [done]
            first = done.size
            while first <= last:
                point, count, probability = self._cells_of(first, last)
                table = TailTable(point - first, count, probability, self.share[point], self)
                low, high = np.full(table.points, _Z_LOW), np.full(table.points, _Z_HIGH)
                while float(high[0] - low[0]) > _Z_PRECISION:
                    middle = (low + high) / 2
                    within = table.tails(middle) <= target
                    high = np.where(within, middle, high)
                    low = np.where(within, low, middle)
                found.append(high)
                first += table.points
            done = self._critical[level] = np.concatenate(found)
            critical_cache.save(self.n, self.allowed, level, done)
        return done

    def rejects_from(self, discordant: IntArray, level: float) -> IntArray:
        """For each discordant count, the fewest newly wrong examples the test rejects at.

        ``m + 1`` where no count rejects. The p-value is at most ``level`` exactly when the
        observed z reaches the critical z of every grid point its interval searches. Each
        count's is found once per level and remembered: every power sum of a detectable-drop
        search asks for much the same counts.
        """
        m = np.asarray(discordant, np.int64)
        known = self._rejects.setdefault(level, np.full(self.n + 1, -1, np.int64))
        wanted = np.unique(m[known[m] < 0])
        if wanted.size:
            known[wanted] = self._rejects_from(wanted, level)
        return np.asarray(known[m], np.int64)

    def _rejects_from(self, discordant: IntArray, level: float) -> IntArray:
        """:meth:`rejects_from`, computed."""
        first, last = self.window(discordant)
        critical = self._critical_upto(level, int(last.max(initial=0)))
        pairs = list(zip(first.tolist(), last.tolist(), strict=True))
        spans = {(a, b): critical[a : b + 1].max() for a, b in set(pairs)}
        worst = np.array([spans[pair] for pair in pairs])
        return first_at_least(discordant, self.n, self.margin, worst)

    def power(self, newly_right_rate: float, drop: float, level: float) -> float:
        """Probability that the test rejects at ``level`` when the drop is ``drop``.

        The model of two checkpoints: each example is newly right with probability
        ``newly_right_rate`` (the churn of retraining) and newly wrong with that plus ``drop``.
        Summed exactly over the outcomes; the critical z of each discordant count is exact
        too, until ``_NORMAL_COUNT`` examples are expected to change at the margin: beyond,
        the statistic's normal critical value stands in for it (the exact ones cost seconds,
        at n = 100,000 a minute, and the two powers agree to within 0.005; a test checks).
        """
        if self.margin >= 1.0 or not GAMMA < level < 1.0:
            return 0.0
        d = min(1.0, 2.0 * newly_right_rate + drop)
        if d <= 0.0:
            return 0.0
        m, probability = discordant_counts(self.n, d)
        if self.n * min(1.0, 2.0 * newly_right_rate + self.margin) >= _NORMAL_COUNT:
            z = NormalDist().inv_cdf(1.0 - (level - GAMMA) / GRID_SLACK)
            first = first_at_least(m, self.n, self.margin, z)
        else:
            first = self.rejects_from(m, level)
        share = np.full(m.size, min(1.0, (newly_right_rate + drop) / d))
        return float(np.clip((probability * _upper_tail(first, m, share)).sum(), 0.0, 1.0))


@lru_cache(maxsize=64)
def margin_test(n: int, allowed: Fraction) -> MarginTest:
    """The exact margin test for ``n`` examples and ``allowed`` examples of tolerance (cached)."""
    return MarginTest(n, allowed)


def margin_p(newly_wrong: int, newly_right: int, n: int, allowed: Fraction) -> float:
    """Exact one-sided p-value that the drop exceeds ``allowed`` examples of ``n``.

    Args:
        newly_wrong: Examples only the reference got right (b).
        newly_right: Examples only the current got right (c).
        n: Paired examples.
        allowed: The tolerance in examples, exactly.

    Returns:
        The p-value of ``H0: p_b - p_c <= allowed / n``; 1 when the tolerance is all of n.

    """
    key = f"p {n} {allowed.numerator}/{allowed.denominator} {newly_wrong} {newly_right}"
    found = critical_cache.remembered(
        key, lambda: margin_test(n, allowed).p_value(newly_wrong, newly_right), _is_probability
    )
    return 1.0 if found is None else found  # never None: a kept null is not a probability


def _is_probability(value: float | None) -> bool:
    return value is not None and 0.0 <= value <= 1.0


def _is_drop(value: float | None) -> bool:
    """A detectable drop: a share of the examples, or None (none is detected that often)."""
    return value is None or 0.0 < value <= 1.0


def detectable_drop(
    n: int,
    newly_right: int,
    allowed: Fraction,
    level: float,
    power: float = DEFAULT_POWER,
    largest: float = 1.0,
) -> float | None:
    """The smallest true drop the margin test FAILs with probability ``power``.

    Computed from n, the observed churn (``newly_right / n`` of the examples are newly right, as
    many again would be newly wrong without a drop), the tolerance in examples (``allowed``) and
    the level the test actually meets inside its family. It is always above the tolerance: a true
    drop at the tolerance FAILs at most ``level`` of the time.

    Args:
        n: Paired examples.
        newly_right: Examples only the current got right (c): the churn estimate.
        allowed: The tolerance in examples, exactly.
        level: The p-value the test must get below, after the family's adjustment; taken to
            two significant digits, rounded down.
        power: Probability of detection, in (0, 1).
        largest: The largest drop there can be: the reference's accuracy.

    Returns:
        The drop in accuracy units, or None when no drop up to ``largest`` is detected that
        often (too few examples).

    """
    if not 0.0 < power < 1.0 or not 0.0 < level < 1.0:
        raise ValueError(f"power and level must lie in (0, 1), got {power} and {level}")
    # Two significant digits, rounded down (a drop the least bit larger): comparisons of one
    # evalset then share the test's critical values, the costly part.
    digits = 10.0 ** (math.floor(math.log10(level)) - 1)
    return _detectable_drop(
        n, newly_right, allowed, max(math.floor(level / digits), 1) * digits, power, largest
    )


# Cached: the gate, the report and the CLI each state it for the same comparisons of a week.
@lru_cache(maxsize=1024)
def _detectable_drop(
    n: int, newly_right: int, allowed: Fraction, level: float, power: float, largest: float
) -> float | None:
    """:func:`detectable_drop` at a level already rounded to two significant digits (kept)."""
    key = f"d {n} {newly_right} {allowed.numerator}/{allowed.denominator} {level!r} {power!r} {largest!r}"  # fmt: skip
    return critical_cache.remembered(
        key, lambda: _search_drop(n, newly_right, allowed, level, power, largest), _is_drop
    )


def _search_drop(
    n: int, newly_right: int, allowed: Fraction, level: float, power: float, largest: float
) -> float | None:
    """The search behind :func:`_detectable_drop`."""
    test = margin_test(n, allowed)
    rate = newly_right / n
    low, top = test.margin, min(largest, 1.0 - rate)
    if top <= low:
        return None
    # Double the excess over the margin until detected that often: the search stays near the
    # answer, where the grid is cheap, instead of starting at the largest drop there can be.
    short = test.power(rate, low, level) - power  # below 0: at the margin it is at most level
    high = min(top, low + max(low, 1.0 / n))
    while (over := test.power(rate, high, level) - power) < 0.0:
        if high >= top:
            return None
        low, short, high = high, over, min(top, high + 2.0 * (high - low))
    # Power grows smoothly with the drop: regula falsi, Illinois' variant (the end that stays
    # twice running has its value halved), needs a few power sums where halving needed twenty.
    # ``high`` stays detected that often.
    stays = 0
    for _ in range(_DROP_STEPS):
        if high - low <= _DROP_PRECISION * high:
            break
        middle = high - over * (high - low) / (over - short)
        if not low < middle < high:
            middle = (low + high) / 2
        found = test.power(rate, middle, level) - power
        if found >= 0.0:
            high, over = middle, found
            short, stays = (short / 2, stays + 1) if stays > 0 else (short, 1)
        else:
            low, short = middle, found
            over, stays = (over / 2, stays - 1) if stays < 0 else (over, -1)
    return high
