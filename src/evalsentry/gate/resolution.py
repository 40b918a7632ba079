"""What an evalset can certify: the smallest tolerance an unchanged retrain PASSes.

A PASS needs the drop's one-sided upper bound within the tolerance. Two retrains of a model that
is no better and no worse still disagree on some examples (their *churn*), and on n examples
that churn alone puts the bound some way above zero: a tolerance below it cannot be shown,
however good the model, and the comparison reads INCONCLUSIVE ("unresolved") week after week.
This module states that resolution before it matters: at freeze, in ``evalset show``, and as a
warning when a run starts with a tolerance finer than it.

Count metrics (accuracy-type): exact, from n and the churn, assumed (``ASSUMED_CHURN``) until the
history holds comparisons of a model line on the evalset, then measured: the median over its
week-to-week comparisons without a FAIL of twice the share of newly right examples (a drop adds
newly wrong ones, never newly right). The certifiable tolerance is the smallest one
an unchanged retrain PASSes with probability ``DEFAULT_POWER`` (80%), summed exactly over its
possible flips with Tango's bound, the bound PASS uses. Other metrics depend on the models'
outputs: measured from the history's bounds (their median margin above the observed change,
scaled from a median PASS to an 80% one under a normal approximation), unknown before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from evalsentry.gate.binomial import binomial_tails
from evalsentry.gate.margin import DEFAULT_POWER, discordant_counts, first_at_least
from evalsentry.gate.metrics import get_metric
from evalsentry.gate.slices import OVERALL

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.config import Config
    from evalsentry.sections import GatePolicy, Tolerance

log = logging.getLogger(__name__)

#: The churn assumed for a count metric until the history measures a line's own: the share of
#: examples two retrains of an unchanged model answer differently (half right, half wrong).
ASSUMED_CHURN = 0.03
# Bisection steps: tolerances to 2**-30 (1e-9); evalset sizes up to _MOST_ROWS.
_STEPS = 30
_MOST_ROWS = 10**8
# The verdicts of weeks whose flips and bounds measure the churn: no regression among them.
_UNREGRESSED = ("PASS", "WARN", "INCONCLUSIVE")


def pass_probability(
    n: int, newly_right_rate: float, drop: float, tolerance: float, alpha: float
) -> float:
    """Probability that a count comparison PASSes (its bound within ``tolerance``), exactly.

    Each example is newly right with probability ``newly_right_rate`` and newly wrong with that
    plus ``drop``; PASS needs Tango's one-sided ``1 - alpha`` upper bound of the drop at most
    ``tolerance`` (:func:`evalsentry.gate.stats.within_tolerance`).
    """
    if tolerance >= 1.0:
        return 1.0
    d = min(1.0, 2.0 * newly_right_rate + drop)
    if d <= 0.0:  # nothing ever changes: the bound of no flips decides
        return float(_passes(np.zeros(1, np.int64), n, tolerance, alpha)[0] > 0)
    m, weight = discordant_counts(n, d)
    share = np.full(m.size, min(1.0, (newly_right_rate + drop) / d))
    passing = binomial_tails(_passes(m, n, tolerance, alpha) - 1, m, share)[0]
    return float(np.clip((weight * passing).sum(), 0.0, 1.0))


def _passes(m: np.ndarray, n: int, tolerance: float, alpha: float) -> np.ndarray:
    """For each discordant count, how many newly wrong still PASS, plus one (0: none does).

    PASS means Tango's z at the tolerance is at most ``-z_alpha``; z grows with the newly
    wrong at a fixed count, so those that PASS are the fewest ones.
    """
    z = NormalDist().inv_cdf(1.0 - alpha)
    return first_at_least(m, n, tolerance, float(np.nextafter(-z, np.inf)))


# Cached: every weekly run asks it of each evalset (tolerance_warnings), thirty exact sums a time.
@lru_cache(maxsize=1024)
def certifiable_tolerance(
    n: int, churn: float, alpha: float, power: float = DEFAULT_POWER
) -> float:
    """The smallest tolerance an unchanged retrain with this churn PASSes ``power`` of the time.

    Args:
        n: Examples in the evalset (or slice).
        churn: Share of examples two retrains answer differently without changing the accuracy.
        alpha: One-sided level of PASS's upper bound.
        power: Probability of the PASS, in (0, 1).

    Returns:
        The tolerance, in accuracy units.

    """
    low, high = 0.0, 1.0
    for _ in range(_STEPS):
        middle = (low + high) / 2
        if pass_probability(n, churn / 2, 0.0, middle, alpha) >= power:
            high = middle
        else:
            low = middle
    return high


@lru_cache(maxsize=256)
def rows_needed(
    tolerance: float, churn: float, alpha: float, power: float = DEFAULT_POWER
) -> int | None:
    """The fewest examples on which ``tolerance`` is certifiable at this churn (None: none is)."""
    if tolerance <= 0.0:
        return None
    high = 16
    while certifiable_tolerance(high, churn, alpha, power) > tolerance:
        if high >= _MOST_ROWS:
            return None
        high *= 2
    low = high // 2
    while high - low > max(1, high // 1000):
        middle = (low + high) // 2
        if certifiable_tolerance(middle, churn, alpha, power) > tolerance:
            low = middle
        else:
            high = middle
    return high


def _spread_tolerance(margin_above: float, alpha: float, power: float) -> float:
    """From the bound's median margin above the change to an 80% PASS: times (z_a + z_p) / z_a."""
    z_alpha, z_power = NormalDist().inv_cdf(1 - alpha), NormalDist().inv_cdf(power)
    return margin_above * (z_alpha + z_power) / z_alpha


@dataclass(frozen=True)
class Resolution:
    """What one evalset can certify for one metric, against the tolerance configured."""

    evalset: str
    rows: int
    metric: str
    setting: str  # where the tolerance is configured: gate.[evalsets.<evalset>.]<metric>.max_drop
    configured: str  # as written: 0.01, "10%"
    allowed: float | None  # the configured tolerance in metric units, when it can be known
    certifiable: float | None  # None: not known before a first comparison
    basis: str  # what it rests on: "3.0% churn, assumed", "2.1% churn, 4 week(s) of digits"
    rows_needed: int | None = None  # the evalset size a too-fine tolerance would need

    @property
    def too_fine(self) -> bool:
        """Whether the configured tolerance is below what the evalset can certify."""
        return (
            self.allowed is not None
            and self.certifiable is not None
            and self.allowed < self.certifiable
        )

    def fix(self) -> str:
        """A tolerance that would work, and the evalset size that would (when known)."""
        assert self.certifiable is not None  # noqa: S101 - asked only when too fine
        fix = f"set gate.evalsets.{self.evalset}.{self.metric}.max_drop >= {round_up(self.certifiable):g}"
        if self.rows_needed is not None:
            fix += f" or an evalset of >= {round(round_up(self.rows_needed)):,} rows"
        return fix

    def line(self) -> str:
        """One line for ``evalset show`` and ``freeze``."""
        if self.certifiable is None:
            return f"{self.metric}: {self.basis}"
        text = f"{self.metric}: {self.certifiable:.4g} ({self.basis}); configured {self.configured}"
        return text + (f": too fine, {self.fix()}" if self.too_fine else "")

    def warning(self) -> str:
        """The one-line warning of a tolerance finer than the evalset can certify."""
        return (
            f"evalset {self.evalset} ({self.rows:,} rows) cannot certify {self.setting} "
            f"{self.configured} ({self.basis}): the smallest it can is {self.certifiable:.4g}; "
            f"{self.fix()}"
        )


def round_up(value: float) -> float:
    """Two significant digits, rounded up: a tolerance, or an evalset size, that is enough."""
    if value <= 0:
        return value
    step = 10.0 ** (math.floor(math.log10(value)) - 1)
    return float(f"{math.ceil(value / step - 1e-9) * step:.2g}")


def _lines(comparisons: pd.DataFrame | None, evalset: str, metric: str) -> dict[str, pd.DataFrame]:
    """Per model line, its overall week-to-week comparisons of ``metric`` on ``evalset``.

    Only weeks without a regression (PASS, WARN, INCONCLUSIVE): a FAIL's spread and flips are
    the regression's, not the retrains' churn.
    """
    if comparisons is None or comparisons.empty:
        return {}
    rows = comparisons[
        (comparisons["evalset"] == evalset)
        & (comparisons["metric"] == metric)
        & (comparisons["slice"] == OVERALL)
        & (comparisons["reference"] == "previous-week")
        & (comparisons["n"].fillna(0) > 0)
        & comparisons["verdict"].isin(_UNREGRESSED)
    ]
    return {str(model): line for model, line in rows.groupby("model")}


#: One finding: the tolerance in metric units (None: unknown), the certifiable one (None:
#: unknown), what it rests on, and the rows a too-fine tolerance would need.
_Finding = tuple[float | None, float | None, str, int | None]


def _count_findings(
    tolerance: Tolerance, lines: dict[str, pd.DataFrame], rows: int, alpha: float
) -> list[_Finding]:
    """A count metric: per line, at its measured churn; without one, at the assumed churn."""
    # Twice the newly right: a drop adds newly wrong examples, never newly right ones.
    cases: list[tuple[float, str, float | None]] = [
        (
            float((2 * line["newly_right"] / line["n"]).median()),
            f"{len(line)} week(s) of {model}",
            float(line["reference_value"].median()),
        )
        for model, line in lines.items()
        if line["newly_right"].notna().any()
    ] or [(ASSUMED_CHURN, "assumed", None)]
    relative = isinstance(tolerance.max_drop, str) and tolerance.max_drop.endswith("%")
    found: list[_Finding] = []
    for churn, source, reference in cases:
        allowed = (
            None if relative and reference is None else tolerance.allowed_drop(reference or 0.0)
        )
        certifiable = certifiable_tolerance(rows, churn, alpha)
        too_fine = allowed is not None and allowed < certifiable
        needed = rows_needed(allowed, churn, alpha) if too_fine and allowed is not None else None
        found.append((allowed, certifiable, f"{churn:.1%} churn, {source}", needed))
    return found


def _spread_findings(
    tolerance: Tolerance, lines: dict[str, pd.DataFrame], rows: int, alpha: float
) -> list[_Finding]:
    """Any other metric: per line, from its bounds' median margin above the observed change."""
    found: list[_Finding] = []
    for model, line in lines.items():
        measured = line.dropna(subset=["drop_bound", "drop"])
        if measured.empty:
            continue
        margin_above = float((measured["drop_bound"] - measured["drop"]).median())
        certifiable = _spread_tolerance(margin_above, alpha, DEFAULT_POWER)
        allowed = tolerance.allowed_drop(float(measured["reference_value"].median()))
        # The bound's spread shrinks with the square root of the rows.
        needed = (
            math.ceil(rows * (certifiable / allowed) ** 2) if 0 < allowed < certifiable else None
        )
        found.append(
            (allowed, certifiable, f"measured over {len(measured)} week(s) of {model}", needed)
        )
    if found:
        return found
    relative = isinstance(tolerance.max_drop, str) and tolerance.max_drop.endswith("%")
    unknown = "known after a first comparison (it depends on the models' outputs)"
    return [(None if relative else tolerance.allowed_drop(0.0), None, unknown, None)]


def resolutions(
    evalset: str,
    rows: int,
    metrics: Sequence[str],
    policy: GatePolicy,
    comparisons: pd.DataFrame | None = None,
) -> list[Resolution]:
    """What ``evalset`` can certify per metric (and per model line the history measured).

    Args:
        evalset: The evalset's name.
        rows: Its examples.
        metrics: The metrics it is gated on.
        policy: The gate settings: tolerances and alpha.
        comparisons: The history's comparisons table, for measured churn and bounds.

    Returns:
        For each metric, one resolution per model line measured, else one assumed (or unknown).

    """
    out = []
    for metric in metrics:
        tolerance = policy.tolerance(metric, evalset)
        setting = policy.setting(metric, evalset)
        count = get_metric(metric).paired_test == "mcnemar"
        findings = (_count_findings if count else _spread_findings)(
            tolerance, _lines(comparisons, evalset, metric), rows, policy.alpha
        )
        out += [
            Resolution(evalset, rows, metric, setting, str(tolerance.max_drop), *finding)
            for finding in findings
        ]
    return out


def measured_comparisons(config: Config) -> pd.DataFrame | None:
    """The history's comparisons, where each line's churn and bounds are measured.

    None without a readable history: the gate says what is wrong with it; here it only means
    nothing is measured.
    """
    from evalsentry.errors import EvalsentryError
    from evalsentry.history.store import History

    try:
        return History(config.store_url).comparisons()
    except EvalsentryError as exc:
        log.info("no measured churn: %s", exc)
        return None


def evalset_resolutions(
    config: Config, name: str, comparisons: pd.DataFrame | None = None
) -> list[Resolution]:
    """What the project's evalset ``name`` can certify, per metric it is gated on.

    Reads its manifest (size, metrics); ``comparisons`` (:func:`measured_comparisons`) measure
    each model line's churn and bounds on it, else the churn is assumed.

    Raises:
        EvalsentryError: The evalset's manifest cannot be read.
    """
    from evalsentry.evalsets.evalset import evalset_folder, read_spec
    from evalsentry.gate.metrics import metric_names

    spec = read_spec(evalset_folder(name, config.evalsets_dir))
    metrics = metric_names(spec.metrics, spec.task, spec.num_classes)
    return resolutions(spec.name, spec.num_rows, metrics, config.gate, comparisons)


def resolution_heading(rows: int, alpha: float) -> str:
    """The words above a list of :meth:`Resolution.line`."""
    return (
        f"resolution: the smallest tolerance an unchanged retrain PASSes {DEFAULT_POWER:.0%} "
        f"of the time on {rows:,} rows (alpha {alpha})"
    )
