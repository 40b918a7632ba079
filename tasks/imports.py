"""Import tasks: find each configured line's new harness runs, record one, publish the list."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.harnesses import pickup
from evalsentry.harnesses.pickup import Found, Imported
from evalsentry.history.store import History
from evalsentry.reports.imports import imports_markdown
from evalsentry.tasks import unless_usage_error

ARTIFACT_KEY = "import-results"


@task(name="find-new-runs", cache_policy=NO_CACHE)
def find_new_runs(config: Config, models: Sequence[str] | None = None) -> list[Found]:
    """Every run the ``imports:`` lines name, each marked import, skipped or refused."""
    return pickup.plan_imports(History(config.store_url), config, models)


@task(
    name="import-run",
    task_run_name="import-{found.line}",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=unless_usage_error,
)
def import_run(found: Found, config: Config, week: str) -> Imported:
    """Record one new run as the week's result of its line, as ``evalsentry import`` does."""
    return pickup.import_found(History(config.store_url), found, config, week)


@task(name="publish-imports", cache_policy=NO_CACHE)
def publish_imports(
    week: str, found: Sequence[Found], imported: Sequence[Imported], verdict: str
) -> None:
    """The runs found and what became of each, as the run's markdown artifact."""
    create_markdown_artifact(
        imports_markdown(week, found, imported, verdict),
        key=ARTIFACT_KEY,
        description=f"harness runs imported for {week}",
    )
