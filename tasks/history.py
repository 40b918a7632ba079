"""History tasks: storage I/O, retried because object stores and network disks fail transiently."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from evalsentry.evaluation.pipeline import Outcome, record
from evalsentry.history.store import History
from evalsentry.names import WEEKLY_STAGES


@task(name="write-history", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def write_history(
    store_url: str,
    outcomes: Sequence[Outcome],
    stages: Sequence[str] = WEEKLY_STAGES,
    retire: Sequence[str] = (),
) -> int:
    """Append the run's evaluations, metrics and predictions; returns the rows written.

    ``stages``: what the run evaluates of each model line (its rows supersede those);
    ``retire``: the week's rows of lines its plan no longer has.
    """
    record(History(store_url), outcomes, stages, retire)
    return len(outcomes)


@task(name="write-comparisons", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def write_comparisons(store_url: str, rows: Sequence[dict[str, Any]]) -> int:
    """Append the gate's verdicts for audit."""
    History(store_url).append_comparisons(rows)
    return len(rows)


@task(name="write-drift", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2)
def write_drift(store_url: str, rows: Sequence[dict[str, Any]]) -> int:
    """Append live-data drift results."""
    History(store_url).append_drift(rows)
    return len(rows)
