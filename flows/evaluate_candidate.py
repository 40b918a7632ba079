"""Manual evaluation of one checkpoint against production and baseline: the flow twin of `evalsentry evaluate`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prefect import flow, runtime
from prefect.client.schemas.objects import State

from evalsentry.config import Config, load_config
from evalsentry.errors import UsageError
from evalsentry.evaluation.candidate import (
    CandidateNotEvaluated,
    CandidateSteps,
    candidate_evalsets,
)
from evalsentry.evaluation.candidate import evaluate_candidate as evaluate_candidate_
from evalsentry.flows.runs import RUN_ID_CHARS, complete, fail, quiet_domain_errors, short_id
from evalsentry.gate.week import GateReport, Verdict
from evalsentry.history.store import History
from evalsentry.names import check_name
from evalsentry.storage import sha256_file
from evalsentry.tasks import events
from evalsentry.tasks.evalsets import check_evalset, load_evalset
from evalsentry.tasks.evaluate import evaluate_checkpoint, on_device
from evalsentry.tasks.gate import gate_candidate
from evalsentry.tasks.history import write_comparisons, write_history
from evalsentry.tasks.report import publish_report
from evalsentry.weeks import iso_week

SHA_CHARS = 8  # of the checkpoint's sha256 in the run name, as `git log --oneline` shortens


def _run_name() -> str:
    """``evaluate-candidate-<model>-<checkpoint sha256, short>-<id>``; its report file too."""
    parameters = runtime.flow_run.parameters
    try:
        sha = sha256_file(parameters["checkpoint"])[0][:SHA_CHARS]
    except OSError:  # the flow itself fails on the missing file, with the message
        sha = "unreadable"
    return f"evaluate-candidate-{parameters.get('model')}-{sha}-{short_id()}"


@flow(name="evaluate-candidate", flow_run_name=_run_name, log_prints=True)
def evaluate_candidate(
    checkpoint: str,
    model: str,
    evalsets: list[str] | None = None,
    device: str = "auto",
    config_path: str = "evalsentry.yaml",
    new_model: bool = False,
) -> Any:
    """Evaluate ``checkpoint`` as a candidate of ``model``; gate it against production and baseline.

    The result is recorded as a candidate check (``kind`` candidate), never as a week's result.
    A ``model`` neither registered nor in the history is refused unless ``new_model``.

    Args:
        checkpoint: The candidate's checkpoint file, relative to the run's working directory.
        model: The model line it is a candidate of (as registered).
        evalsets: Only these evalsets; empty: the line's bound evalsets.
        device: auto (a GPU when there is one), cpu, cuda or cuda:N.
        config_path: The project's evalsentry.yaml, relative to the run's working directory.
        new_model: Allow a model line that is neither registered nor in the history.
    """
    quiet_domain_errors()
    settings = load_config(config_path)
    check_name("model", model)
    history = History(settings.store_url)
    try:
        names = candidate_evalsets(model, settings, history, evalsets, new_model=new_model)
    except UsageError as exc:  # an unusable store, an unknown model line, no evalset for it
        return fail(f"{iso_week()}: ERROR {model} candidate not evaluated", [str(exc)])
    steps = _task_steps(settings, device)
    try:
        run = evaluate_candidate_(
            checkpoint, model, names, settings, history, device=device, steps=steps
        )
    except CandidateNotEvaluated as exc:
        events.checkpoint_failed(exc.outcome.evaluation)
        return fail(
            f"{exc.outcome.evaluation.get('week') or iso_week()}: ERROR {model} candidate "
            f"{Path(checkpoint).name} (evaluation failed)",
            [f"{model} candidate {checkpoint}: {exc.error}"],
        )
    report, run_id, outcomes, validations = run.report, run.run_id, run.outcomes, run.validations
    location = publish_report(
        settings.store_url,
        report,
        [o.evaluation for o in outcomes],
        [m for o in outcomes for m in o.metrics],
        validations,
        run_name=runtime.flow_run.name or f"evaluate-candidate-{model}-{run_id[:RUN_ID_CHARS]}",
        key_prefix="evaluate-candidate",
        config=settings,
    )
    if report.problems:
        events.candidate_failed(report, model)
        return fail(
            report.headline(), [*[c.describe() for c in report.problems], f"report: {location}"]
        )
    return _completed(report, location)


def _task_steps(settings: Config, device: str) -> CandidateSteps:
    """The candidate evaluation's steps as this flow's tasks, recording into the project's store."""
    return CandidateSteps(
        check=check_evalset,
        load=load_evalset,
        infer=on_device(evaluate_checkpoint, device),
        record=lambda outcomes: write_history(settings.store_url, outcomes),
        gate=lambda evaluation: gate_candidate(
            settings.store_url, evaluation, settings.gate, settings.evalsets_dir
        ),
        record_verdicts=lambda rows: write_comparisons(settings.store_url, rows),
    )


def _completed(report: GateReport, location: str) -> State:
    """The Completed state of a candidate that passed (or only warned): its verdict in words."""
    # The Completed state's message is the verdict, as the weekly run's (words, not "Completed").
    notes = report.warnings + (report.inconclusive if not report.strict else [])
    level = logging.INFO if report.verdict == Verdict.PASS else logging.WARNING
    return complete(
        report.headline(),
        level,
        [*[(logging.WARNING, c.describe()) for c in notes], (logging.INFO, f"report: {location}")],
        {"verdict": str(report.verdict), "report": location},
    )
