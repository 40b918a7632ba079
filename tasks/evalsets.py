"""Evalset tasks: verify and validate once per run, then load for inference."""

from __future__ import annotations

import hashlib
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from evalsentry import evalsets
from evalsentry.evalsets import MANIFEST, Evalset, evalset_folder


def _content_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    """The evalset's manifest and data-file stats, within this flow run: any change re-verifies."""
    folder = evalset_folder(parameters["name"], parameters["evalsets_dir"])
    stats = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    )
    manifest = (folder / MANIFEST).read_bytes()
    digest = hashlib.sha256(manifest + repr(stats).encode()).hexdigest()
    return f"evalset-{digest}-{context.task_run.flow_run_id}"


@task(name="validate-evalset", cache_key_fn=_content_key, persist_result=True)
def validate_evalset(name: str, evalsets_dir: str) -> dict[str, Any]:
    """Verify the evalset's hashes and run its expectation suite; raises if either fails."""
    return evalsets.check_evalset(name, evalsets_dir).to_dict()


@task(name="load-evalset", cache_policy=NO_CACHE)
def load_evalset(name: str, evalsets_dir: str) -> Evalset:
    """Load a verified evalset's tensors (hashes are cached per process, so this is cheap)."""
    return evalsets.load_evalset(name, evalsets_dir=evalsets_dir)
