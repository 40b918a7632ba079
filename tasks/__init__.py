"""Thin Prefect tasks: one evalsentry library call each, plus retries, caching, names and tags."""

from __future__ import annotations

from typing import Any

from evalsentry.errors import UsageError


def unless_usage_error(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failure that may pass (an object store hiccup), never one of the user's input.

    A ``retry_condition_fn``: Prefect wraps the raised exception as the Failed state's data.
    """
    return not isinstance(state.data, UsageError)
