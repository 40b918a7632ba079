"""Tables of the margin test's tail probabilities, for the bisections of its critical z's.

At a grid point of the margin test (:mod:`evalsentry.gate.margin`), ``P(Z >= z)`` sums, over
the plausible discordant counts m, ``P(M = m)`` times ``P(B >= b)``: b the fewest newly wrong
examples whose z reaches ``z``, ``B ~ Binomial(m, share)``. The bisection for a critical z asks
it at ~17 values of z. Summing a binomial tail per count at every step made the detectable drop
cost seconds; a :class:`TailTable` takes each count's tails over all its plausible b once (the
running sum of its probabilities from the top, each probability the last one times the ratio of
consecutive terms) and the z of every (m, b) once, and each step then only looks them up.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from evalsentry.gate.binomial import binomial_pmf

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Counts further than this many standard deviations from their mean have a probability below
#: 1e-18: they are left out of every sum (the margin test's discordant counts too).
TAIL_SDS = 9.0
#: Counts a table holds beyond TAIL_SDS standard deviations: a skewed binomial (its mean within
#: a few of 0 or m) has more in its tail; one of mean 1 has 1e-19 of its probability 20 or more
#: above it, where 9 standard deviations are 9.
SKEW_COUNTS = 10
#: Cells (grid point, discordant count) times newly wrong counts a table holds, at most.
TABLE_SIZE = 1 << 20


class Scores(Protocol):
    """What gives the test statistic of outcomes: :class:`evalsentry.gate.margin.MarginTest`."""

    def z_of(self, discordant: IntArray, newly_wrong: IntArray) -> FloatArray:
        """The statistic of each outcome: ``b`` newly wrong of ``m`` discordant examples."""
        ...


class TailTable:
    """Every ``P(Z >= z)`` of the first few of some consecutive grid points.

    Args:
        point: Each cell's grid point, counted from the first, ascending (cells of a point
            together).
        count: Each cell's discordant count m.
        probability: Each cell's ``P(M = m)`` at its point.
        share: Each cell's chance that a discordant example is newly wrong.
        scores: The z of each outcome.

    The table holds as many of the points as fit in ``TABLE_SIZE`` numbers (one at least):
    :attr:`points`. Counts b outside ``TAIL_SDS`` standard deviations and ``SKEW_COUNTS`` of
    their mean hold below 1e-18 of probability: a threshold below them has tail 1 (to that),
    above them 0.
    """

    def __init__(
        self,
        point: IntArray,
        count: IntArray,
        probability: FloatArray,
        share: FloatArray,
        scores: Scores,
    ) -> None:
        m = count.astype(np.float64)
        spread = TAIL_SDS * np.sqrt(m * share * (1.0 - share)) + SKEW_COUNTS
        low = np.clip(np.floor(m * share - spread) - 1.0, 0.0, m).astype(np.int64)
        high = np.clip(np.ceil(m * share + spread) + 1.0, 0.0, m).astype(np.int64)
        # Where every discordant example is newly wrong (on the margin at d = margin), B = m.
        low = np.where(share < 1.0, low, count)
        # As many points as keep the table within TABLE_SIZE numbers.
        width = np.maximum.accumulate(high - low + 1)
        ends = np.flatnonzero(np.diff(point, append=point[-1] + 1)) + 1
        fits = ends[ends * width[ends - 1] <= TABLE_SIZE]
        stop = int(fits[-1]) if fits.size else int(ends[0])
        self.points = int(point[stop - 1]) + 1
        point, count, probability = point[:stop], count[:stop], probability[:stop]
        share, low, high = share[:stop], low[:stop], high[:stop]
        columns = int((high - low).max()) + 1
        b = low[:, None] + np.arange(columns)
        held = b <= high[:, None]
        b = np.where(held, b, high[:, None])
        # Each count's probabilities over its b: the first's exact value, then the running
        # product of the ratios (m - b) / (b + 1) * share / (1 - share) of consecutive terms.
        inner = (share < 1.0) & (count > 0)
        start = np.ones(count.size)  # B = m = low where not inner
        start[inner] = binomial_pmf(low[inner], count[inner], share[inner])
        odds = np.where(inner, share, 0.0) / np.where(inner, 1.0 - share, 1.0)
        ratio = (count[:, None] - b[:, :-1]) / (b[:, :-1] + 1.0) * odds[:, None]
        pmf = np.empty(b.shape)
        pmf[:, 0] = start
        np.cumprod(ratio, axis=1, out=pmf[:, 1:])
        pmf[:, 1:] *= start[:, None]
        pmf[~held] = 0.0
        # tail[:, j] = P(B >= low + j); one more column, past every b, of 0.
        self._tail = np.zeros((b.shape[0], columns + 1))
        self._tail[:, :-1] = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]
        self._z = np.where(held, scores.z_of(count[:, None], b), np.inf)
        self._point, self._weight = point, probability
        self._steps = math.ceil(math.log2(columns + 1))

    def tails(self, z: FloatArray) -> FloatArray:
        """``P(Z >= z)`` at each of the table's points, ``z`` one value per point."""
        threshold = z[self._point]
        rows = np.arange(self._z.shape[0])
        last = self._z.shape[1] - 1
        # The first column whose z reaches the threshold (the z of b grows with b).
        low, high = np.zeros(rows.size, np.int64), np.full(rows.size, last + 1, np.int64)
        for _ in range(self._steps):
            middle = (low + high) // 2
            below = (self._z[rows, np.minimum(middle, last)] < threshold) & (middle <= last)
            low = np.where(below, middle + 1, low)
            high = np.where(below, high, middle)
        tail = self._tail[rows, high]
        sums = np.bincount(self._point, weights=self._weight * tail, minlength=self.points)
        return np.asarray(sums, np.float64)
