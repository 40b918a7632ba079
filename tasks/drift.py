"""Live-data drift task: compare this week's production inputs and predictions with the frozen set."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.evalsets.evalset import Evalset
from evalsentry.evaluation.pipeline import Outcome, live_drift
from evalsentry.gate.drift import DriftResult


@task(name="check-drift", cache_policy=NO_CACHE)
def check_drift(
    evalset: Evalset, outcomes: Sequence[Outcome], config: Config, device: str
) -> list[DriftResult]:
    """Input and prediction drift of the evalset's configured live sample (none configured: []).

    Runs the production models on the live sample: submit it through ``on_device`` (a ``gpu``
    tag on CUDA).
    """
    return live_drift(evalset, outcomes, config=config, device=device)
