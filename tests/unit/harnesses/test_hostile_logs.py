"""Hostile or broken lm-eval logs are data: any shape gives a run or one line, never a traceback.

Hypothesis replaces one field of a real run's results file and one field of one of its samples
with any JSON value (huge integers, NaN, deep nesting, lists where objects belong, text where
numbers belong). Reading the run, averaging it per example and hashing its identity either
succeed or raise ``HarnessLogInvalid`` naming the file.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalsentry.harnesses.lm_eval_logs import read_lm_eval
from evalsentry.harnesses.run import HarnessLogInvalid, evalset_sha256, per_example, run_identity

RESULT_FIELDS = [
    "configs", "config", "higher_is_better", "n-shot", "versions", "task_hashes", "date",
    "git_hash", "total_evaluation_time_seconds", "lm_eval_version", "model_name",
]  # fmt: skip
SAMPLE_FIELDS = [
    "doc_id",
    "doc_hash",
    "prompt_hash",
    "target_hash",
    "filter",
    "metrics",
    "acc",
    "doc",
]

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def good_run(harness_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results and samples files of a real lm-eval run, to damage copies of."""
    source = next((harness_logs / "lm" / "good").rglob("results_*.json")).parent
    target = tmp_path_factory.mktemp("good-lm-run") / "run"
    shutil.copytree(source, target)
    return target


def _damaged(run: Path, into: Path, result: tuple[str, Any], sample: tuple[int, str, Any]) -> Path:
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(run, into)
    results = next(into.glob("results_*.json"))
    document = json.loads(results.read_text())
    document[result[0]] = result[1]
    results.write_text(json.dumps(document))
    samples = next(into.glob("samples_*.jsonl"))
    lines = samples.read_text().splitlines()
    line, field, value = sample
    row = json.loads(lines[line % len(lines)])
    row[field] = value
    lines[line % len(lines)] = json.dumps(row)
    samples.write_text("\n".join(lines) + "\n")
    return into


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    result=st.tuples(st.sampled_from(RESULT_FIELDS), JSON),
    sample=st.tuples(st.integers(0, 100), st.sampled_from(SAMPLE_FIELDS), JSON),
)
def test_any_damaged_field_is_a_run_or_one_line(
    good_run: Path, tmp_path: Path, result: tuple[str, Any], sample: tuple[int, str, Any]
) -> None:
    """Whatever the field holds: a run whose scores are finite, or HarnessLogInvalid."""
    folder = _damaged(good_run, tmp_path / "damaged", result, sample)
    try:
        run = read_lm_eval(folder)
        columns = per_example(run)
        evalset_sha256(run, columns)
        run_identity(run)
    except HarnessLogInvalid as refused:
        message = str(refused)
        assert str(folder) in message and "\n" not in message and "nothing was recorded" in message
        return
    assert all(math.isfinite(v) for values in run.scores.values() for v in values)
    assert all(0 <= v <= 1 for v in run.scores.get("acc", []))
