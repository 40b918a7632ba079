"""Gate tasks: the weekly gate and the candidate gate, over the history."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from evalsentry.config import Config
from evalsentry.gate import week as gate
from evalsentry.gate.week import GateReport
from evalsentry.history.store import History
from evalsentry.sections import GatePolicy


@task(name="gate-week", cache_policy=NO_CACHE)
def gate_week(
    store_url: str, week: str, config: Config, models: Sequence[str] | None = None
) -> GateReport:
    """The week's verdict: every result recorded for it, and its drift, as ``evalsentry gate``.

    ``models``: only these model lines' results (a flow that records some lines only). A line
    of last week with no row this week is MISSING, unless archived or imported: the weekly run
    does not wait for the import flow, which gates its own lines (with ``models``).
    """
    return gate.gate_project_week(History(store_url), week, config, models)


@task(name="gate-candidate", cache_policy=NO_CACHE)
def gate_candidate(
    store_url: str, evaluation: dict[str, object], policy: GatePolicy, evalsets_dir: str
) -> GateReport:
    """Compare a candidate evaluation with the latest production result of its model."""
    return gate.gate_candidate(
        History(store_url), pd.Series(evaluation), policy, evalsets_dir=evalsets_dir
    )
