"""Hostile or broken Inspect logs are data: any shape gives a run or one line, never a traceback.

Hypothesis replaces one field of a real Inspect log (written as ``.json``), in its header and in
one of its samples or reductions, with any JSON value. Reading the run, reducing it per example
and hashing its identity either succeed, with finite scores, or raise ``HarnessLogInvalid``
naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evalsentry.harnesses.inspect_logs import read_inspect
from evalsentry.harnesses.run import HarnessLogInvalid, evalset_sha256, per_example, run_identity
from tests.unit.harnesses.test_hostile_logs import JSON

HEADER_FIELDS = [
    ("version",), ("status",), ("eval", "task"), ("eval", "task_version"), ("eval", "model"),
    ("eval", "config", "epochs"), ("eval", "config", "epochs_reducer"),
    ("eval", "dataset", "sample_ids"), ("eval", "packages"), ("eval", "revision"),
    ("eval", "model_args"), ("plan", "steps"), ("plan", "config"), ("results", "scores"),
    ("stats", "model_usage"), ("stats", "started_at"), ("stats", "completed_at"), ("reductions",),
]  # fmt: skip
SAMPLE_FIELDS = ["id", "epoch", "input", "target", "scores", "metadata"]


@pytest.fixture(scope="module")
def good_log(harness_logs: Path) -> dict[str, Any]:
    """A real Inspect run (two epochs reduced by at_least_1) as the JSON of a ``.json`` log."""
    from inspect_ai.log import read_eval_log
    from inspect_ai.log._file import eval_log_json_str

    log = read_eval_log(str(next((harness_logs / "inspect" / "reduced").glob("*.eval"))))
    document: dict[str, Any] = json.loads(eval_log_json_str(log))
    return document


def _set(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    target: Any = document
    for key in path[:-1]:
        if not isinstance(target, dict | list):
            return
        target = target[key] if isinstance(target, list) else target.setdefault(key, {})
    if isinstance(target, dict):
        target[path[-1]] = value
    elif isinstance(target, list) and isinstance(path[-1], int):
        target[path[-1] % len(target)] = value


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    header=st.tuples(st.sampled_from(HEADER_FIELDS), JSON),
    sample=st.tuples(st.integers(0, 100), st.sampled_from(SAMPLE_FIELDS), JSON),
    in_reductions=st.booleans(),
)
# Found by this test: a key holding a newline was quoted in the field's path, on two lines.
@example(
    header=(("stats", "model_usage"), {"\n": None}), sample=(0, "id", None), in_reductions=False
)
def test_any_damaged_field_is_a_run_or_one_line(
    good_log: dict[str, Any],
    tmp_path: Path,
    header: tuple[tuple[str, ...], Any],
    sample: tuple[int, str, Any],
    in_reductions: bool,
) -> None:
    """Whatever the field holds: a run whose scores are finite, or HarnessLogInvalid."""
    document = json.loads(json.dumps(good_log))
    _set(document, header[0], header[1])
    index, field, value = sample
    reductions = document.get("reductions")
    first = reductions[0] if isinstance(reductions, list) and reductions else None
    if in_reductions and isinstance(first, dict):
        reduced = first.get("samples")
        if isinstance(reduced, list) and reduced:
            _set(reduced[index % len(reduced)], ("value" if field == "scores" else field,), value)
    elif isinstance(document.get("samples"), list) and document["samples"]:
        _set(document["samples"][index % len(document["samples"])], (field,), value)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(document, default=str))
    try:
        run = read_inspect(str(path))
        columns = per_example(run)
        evalset_sha256(run, columns)
        run_identity(run)
    except HarnessLogInvalid as refused:
        message = str(refused)
        assert str(path) in message and "\n" not in message and "nothing was recorded" in message
        return
    assert all(math.isfinite(v) for values in run.scores.values() for v in values)
