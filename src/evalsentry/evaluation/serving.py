"""One verdict for quality and cost: is a serving variant as good, and is it cheaper.

``evalsentry evaluate --version N`` of a serving variant (``register --variant-of``), or of a
distilled student (its lineage names its ``teacher``), gates its quality as for any candidate,
then times it against the version it is a variant (or student) of, paired in
one process (:mod:`evalsentry.evaluation.timing`'s ABBA rounds), and weighs both in one row of
the report (metric ``microseconds_per_example``, never gating on its own):

- ``CHEAPER``: every gating quality comparison against production (or, without one, every
  gating comparison) held (PASS or WARN) and the variant took less
  time per example in all paired rounds but one, so the saving is beyond the rounds' noise;
- ``COSTLIER``: quality held, and it took more time in all rounds but one (a WARN);
- ``COST HELD``: quality held, and the rounds do not agree on which is cheaper;
- otherwise the worst quality verdict: quality not held (FAIL, ERROR) or not shown to hold
  (INCONCLUSIVE: the evalset cannot resolve the margin), the cost not weighed.

With the line's traffic declared, the row says what a month of serving costs with each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalsentry.gate.verdicts import SEVERITY, Comparison, Reference, Verdict
from evalsentry.names import TIMING_METRIC

if TYPE_CHECKING:
    from evalsentry.checkpoints.registry import RegistryEntry
    from evalsentry.config import Config
    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evaluation.pipeline import Target
    from evalsentry.evaluation.speed import PairedTiming
    from evalsentry.evaluation.timing import ServingBill

CHEAPER, COSTLIER, COST_HELD = "CHEAPER", "COSTLIER", "COST HELD"
#: What a distilled student is of its teacher, where a variant names its transform.
STUDENT = "student"
METHOD = "paired timing and quality"


#: How a weighed row's reason is read back (the lifetime bill, the weekly reports, the bench):
#: the word it starts with, what the candidate is made from, and the paired rounds' ratios.
_WORD = re.compile(rf"^({CHEAPER}|{COSTLIER}|{COST_HELD}): ")
_MADE = re.compile(r"\(([\w-]+) of v\d+\)")
_ROUNDS = re.compile(r"(\d+\.\d+)x the time per example \(median of \d+ paired rounds, (\d+\.\d+)x to (\d+\.\d+)x")  # fmt: skip


@dataclass(frozen=True)
class Said:
    """What a weighed row's reason says, as :func:`weigh` writes it."""

    word: str | None  # CHEAPER, COSTLIER, COST HELD; None where quality was not held
    made: str  # the transform, or ``student``
    ratio: float | None  # the median paired round's time ratio, and the rounds' range
    low: float | None
    high: float | None


def said_in(reason: str) -> Said:
    """Read :func:`weigh`'s reason back (its one reader, beside its one writer)."""
    word, made, rounds = _WORD.match(reason), _MADE.search(reason), _ROUNDS.search(reason)
    ratios = [float(x) for x in rounds.groups()] if rounds else [None, None, None]
    return Said(word.group(1) if word else None, made.group(1) if made else "variant", *ratios)


class TeacherNotRegistered(LookupError):
    """A student names a teacher that no version of its line holds."""


def weighed_against(
    target: Target, line: Callable[[], Sequence[RegistryEntry]]
) -> tuple[int, str] | None:
    """The version ``target`` is weighed against, and what it is of it; None for neither.

    A serving variant (lineage ``variant_of``) is its transform of that version
    (``(2, "dynamic-int8")``); a distilled student (lineage ``teacher``) is the ``student`` of
    the version of its line whose file is the teacher's (``line()``: the line's entries, read
    only for a student).

    Raises:
        TeacherNotRegistered: the student's teacher is no version of the line; and what
            ``line()`` raises.
    """
    lineage = target.lineage or {}
    made = lineage.get("variant_of")
    if isinstance(made, dict) and isinstance(made.get("version"), int):
        return made["version"], str((target.pinned_model or {}).get("transform") or "variant")
    teacher = lineage.get("teacher")
    if not isinstance(teacher, dict):
        return None
    sha = str(teacher.get("sha256")).lower()
    for entry in line():
        if entry.sha256 == sha:
            return entry.version, STUDENT
    raise TeacherNotRegistered(
        f"its teacher (sha256 {str(teacher.get('sha256'))[:12]}) is no registered version of "
        f"{target.model}; register the teacher to weigh the student against it"
    )


def weigh(
    label: str,
    quality: Sequence[Comparison],
    timing: PairedTiming,
    owner: dict[str, Any],
    reference: dict[str, Any],
    bill: ServingBill | None = None,
) -> Comparison:
    """The variant's one row: CHEAPER, COSTLIER, COST HELD, or its quality verdict.

    Args:
        label: ``digits@v4 (dynamic-int8 of v2)``.
        quality: The variant's comparisons (only gating ones are weighed).
        timing: The variant (current) timed against the version it is a variant of.
        owner: The owner fields of its evaluation (:func:`evalsentry.gate.pairs.owner`).
        reference: ``reference_evaluation_id``, ``reference_week``, ``reference_version``.
        bill: The line's declared traffic at the device's price.
    """
    if not timing.ratios:  # no round could be measured: nothing to weigh
        said = f"{label}: cost not weighed: paired timing measured no round"
        return Comparison(**owner, **reference, reference=Reference.PRODUCTION, metric=TIMING_METRIC, verdict=Verdict.WARN, reason=said, gating=False)  # fmt: skip
    gating = [c for c in quality if c.gating and c.metric != TIMING_METRIC]
    against = [c for c in gating if c.reference == Reference.PRODUCTION]
    gating = against or gating  # weighed against production where it was compared with it
    before, now = timing.per_example()
    ordered = sorted(timing.ratios)
    spread = f"{ordered[0]:.2f}x to {ordered[-1]:.2f}x"
    rounds = f"{timing.ratio:.2f}x the time per example (median of {len(ordered)} paired rounds, {spread}, on {timing.device})"  # fmt: skip
    money = f": {bill.change(before, now)}" if bill is not None else ""
    fields = {
        **owner, **reference, "reference": Reference.PRODUCTION, "metric": TIMING_METRIC,
        "method": METHOD, "gating": False, "reference_value": before * 1e6, "value": now * 1e6,
        "delta": (now - before) * 1e6, "drop": (now - before) * 1e6, "n": timing.examples,
    }  # fmt: skip
    worst = max(gating, key=lambda c: SEVERITY[c.verdict], default=None)
    if worst is None or worst.verdict not in (Verdict.PASS, Verdict.WARN):
        said = _quality(worst) if worst is not None else "no gating quality comparison"
        verdict = worst.verdict if worst is not None else Verdict.ERROR
        held = "not shown to hold" if verdict == Verdict.INCONCLUSIVE else "not held"
        reason = f"{label}: quality {held} ({said}); cost not weighed: {rounds}"
        return Comparison(**fields, verdict=verdict, reason=reason)
    held = f"quality held ({_quality(_primary(gating))})"
    # All rounds but one on one side of 1 (the one round allowed is the noisiest).
    faster = ordered[-2 if len(ordered) >= 2 else -1] < 1
    slower = ordered[1 if len(ordered) >= 2 else 0] > 1
    if faster:
        text = f"{CHEAPER}: {label}: {held}, {1 - timing.ratio:.0%} cheaper{money}; {rounds}"
        return Comparison(**fields, verdict=Verdict.PASS, reason=text)
    if slower:
        text = f"{COSTLIER}: {label}: {held}, {timing.ratio - 1:.0%} costlier{money}; {rounds}"
        return Comparison(**fields, verdict=Verdict.WARN, reason=text)
    text = f"{COST_HELD}: {label}: {held}; the rounds do not agree which is cheaper; {rounds}"
    return Comparison(**fields, verdict=Verdict.PASS, reason=text)


def _primary(gating: Sequence[Comparison]) -> Comparison:
    """The comparison quoted for quality: the worst, on the first metric among equals."""
    return max(gating, key=lambda c: (SEVERITY[c.verdict], -gating.index(c)))


def _quality(c: Comparison) -> str:
    """The quality quoted: ``accuracy -0.20 pts vs production, margin 1.00 pts``, or the reason.

    A count metric in points; others to 3 significant digits (``nll +0.0196 ..., margin 0.00685``).
    """
    if c.delta is None or c.tolerance is None:
        return f"{c.metric}: {c.verdict} ({c.reason})"
    points = c.metric in ("accuracy", "top5_accuracy", "macro_f1") or c.metric.startswith("score:")
    if points:
        return f"{c.metric} {c.delta * 100:+.2f} pts vs {c.reference}, margin {c.tolerance * 100:.2f} pts"  # fmt: skip
    return f"{c.metric} {c.delta:+.3g} vs {c.reference}, margin {c.tolerance:.3g}"


def time_variant(
    variant: Target, parent: Target, evalset: Evalset, config: Config, device: str
) -> PairedTiming:
    """The variant timed against its parent in an evaluation child, within the timing budget.

    Raises:
        as :func:`evalsentry.evaluation.isolation.request_isolated`.
    """
    from evalsentry.evaluation.isolation import request_isolated
    from evalsentry.evaluation.timing import load_arguments_of

    answer = request_isolated(
        "time", variant.uri, load_arguments_of(variant, config), evalset, device=device,
        timeout_s=config.inference_timeout_s, reference_uri=parent.uri,
        reference_load=load_arguments_of(parent, config), budget_s=config.cost.timing_budget_s,
    )  # fmt: skip
    timing: PairedTiming = answer.result
    return timing
