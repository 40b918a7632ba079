"""Registry task: which checkpoints this run evaluates."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from evalsentry.errors import NotRegistered
from evalsentry.pipeline import Target
from evalsentry.registry import Registry


@task(name="resolve-checkpoints", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def resolve_targets(
    registry_url: str, models: Sequence[str] | None, stages: Sequence[str]
) -> list[Target]:
    """The newest version of each model in each stage (a stage with no version is skipped)."""
    registry = Registry(registry_url)
    targets = []
    for model in models or registry.models():
        for stage in stages:
            try:
                targets.append(Target.from_entry(registry.resolve(model, stage)))
            except NotRegistered:
                continue
    return targets
