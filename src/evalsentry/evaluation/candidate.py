"""A candidate checkpoint, evaluated and gated against production and the baseline.

One function, :func:`evaluate_candidate`, serves both ``evalsentry evaluate`` (CI) and the
``evaluate-candidate`` flow. Its steps (check, load, infer, record, gate) are plain library
calls by default; the flow hands in its Prefect tasks instead, for retries, caching and names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalsentry.errors import EvalsentryError, UsageError

if TYPE_CHECKING:
    from evalsentry.checkpoints.registry import RegistryEntry
    from evalsentry.config import Config
    from evalsentry.evaluation.pipeline import Outcome, Target
    from evalsentry.gate.week import Comparison, GateReport
    from evalsentry.history.store import History


class CandidateNotEvaluated(UsageError):
    """The candidate could not be evaluated on an evalset (recorded as an error row). Exit 2."""

    def __init__(self, checkpoint: str, evalset: str, outcome: Outcome) -> None:
        self.checkpoint, self.evalset, self.outcome = checkpoint, evalset, outcome
        self.error = str(outcome.evaluation.get("error"))
        super().__init__(f"{Path(checkpoint).name} on {evalset}: {self.error}")


@dataclass(frozen=True)
class CandidateSteps:
    """The steps of a candidate evaluation: the library's calls, or a flow's tasks."""

    check: Callable[[str, str], dict[str, Any]]  # verify and validate an evalset; raises
    load: Callable[[str, str], Any]
    infer: Callable[..., Outcome]
    record: Callable[[Sequence[Outcome]], Any]
    gate: Callable[[dict[str, Any]], GateReport]
    record_verdicts: Callable[[Sequence[dict[str, Any]]], Any]  # comparisons rows


@dataclass(frozen=True)
class CandidateRun:
    """What a candidate evaluation produced: its outcomes, validations and gate report."""

    week: str
    run_id: str
    report: GateReport
    outcomes: list[Outcome] = field(default_factory=list)
    validations: dict[str, dict[str, Any]] = field(default_factory=dict)


def candidate_evalsets(
    model: str,
    settings: Config,
    history: History,
    selected: Sequence[str] | None = None,
    *,
    new_model: bool = False,
) -> list[str]:
    """The evalsets a candidate of ``model`` runs on, after the checks that need no evaluation.

    Raises:
        UsageError: An unusable store, a bad or unknown model line (unless ``new_model``), or no
            evalset bound to it.

    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.evaluation.planning import check_model_line, evalsets_for
    from evalsentry.names import check_name

    check_name("model", model)
    history.check_writable()  # before the evaluation, not after it
    if not new_model:
        check_model_line(model, Registry(settings.registry_url), history)
    return evalsets_for(model, settings, selected)


def _library_steps(
    settings: Config, history: History, run_id: str, week: str, revalidate: bool
) -> CandidateSteps:
    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.evalsets.validation_cache import ValidationCache, check_evalset_reusing
    from evalsentry.evaluation.pipeline import evaluate_checkpoint, record
    from evalsentry.gate.week import gate_candidate

    cache = ValidationCache(settings.store_url)

    def check(name: str, folder: str) -> dict[str, Any]:
        return check_evalset_reusing(
            name, folder, cache, run_id=run_id, week=week, revalidate=revalidate
        )

    def gate(evaluation: dict[str, Any]) -> GateReport:
        import pandas as pd

        return gate_candidate(
            history, pd.Series(evaluation), settings.gate, evalsets_dir=settings.evalsets_dir
        )

    return CandidateSteps(
        check=check,
        load=lambda name, folder: load_evalset(name, evalsets_dir=folder),
        infer=evaluate_checkpoint,
        record=lambda outcomes: record(history, outcomes),
        gate=gate,
        record_verdicts=history.append_comparisons,
    )


def _candidate_target(model: str, checkpoint: Path, registry_url: str | None = None) -> Target:
    """The candidate file as a target, its sha256 taken now: every row and verdict names it.

    The evaluation then loads only these bytes (a file changed meanwhile is refused). A file
    registered as a version of ``model`` is named by that version (``m@v2``), else by its
    sha256 (``m (candidate 9ae2a1ad)``); it is evaluated as the file either way.
    """
    from evalsentry.evaluation.pipeline import Target
    from evalsentry.storage import check_path_text, sha256_file

    path = checkpoint.resolve()
    check_path_text(path)
    try:
        sha = sha256_file(path)[0]
    except OSError:  # missing or unreadable: the evaluation says so, as its error row
        sha = None
    entry = _registered_entry(model, sha, registry_url)
    if entry is None:
        return Target(model, str(path), sha256=sha)
    # A registered file loads as its entry pinned it: factory, kwargs, transform, lineage.
    return Target(model, str(path), version=entry.version, sha256=sha, lineage=entry.lineage)


def _registered_entry(
    model: str, sha: str | None, registry_url: str | None
) -> RegistryEntry | None:
    """The version of ``model`` registered with these bytes, if any (None when unknown)."""
    from evalsentry.checkpoints.registry import Registry

    if sha is None or registry_url is None:
        return None
    try:
        entries = Registry(registry_url).list(model)
    except (EvalsentryError, OSError):  # an unreadable registry names no version
        return None
    return next((e for e in entries if e.sha256 == sha), None)


def evaluate_candidate(
    checkpoint: str | Path,
    model: str,
    names: Sequence[str],
    settings: Config,
    history: History,
    *,
    device: str = "auto",
    strict: bool = False,
    revalidate: bool = False,
    steps: CandidateSteps | None = None,
) -> CandidateRun:
    """Evaluate ``checkpoint`` as a candidate of ``model`` on ``names``; gate each result.

    Every evalset is verified by hash before use and validated (the library step reuses a passed
    expectation-suite result while its manifest, suite and GX version are unchanged); each result is recorded as a
    candidate check (``kind`` ``CANDIDATE_CHECK``, never a week's result) before it is gated, so an
    unusable candidate leaves its error row behind; the verdicts are recorded too (an ERROR for
    an evaluation that failed), so what CI decided about a file is in the history.

    Args:
        checkpoint: The checkpoint file.
        model: The model line it is a candidate of (see :func:`candidate_evalsets`).
        names: The evalsets to evaluate it on.
        settings: The project configuration.
        history: The history to record into and gate against.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        strict: Whether an inconclusive comparison fails the gate.
        revalidate: Run the expectation suite even where a stored passed result still applies
            (the files are re-hashed either way; see ``evalsentry.evalsets.validation_cache``).
        steps: The flow's tasks in place of the library's calls (the default).

    Returns:
        The outcomes, validations and the gate report over every evalset.

    Raises:
        CandidateNotEvaluated: The candidate failed on an evalset (its error row is recorded).

    """
    from evalsentry.evaluation.pipeline import new_run_id
    from evalsentry.gate.lineage import explain_candidate
    from evalsentry.gate.week import GateReport
    from evalsentry.weeks import iso_week, now_utc

    week, run_id = iso_week(), new_run_id()
    if steps is None:
        steps = _library_steps(settings, history, run_id, week, revalidate)
        from evalsentry.evaluation.isolation import prestart

        prestart()  # the library's inference runs in a child: torch loads meanwhile
    target, outcomes, validations, comparisons = _evaluate_each(
        checkpoint, model, names, settings, steps, run_id, week, device
    )
    comparisons += _serving(target, outcomes, comparisons, settings, steps, device)
    report = GateReport(week, comparisons, strict or settings.gate.strict)
    report = explain_candidate(history, report)  # what changed, model or data? (FAILs only)
    steps.record_verdicts([c.row(run_id, now_utc()) for c in report.comparisons if c.recorded])
    return CandidateRun(week, run_id, report, outcomes, validations)


def _evaluate_each(
    checkpoint: str | Path,
    model: str,
    names: Sequence[str],
    settings: Config,
    steps: CandidateSteps,
    run_id: str,
    week: str,
    device: str,
) -> tuple[Target, list[Outcome], dict[str, dict[str, Any]], list[Comparison]]:
    """Check, evaluate and record the candidate on each evalset in turn, and gate each result.

    Returns the candidate as a target (its file hashed once), the outcomes, the validations
    and the comparisons. A failed evaluation stops it:
    its ERROR verdict is recorded and :class:`CandidateNotEvaluated` raised.
    """
    from evalsentry.cost.meter import CostMeter
    from evalsentry.gate.pairs import failed_verdict
    from evalsentry.names import CANDIDATE_CHECK
    from evalsentry.weeks import now_utc

    meter = CostMeter()
    meter.start_in_background()  # its hardware probe overlaps importing torch, loading the data
    target = _candidate_target(model, Path(checkpoint), settings.registry_url)
    outcomes: list[Outcome] = []
    validations: dict[str, dict[str, Any]] = {}
    comparisons: list[Comparison] = []
    try:
        for name in names:
            validations[name] = steps.check(name, settings.evalsets_dir)
            outcome = steps.infer(
                target,
                steps.load(name, settings.evalsets_dir),
                config=settings,
                run_id=run_id,
                week=week,
                kind=CANDIDATE_CHECK,
                device=device,
                meter=meter,
                validation=validations[name],
            )
            outcomes.append(outcome)
            steps.record([outcome])
            if not outcome.ok:
                failed = failed_verdict(outcome.evaluation)
                steps.record_verdicts([failed.row(run_id, now_utc())])
                raise CandidateNotEvaluated(str(checkpoint), name, outcome)
            comparisons += steps.gate(outcome.evaluation).comparisons
    finally:
        meter.close()
    return target, outcomes, validations, comparisons


def _serving(
    target: Target,
    outcomes: Sequence[Outcome],
    comparisons: Sequence[Comparison],
    settings: Config,
    steps: CandidateSteps,
    device: str,
) -> list[Comparison]:
    """A serving variant's or student's one verdict on quality and cost (:mod:`.serving`).

    [] for any other candidate.

    Timed against the version it is a variant of on the first evalset; a timing that could not
    run is a WARN saying so (the cost was not weighed), never silence.
    """
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.evaluation.isolation import failure_reason
    from evalsentry.evaluation.pipeline import Target
    from evalsentry.evaluation.serving import (
        TeacherNotRegistered,
        time_variant,
        weigh,
        weighed_against,
    )
    from evalsentry.evaluation.timing import serving_bill
    from evalsentry.gate.pairs import owner
    from evalsentry.gate.verdicts import Comparison, Reference, Verdict
    from evalsentry.names import TIMING_METRIC

    made_from = {"variant_of", "teacher"} & set(target.lineage or {})
    if not outcomes or settings.registry_url is None or not made_from:
        return []
    registry, row = Registry(settings.registry_url), outcomes[0].evaluation
    try:
        against = weighed_against(target, lambda: registry.list(target.model))
    except (TeacherNotRegistered, EvalsentryError, OSError) as exc:  # not found, or unreadable
        said = f"{target.label} (student): cost not weighed: {exc}"
        return [Comparison(**owner(row), reference=Reference.PRODUCTION, metric=TIMING_METRIC, verdict=Verdict.WARN, reason=said, gating=False)]  # fmt: skip
    if against is None:
        return []
    version, what = against
    label = f"{target.label} ({what} of v{version})"
    whose = {**owner(row), "reference_version": version}
    try:
        parent = Target.from_entry(registry.show(target.model, version))
        evalset = steps.load(str(row["evalset"]), settings.evalsets_dir)
        timing = time_variant(target, parent, evalset, settings, device)
    except Exception as exc:  # noqa: BLE001 - whatever failed, the row says cost was not weighed
        reason = f"{label}: cost not weighed: paired timing against v{version} could not run: {failure_reason(exc, 'timing')}"  # fmt: skip
        return [Comparison(**whose, reference=Reference.PRODUCTION, metric=TIMING_METRIC, verdict=Verdict.WARN, reason=reason, gating=False)]  # fmt: skip
    ids = {outcome.evaluation["evaluation_id"] for outcome in outcomes}
    quality = [c for c in comparisons if c.evaluation_id in ids]  # every evalset's verdicts
    bill = serving_bill(settings, target.model, timing.device)
    return [weigh(label, quality, timing, owner(row), {"reference_version": version}, bill)]
