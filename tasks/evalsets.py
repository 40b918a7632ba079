"""Evalset tasks: verify and validate once per run, load for inference, check for split leaks."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from evalsentry.config import Config
from evalsentry.evalsets import check, evalset
from evalsentry.evalsets.evalset import Evalset, evalset_folder, fingerprint
from evalsentry.gate.leak_verdicts import leak_verdicts
from evalsentry.gate.verdicts import Comparison


def _content_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    """The evalset's manifest and data-file versions, within this flow run: any change re-verifies."""
    folder = evalset_folder(parameters["name"], parameters["evalsets_dir"])
    return f"evalset-{fingerprint(folder)}-{context.task_run.flow_run_id}"


@task(name="check-evalset", cache_key_fn=_content_key, persist_result=True)
def check_evalset(name: str, evalsets_dir: str) -> dict[str, Any]:
    """Verify the evalset's hashes and run its expectation suite; raises if either fails.

    The task of ``evalsentry.evalsets.check.check_evalset`` (which raises), not of ``validate_evalset``
    (which returns the failures).
    """
    return check.check_evalset(name, evalsets_dir).to_dict()


@task(name="load-evalset", cache_policy=NO_CACHE)
def load_evalset(name: str, evalsets_dir: str) -> Evalset:
    """Load a verified evalset's tensors (hashes are cached per process, so this is cheap)."""
    return evalset.load_evalset(name, evalsets_dir=evalsets_dir)


@task(name="check-split-leaks", cache_policy=NO_CACHE)
def check_split_leaks(
    evaluations: list[dict[str, Any]], evalsets: dict[str, Evalset], config: Config
) -> list[Comparison]:
    """Each evaluation's split-leak verdict, where its line names its training data."""
    return leak_verdicts(evaluations, evalsets, config)
