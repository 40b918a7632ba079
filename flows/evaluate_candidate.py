"""Manual evaluation of one checkpoint against production and baseline: the flow twin of `evalsentry evaluate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, runtime

from evalsentry.config import load_config
from evalsentry.cost import CostMeter
from evalsentry.errors import UsageError
from evalsentry.flows.runs import RUN_ID_CHARS, fail, short_id
from evalsentry.gate import GateReport
from evalsentry.history import History, iso_week, now_utc
from evalsentry.names import check_name
from evalsentry.pipeline import Target, check_model_line, evalsets_for, new_run_id
from evalsentry.registry import Registry
from evalsentry.storage import sha256_file
from evalsentry.tasks import events
from evalsentry.tasks.evalsets import load_evalset, validate_evalset
from evalsentry.tasks.evaluate import evaluate, on_device
from evalsentry.tasks.gate import gate_candidate
from evalsentry.tasks.history import write_comparisons, write_history
from evalsentry.tasks.report import publish_report

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
    config: str = "evalsentry.yaml",
    new_model: bool = False,
) -> Any:
    """Evaluate ``checkpoint`` as a candidate of ``model``; gate it against production and baseline.

    The result is recorded as a candidate evaluation, never as a week's production result.
    A ``model`` neither registered nor in the history is refused unless ``new_model``.
    """
    logger = get_run_logger()
    settings = load_config(config)
    check_name("model", model)
    history = History(settings.store_url)
    try:
        history.check_root()
        if not new_model:
            check_model_line(model, Registry(settings.registry_url), history)
        names = evalsets_for(model, settings, evalsets)
    except UsageError as exc:  # an unusable store, an unknown model line, no evalset for it
        return fail(f"{iso_week()}: ERROR {model} candidate not evaluated", [str(exc)])
    week, run_id = iso_week(), new_run_id()
    target = Target(model, str(Path(checkpoint).resolve()))
    meter, inference = CostMeter(), on_device(evaluate, device)
    outcomes, validations, comparisons = [], {}, []
    try:
        for name in names:
            validations[name] = validate_evalset(name, settings.evalsets_dir)
            loaded = load_evalset(name, settings.evalsets_dir)
            outcome = inference(
                target,
                loaded,
                config=settings,
                run_id=run_id,
                week=week,
                kind="candidate",
                device=device,
                meter=meter,
                validation=validations[name],
            )
            outcomes.append(outcome)
            write_history(settings.store_url, [outcome])
            if not outcome.ok:
                events.checkpoint_failed(outcome.evaluation)
                return fail(
                    f"{week}: ERROR {model} candidate {Path(checkpoint).name} (evaluation failed)",
                    [f"{model} candidate {checkpoint}: {outcome.evaluation['error']}"],
                )
            comparisons += gate_candidate(
                settings.store_url, outcome.evaluation, settings.gate, settings.evalsets_dir
            ).comparisons
    finally:
        meter.close()
    report = GateReport(week, comparisons, settings.gate.strict)
    write_comparisons(settings.store_url, [c.row(run_id, now_utc()) for c in comparisons])
    location = publish_report(
        settings.store_url,
        report,
        outcomes,
        validations,
        run_name=runtime.flow_run.name or f"evaluate-candidate-{model}-{run_id[:RUN_ID_CHARS]}",
        key_prefix="evaluate-candidate",
    )
    logger.info("report: %s", location)
    for comparison in report.warnings + (report.inconclusive if not report.strict else []):
        logger.warning(comparison.describe())
    if report.problems:
        events.candidate_failed(report, model)
        return fail(report.headline(), [c.describe() for c in report.problems])
    return {"verdict": str(report.verdict), "report": location}
