"""Registry task: which checkpoints this run evaluates."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from evalsentry import pipeline
from evalsentry.pipeline import Target
from evalsentry.registry import Registry
from evalsentry.tasks import unless_usage_error


@task(
    name="resolve-checkpoints",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=unless_usage_error,
)
def resolve_targets(
    registry_url: str, models: Sequence[str] | None, stages: Sequence[str]
) -> list[Target]:
    """The newest version of each model in each stage; fails when that is nothing."""
    return pipeline.resolve_targets(Registry(registry_url), models, stages)
