"""Registry task: what a weekly run evaluates, and the ERROR rows of what it cannot."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from evalsentry.checkpoints.registry import Registry
from evalsentry.config import Config
from evalsentry.evaluation import planning
from evalsentry.evaluation.planning import WeekPlan
from evalsentry.history.store import History
from evalsentry.tasks import unless_usage_error


@task(
    name="plan-week",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=unless_usage_error,
)
def plan_week(
    config: Config,
    week: str,
    run_id: str,
    models: Sequence[str] | None,
    evalsets: Sequence[str] | None,
    stages: Sequence[str],
) -> WeekPlan:
    """The checkpoints and evalsets this run evaluates; fails when that is nothing."""
    return planning.plan_week(
        config,
        Registry(config.registry_url),
        History(config.store_url),
        week=week,
        run_id=run_id,
        models=models,
        evalsets=evalsets,
        stages=stages,
    )
