"""What the gate says: the verdict of one comparison, and the report of a gate run.

- FAIL: the drop is significantly beyond the tolerance, after the family's correction.
- INCONCLUSIVE: neither a regression nor a drop within tolerance is shown: the evalset is too
  small or too noisy to tell (the message says what it could detect). Exit 0, or 1 when strict.
  Of two kinds: a *possible regression* (the observed drop is beyond the tolerance, not
  significantly), or *unresolved* (the observed drop is within the tolerance, its bound is not):
  the first is a week's news, the second only says the evalset is too small for the tolerance.
- WARN: a significant drop within tolerance; or the same checkpoint on the same data gave
  different predictions.
- ERROR: not comparable (evalset changed, metric or predictions missing, evaluation failed).
- PASS: the drop is shown to be within tolerance (its upper confidence bound is);
  BASELINE for the first week of a model line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from evalsentry.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from evalsentry.gate.slices import OVERALL
from evalsentry.names import NO_EVALSET

if TYPE_CHECKING:
    from evalsentry.gate.drift import DriftResult

BRIEF_REASON_CHARS = 80  # an ERROR's reason in a headline: enough for the cause
#: An absolute path (or URL) in a reason: its last component is what a headline keeps.
_PATH = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?/(?:[^\s/]+/)+([^\s/:]+)")
#: A path followed by what is wrong with it (``/x/data/a.parquet: changed since freeze``), to
#: the end of the clause.
_PATH_THEN_CAUSE = re.compile(rf"(?P<path>{_PATH.pattern}): (?P<cause>[^;|]+)")


def brief_reason(reason: str) -> str:
    """An ERROR's reason for a headline: the cause first, then the file it names (not its path).

    ``invalid: /x/a.parquet: changed since freeze`` reads ``invalid: changed since freeze (a.parquet)``.
    """
    moved = _PATH_THEN_CAUSE.sub(lambda m: f"{m['cause'].rstrip()} ({m[2]})", reason)
    short = _PATH.sub(r"\1", moved)
    return (
        short
        if len(short) <= BRIEF_REASON_CHARS
        else short[: BRIEF_REASON_CHARS - 1].rstrip() + "…"
    )


#: Which kind of INCONCLUSIVE: the observed drop beyond the tolerance but not significantly
#: ("possible-regression"), or within it with a bound that is not ("unresolved").
InconclusiveKind = Literal["unresolved", "possible-regression"]
UNRESOLVED: InconclusiveKind = "unresolved"


SHA_CHARS = 8  # of a candidate file's sha256 where it is named, as `git log --oneline` shortens


def checkpoint_label(model: str, version: Any, sha256: str | None = None) -> str:
    """Which checkpoint, in words: ``m@v3``, or a file given directly, ``m (candidate 9ae2a1ad)``.

    A version read back from Parquet as a float still reads ``v3``.
    """
    if version is not None:
        return f"{model}@v{int(version)}"
    return f"{model} (candidate {sha256[:SHA_CHARS]})" if sha256 else f"{model} (candidate file)"


class Verdict(StrEnum):
    """Outcome of one comparison."""

    PASS = "PASS"  # noqa: S105 - a verdict, not a password
    BASELINE = "BASELINE"
    WARN = "WARN"
    INCONCLUSIVE = "INCONCLUSIVE"
    FAIL = "FAIL"
    ERROR = "ERROR"


SEVERITY = {
    Verdict.PASS: 0,
    Verdict.BASELINE: 0,
    Verdict.WARN: 1,
    Verdict.INCONCLUSIVE: 2,
    Verdict.FAIL: 3,
    Verdict.ERROR: 4,
}


class Reference(StrEnum):
    """What a comparison is against; stored as its text in the history's ``reference`` column."""

    PREVIOUS_WEEK = "previous-week"
    BASELINE = "baseline"
    PRODUCTION = "production"  # a candidate against the production checkpoint of its line
    NONE = "none"  # a verdict on a whole evaluation: failed, nothing evaluated, first week


def higher_is_better(metric: str) -> bool:
    """Whether larger values of ``metric`` are better.

    A name no metric has (the paired timing's microseconds per example) is a cost: larger is
    worse.
    """
    from evalsentry.gate.metric_base import UnknownMetric
    from evalsentry.gate.metrics import get_metric

    try:
        return get_metric(metric).higher_is_better
    except UnknownMetric:
        return False


@dataclass(frozen=True)
class Comparison:
    """One metric (or slice) of one evaluation against one reference."""

    evaluation_id: str
    week: str
    model: str
    version: int | None
    evalset: str
    reference: str  # previous-week | baseline | production | none
    metric: str
    verdict: Verdict
    reason: str
    slice: str = OVERALL
    gating: bool = True
    reference_evaluation_id: str | None = None
    reference_week: str | None = None
    reference_version: int | None = None
    reference_value: float | None = None
    value: float | None = None
    delta: float | None = None
    drop: float | None = None
    tolerance: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    method: str | None = None
    newly_wrong: int | None = None
    newly_right: int | None = None
    n: int | None = None
    #: The one-sided upper confidence bound (1 - alpha) of the drop: PASS needs it within tolerance.
    drop_bound: float | None = None
    #: The true drop this comparison FAILs with 80% probability, inside its family.
    detectable_drop: float | None = None
    #: Regression metrics: newly wrong/right count examples whose absolute error grew/shrank by
    #: more than this; None for classification, where they count prediction flips.
    flip_delta: float | None = None
    #: Whose verdict it is: the evaluation's run kind, registry stage and checkpoint.
    kind: str | None = None
    stage: str | None = None
    checkpoint_sha256: str | None = None
    #: An INCONCLUSIVE's kind (:data:`InconclusiveKind`); None for any other verdict.
    inconclusive_kind: str | None = None

    @property
    def unresolved(self) -> bool:
        """An INCONCLUSIVE that only says the evalset cannot resolve the tolerance: no news."""
        return self.verdict == Verdict.INCONCLUSIVE and self.inconclusive_kind == UNRESOLVED

    @classmethod
    def not_evaluated(
        cls, week: str, reason: str, *, model: str = "*", evalset: str = "*"
    ) -> Comparison:
        """The ERROR of what could not be evaluated at all, and why.

        An invalid evalset (``model="*"``), a model line bound to nothing (``evalset="*"``), or
        nothing evaluated (both). No evaluation stands behind it: it is reported, and never
        recorded as a comparison (see :attr:`recorded`).
        """
        return cls(
            evaluation_id="",
            week=week,
            model=model,
            version=None,
            evalset=evalset,
            reference=Reference.NONE,
            metric="*",
            verdict=Verdict.ERROR,
            reason=reason,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Comparison:
        """A comparison as the history's comparisons table stored it (a plain record)."""
        names = {f.name for f in fields(cls)}
        values = {key: value for key, value in row.items() if key in names}
        return cls(**{**values, "verdict": Verdict(values["verdict"])})

    @property
    def recorded(self) -> bool:
        """Whether an evaluation stands behind it: only those are history rows."""
        return bool(self.evaluation_id)

    def row(self, run_id: str, created_at: Any) -> dict[str, Any]:
        """The history row of this comparison."""
        return {
            **asdict(self),
            "verdict": str(self.verdict),
            "run_id": run_id,
            "created_at": created_at,
        }

    @property
    def label(self) -> str:
        """``model/evalset metric[slice] vs reference``, for messages."""
        who = self.who(with_evalset=True)
        if self.metric == "*" and self.reference == "none":  # a verdict on the whole evaluation
            return who
        part = f"{self.metric}[{self.slice}]" if self.slice else self.metric
        return f"{who}: {part} vs {self.reference}"

    def who(self, *, with_evalset: bool) -> str:
        """Which checkpoint: ``m@v3``, ``m (candidate 9ae2a1ad)``, and ``on <evalset>`` if asked.

        Model ``*`` means no checkpoint ran: ``every checkpoint on <evalset>`` (an evalset
        problem), or ``nothing evaluated`` when the evalset is ``*`` too. Evalset ``*`` alone
        means that model line ran on nothing (``model m``: it is bound to no evalset).
        """
        if self.model == "*":
            return (
                "nothing evaluated"
                if self.evalset == "*"
                else f"every checkpoint on {self.evalset}"
            )
        if self.evalset == NO_EVALSET and self.version is None:
            return f"model {self.model}"
        who = checkpoint_label(self.model, self.version, self.checkpoint_sha256)
        return who + (f" on {self.evalset}" if with_evalset and self.evalset != NO_EVALSET else "")

    @property
    def change(self) -> str:
        """The signed change from the reference: percentage points for an accuracy-type metric.

        An accuracy-type metric (a proportion of examples, a count test) changes by
        ``-6.8 pts``; any other by the signed change of its value to 3 significant digits.
        Empty when nothing was measured.
        """
        if self.delta is None:
            return ""
        if self.method in ("exact-margin", "mcnemar-exact", "clustered-t"):
            return f"{self.delta * 100:+.1f} pts"
        return f"{self.delta:+.3g}"

    @property
    def allowed_change(self) -> float | None:
        """The tolerance as a signed change from the reference, in the direction that is worse.

        ``-0.0100`` for accuracy (it may fall by a point), ``+0.0072`` for nll (it may rise):
        read beside :attr:`delta`, both say "now minus was", so the two compare directly.
        """
        if self.tolerance is None:
            return None
        return -self.tolerance if higher_is_better(self.metric) else self.tolerance

    @property
    def flips(self) -> str:
        """``-3/+1``: examples newly wrong and newly right; empty when not counted.

        For regression, examples whose error grew and shrank by more than ``flip_delta``:
        ``-3/+1 by >0.05``.
        """
        if self.newly_wrong is None:
            return ""
        text = f"-{self.newly_wrong}/+{self.newly_right}"
        return text + (f" by >{self.flip_delta:.3g}" if self.flip_delta is not None else "")

    def brief(self, *, with_evalset: bool = False, with_verdict: bool = True) -> str:
        """A few words: verdict, who, metric, change (``FAIL m@v3 accuracy -6.8 pts (p=6e-11)``).

        The reference is named unless it is the previous week; an ERROR adds its reason in
        parentheses, cut to ``BRIEF_REASON_CHARS``. ``with_verdict=False`` leaves out the
        leading verdict word.
        """
        words = [str(self.verdict)] if with_verdict else []
        words.append(self.who(with_evalset=with_evalset))
        if self.metric != "*":
            words.append(f"{self.metric}[{self.slice}]" if self.slice else self.metric)
        if self.change:
            words.append(self.change)
            if self.reference not in ("previous-week", "none"):
                words.append(f"vs {self.reference}")
            if self.p_adjusted is not None:
                words.append(f"(p={self.p_adjusted:.1g})")
        text = " ".join(words)
        if self.verdict == Verdict.ERROR and self.reason:
            text += f" ({brief_reason(self.reason)})"
        return text

    def describe(self) -> str:
        """One line with the numbers behind the verdict."""
        text = f"{self.verdict} {self.label}"
        if self.value is not None and self.reference_value is not None:
            text += (
                f": {self.reference_value:.4f} -> {self.value:.4f} (change {self.delta:+.4f}, "
                f"allowed {self.allowed_change:+.4f}"
            )
            if self.p_adjusted is not None:
                text += f", p={self.p_adjusted:.2g} {self.method}"
            if self.flips:
                text += (
                    f", {'worse/better' if self.flip_delta is not None else 'flips'} {self.flips}"
                )
            text += ")"
        return text + (f"; {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class GateReport:
    """Every comparison the gate made, and what they add up to.

    ``strict`` makes an INCONCLUSIVE gating comparison a problem like a FAIL (exit 1, a failed
    weekly run); otherwise it is reported and exits 0. ``drift`` is the week's live-data drift
    as recorded: any result that is not PASS makes the week at least a WARN, and with
    ``drift_fails`` (``drift.fail_run``) a FAIL-level one fails the week.
    """

    week: str
    comparisons: list[Comparison]
    strict: bool = False
    drift: Sequence[DriftResult] = ()
    drift_fails: bool = False
    changes: Sequence[str] = ()  # what changed since last week, per failed line (gate.lineage)
    diagnosis: str = ""  # model or data? what those changes, flips and drift point to

    def _with(self, verdict: Verdict) -> list[Comparison]:
        return [c for c in self.comparisons if c.gating and c.verdict == verdict]

    @property
    def failures(self) -> list[Comparison]:
        """Gating comparisons that FAILed."""
        return self._with(Verdict.FAIL)

    @property
    def errors(self) -> list[Comparison]:
        """Gating comparisons that were not comparable."""
        return self._with(Verdict.ERROR)

    @property
    def warnings(self) -> list[Comparison]:
        """Gating comparisons that WARNed."""
        return self._with(Verdict.WARN)

    @property
    def inconclusive(self) -> list[Comparison]:
        """Gating comparisons that could show neither a regression nor a drop within tolerance."""
        return self._with(Verdict.INCONCLUSIVE)

    @property
    def possible_regressions(self) -> list[Comparison]:
        """Gating INCONCLUSIVEs that may be regressions (any not known to be unresolved)."""
        return [c for c in self.inconclusive if not c.unresolved]

    @property
    def unresolved(self) -> list[Comparison]:
        """Gating INCONCLUSIVEs within tolerance that the evalset cannot resolve: informational."""
        return [c for c in self.inconclusive if c.unresolved]

    @property
    def drifted(self) -> list[DriftResult]:
        """The week's drift results that are not PASS: FAIL first, then the larger PSI.

        A model whose prediction drift could not be measured (a WARN) comes last.
        """
        return sorted(
            (d for d in self.drift if d.verdict != Verdict.PASS),
            key=lambda d: (-SEVERITY[d.verdict], -d.psi if d.measured else math.inf, d.label),
        )

    @property
    def drift_failures(self) -> list[DriftResult]:
        """FAIL-level drift that fails the week (only with ``drift_fails``)."""
        return [d for d in self.drifted if d.verdict == Verdict.FAIL] if self.drift_fails else []

    @property
    def drift_verdict(self) -> Verdict:
        """What the drift makes of the week: FAIL (failing drift), WARN (any drift), or PASS."""
        if self.drift_failures:
            return Verdict.FAIL
        return Verdict.WARN if self.drifted else Verdict.PASS

    @property
    def gate_verdict(self) -> Verdict:
        """The worst gating comparison's verdict (PASS when there is nothing to compare).

        An unresolved INCONCLUSIVE is informational and does not count, unless ``strict``.
        """
        gating = [
            c.verdict for c in self.comparisons if c.gating and (self.strict or not c.unresolved)
        ]
        return max(gating, key=SEVERITY.__getitem__, default=Verdict.PASS)

    @property
    def verdict(self) -> Verdict:
        """The week's verdict: the worse of :attr:`gate_verdict` and :attr:`drift_verdict`."""
        return max(self.gate_verdict, self.drift_verdict, key=SEVERITY.__getitem__)

    @property
    def failed(self) -> bool:
        """Whether the week fails: a problem comparison, or failing drift."""
        return bool(self.problems or self.drift_failures)

    @property
    def exit_code(self) -> int:
        """0 pass, warn or inconclusive; 1 a FAIL (or failing drift; when strict, an INCONCLUSIVE).

        2 when any comparison is an ERROR.
        """
        if self.errors:
            return EXIT_USAGE
        return EXIT_CHECK_FAILED if self.failed else EXIT_OK

    @property
    def problems(self) -> list[Comparison]:
        """Gating ERRORs and FAILs (and INCONCLUSIVEs when strict), worst first.

        Overall before slices, then in gate order.
        """
        bad = self.errors + self.failures + (self.inconclusive if self.strict else [])
        return sorted(bad, key=lambda c: (-SEVERITY[c.verdict], c.slice != OVERALL))

    def headline(self) -> str:
        """One line, the verdict first: the worst problem (or finding) and a count of the rest.

        ``2026-W49: FAIL digits@v3 accuracy -6.8 pts (p=6e-11) and 3 more``. Without a problem:
        the verdict, the first possible regression (INCONCLUSIVE) or warning (WARN) if any, the
        warnings, and the unresolved comparisons (if any; informational): ``2026-W49: PASS,
        0 warning(s), 2 unresolved``. Drift leads when it decides the verdict (``2026-W49: WARN
        drift in 3 feature(s): digits mean PSI 7.05 and 2 more; the gate: PASS, 0 warning(s)``)
        and is added otherwise.
        """
        drift = self._drift_words()
        problems = self.problems
        if problems:
            several = len({c.evalset for c in self.comparisons}) > 1
            text = f"{self.week}: {problems[0].brief(with_evalset=several)}"
            text += f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            return text + (f", {drift}" if drift else "")
        gate = self._gate_words()
        if not drift:
            return f"{self.week}: {gate}"
        if SEVERITY[self.gate_verdict] > SEVERITY[self.drift_verdict]:
            return f"{self.week}: {gate}, {drift}"
        return f"{self.week}: {self.drift_verdict} {drift}; the gate: {gate}"

    def _gate_words(self) -> str:
        """The comparisons' verdict without a problem: ``PASS, 0 warning(s)`` or the first finding.

        ``INCONCLUSIVE: m@v2 accuracy -1.4 pts (p=0.2), 0 warning(s)``, ``WARN m@v2 ..., 1
        warning(s)``; unresolved comparisons counted last (``, 2 unresolved``).
        """
        verdict = self.gate_verdict
        found = {
            Verdict.INCONCLUSIVE: self.possible_regressions,
            Verdict.WARN: self.warnings,
        }.get(verdict, [])
        lead = str(verdict)
        if found:
            several = len({c.evalset for c in self.comparisons}) > 1
            first = found[0].brief(with_evalset=several, with_verdict=False)
            lead += (": " if verdict == Verdict.INCONCLUSIVE else " ") + first
            lead += f" and {len(found) - 1} more" if len(found) > 1 else ""
        unresolved = len(self.unresolved)
        note = f", {unresolved} unresolved" if unresolved else ""
        return f"{lead}, {len(self.warnings)} warning(s){note}"

    def _drift_words(self) -> str:
        """``drift in 3 feature(s): digits mean PSI 7.05 and 2 more``; empty without drift."""
        if not (drifted := self.drifted):
            return ""
        more = f" and {len(drifted) - 1} more" if len(drifted) > 1 else ""
        return f"drift in {len(drifted)} feature(s): {drifted[0].brief()}{more}"

    def message(self, sep: str = "\n") -> str:
        """The headline, then one line per FAIL and ERROR (model, evalset, metric, drop, p, flips).

        Then the diagnosis and what changed, each drifted feature (verdict first), and the
        INCONCLUSIVE comparisons (with what the evalset could detect), problems or not.

        Args:
            sep: What joins the lines; ``" | "`` gives one line, for a log or a state message.
        """
        return sep.join([self.headline(), *self.details()])

    def details(self) -> list[str]:
        """The lines behind the headline: problems, diagnosis, what changed, drift, notes."""
        problems = self.problems
        notes = [c for c in self.inconclusive if c not in problems]
        return (
            [c.describe() for c in problems]
            + ([f"diagnosis: {self.diagnosis}"] if problems and self.diagnosis else [])
            + [change for change in self.changes if problems]
            + [d.describe() for d in self.drifted]
            + [c.describe() for c in notes]
        )
