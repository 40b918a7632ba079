"""Manual evaluation of one checkpoint against production: the flow twin of `evalsentry evaluate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import Failed

from evalsentry.config import load_config
from evalsentry.cost import CostMeter
from evalsentry.evalsets import list_evalsets
from evalsentry.gate import GateReport
from evalsentry.history import iso_week, now_utc
from evalsentry.names import check_name
from evalsentry.pipeline import Target, new_run_id
from tasks.evalsets import load_evalset, validate_evalset
from tasks.evaluate import evaluate, on_device
from tasks.gate import gate_candidate
from tasks.history import write_comparisons, write_history
from tasks.report import publish_report


@flow(name="evaluate-candidate", flow_run_name="evaluate-candidate-{model}", log_prints=True)
def evaluate_candidate(
    checkpoint: str,
    model: str,
    evalsets: list[str] | None = None,
    device: str = "auto",
    config: str = "evalsentry.yaml",
) -> Any:
    """Evaluate ``checkpoint`` as a candidate of ``model`` and gate it against production.

    The result is recorded as a candidate evaluation, never as a week's production result.
    """
    logger = get_run_logger()
    settings = load_config(config)
    check_name("model", model)
    week, run_id = iso_week(), new_run_id()
    target = Target(model, str(Path(checkpoint).resolve()))
    names = evalsets or list_evalsets(settings.evalsets_dir)
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
                return Failed(
                    message=f"{model} candidate {checkpoint}: {outcome.evaluation['error']}"
                )
            comparisons += gate_candidate(
                settings.store_url, outcome.evaluation, settings.gate, settings.evalsets_dir
            ).comparisons
    finally:
        meter.close()
    report = GateReport(week, comparisons)
    write_comparisons(settings.store_url, [c.row(run_id, now_utc()) for c in comparisons])
    location = publish_report(
        settings.store_url, report, outcomes, validations, key_prefix="evaluate-candidate"
    )
    logger.info("report: %s", location)
    if report.errors or report.failures:
        return Failed(message=report.message())
    return {"verdict": str(report.verdict), "report": location}
