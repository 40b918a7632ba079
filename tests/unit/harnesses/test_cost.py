"""An imported Inspect run's tokens, time and money in `evalsentry cost` and the lifetime bill."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.harness_runs import COST_PER_CALL
from tests.unit.harnesses.test_import import import_inspect, inspect_log, run

#: The retimed run's length: what Inspect's log says it took, from start to completion.
SECONDS = 12.0
EXAMPLES = 30  # the task's samples; two epochs of each are one example of two repeats
PER_DEVICE_HOUR = 3.6  # what an hour of the "inspect" device costs, to price serving
REQUESTS_PER_DAY = 1000


def retimed(source: str, target: Path) -> tuple[int, float]:
    """A copy of a real Inspect log that took ``SECONDS``; its tokens and money as Inspect summed them.

    Written by Inspect's own API, so the copy is a log Inspect reads; the figures come from
    the log's ``stats.model_usage``, not from evalsentry's reader.
    """
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(source)
    start = datetime(2026, 10, 5, 9, 0, 0).astimezone()
    log.stats.started_at = start.isoformat()
    log.stats.completed_at = (start + timedelta(seconds=SECONDS)).isoformat()
    write_eval_log(log, str(target))
    usage = log.stats.model_usage.values()
    tokens = sum(u.input_tokens + u.output_tokens for u in usage)
    money = sum(u.total_cost or 0.0 for u in usage)
    return tokens, money


def cells(out: str, first: str) -> list[str]:
    """The cells of the printed table's row that starts with ``first``."""
    (line,) = [line for line in out.splitlines() if line.startswith(first + "  ")]
    return re.split(r" {2,}", line.strip())


@pytest.fixture
def priced(project: Path) -> Path:
    """The project again, with the line's traffic and an hourly rate for the harness's device."""
    project.write_text(
        project.read_text()
        + f"traffic:\n  sums: {{requests_per_day: {REQUESTS_PER_DAY}}}\n"
        + f"cost:\n  per_device_hour: {{inspect: {PER_DEVICE_HOUR}}}\n"
    )
    return project


def test_tokens_time_and_money_reach_the_ledger(
    harness_logs: Path, priced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cost` shows the run's tokens, tokens per second of its time, and its money per 1M tokens."""
    log = tmp_path / "retimed.eval"
    tokens, money = retimed(inspect_log(harness_logs, "good"), log)
    assert tokens == EXAMPLES * 2 * (14 + 2)  # the mock's usage per call, two epochs
    assert money == pytest.approx(EXAMPLES * 2 * COST_PER_CALL)
    code, _, err = import_inspect(capsys, priced, str(log), "2026-W41")
    assert code == 0, err
    code, out, err = run(capsys, "cost", "--by", "model", "--config", str(priced))
    assert code == 0, err
    header = cells(out, "model")
    assert header[-3:] == ["tokens", "tokens/s", "per 1M tokens"]
    row = dict(zip(header, cells(out, "sums"), strict=True))
    assert row["tokens"] == f"{tokens:,}"
    assert row["tokens/s"] == f"{tokens / SECONDS:,.0f}"
    assert row["per 1M tokens"] == f"{money / tokens * 1e6:,.2f} USD"
    assert row["device time"] == f"{SECONDS:g} s"


def test_tokens_reach_the_lifetime_bill(
    harness_logs: Path, priced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cost --lifetime` prices serving per 1M tokens at the run's tokens per example, and says so."""
    log = tmp_path / "retimed.eval"
    tokens, _ = retimed(inspect_log(harness_logs, "good"), log)
    assert import_inspect(capsys, priced, str(log), "2026-W41")[0] == 0
    code, out, err = run(capsys, "cost", "--lifetime", "--config", str(priced))
    assert code == 0, err
    per_prediction = PER_DEVICE_HOUR / (EXAMPLES / SECONDS * 3600)
    per_token = per_prediction / (tokens / EXAMPLES)
    assert cells(out, "serving per 1M predictions")[1] == f"{per_prediction * 1e6:,.2f} USD"
    assert cells(out, "serving per 1M tokens")[1] == f"{per_token * 1e6:,.2f} USD"
    assert cells(out, "evaluation tokens")[1:] == [f"{tokens:,}", f"{tokens:,}"]
    assert (
        f"note: sums: serving per 1M tokens assumes each request is like an example of its "
        f"production evaluation in 2026-W41: {tokens / EXAMPLES:,.1f} tokens" in out
    )
