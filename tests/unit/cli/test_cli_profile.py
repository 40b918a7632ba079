"""`evalsentry profile`: a version served at each batch size in the evaluation child."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.evaluation.profile import BatchProfile, ServingProfile
from tests.unit.cli.test_cli_variants import project

__all__ = ["project"]  # the fixture: toy@v1 registered as production, the working folder


def test_a_version_is_profiled_at_each_batch_size(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real calls of the toy model: a row per batch size, percentiles in order, the memory."""
    args = [
        "profile",
        "--model",
        "toy",
        "--version",
        "1",
        "--batch-sizes",
        "1,8",
        "--budget-s",
        "1",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("Serving profile of toy@v1 on toy (cpu)")
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if re.match(r"^(1|8) ", line)
    }
    assert set(rows) == {"1", "8"}
    for row in rows.values():
        calls, p50, p95, p99 = int(row[1]), float(row[3]), float(row[4]), float(row[5])
        assert calls >= 5 and 0 < p50 <= p95 <= p99
    assert "peak memory: " in out and "cheapest batch size with no latency budget set: " in out


def test_a_latency_budget_no_batch_size_meets_exits_1(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """traffic.toy.latency_p99_ms below any call's time: said, exit 1."""
    config = project / "evalsentry.yaml"
    config.write_text(config.read_text() + "traffic:\n  toy: {requests_per_day: 1000, latency_p99_ms: 0.000001}\n")  # fmt: skip
    assert main(["profile", "--model", "toy", "--version", "1", "--batch-sizes", "4", "--budget-s", "0.5"]) == 1  # fmt: skip
    assert (
        "no batch size serves within p99 1e-06 ms (traffic.toy.latency_p99_ms)"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize("sizes", ["0,8", "a", "8,8", ""])
def test_bad_batch_sizes_are_one_line_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str], sizes: str
) -> None:
    assert main(["profile", "--model", "toy", "--version", "1", "--batch-sizes", sizes]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--batch-sizes" in err


def test_the_cheapest_batch_size_within_a_budget() -> None:
    """The most examples per second among the sizes whose p99 is within the budget."""
    small = BatchProfile(1, [0.001] * 10)  # 1,000 examples/s, p99 1 ms
    large = BatchProfile(32, [0.004] * 10)  # 8,000 examples/s, p99 4 ms
    found = ServingProfile("cpu", [small, large], None)
    assert found.cheapest() is large and found.cheapest(5.0) is large
    assert found.cheapest(2.0) is small and found.cheapest(0.5) is None


def test_a_variant_is_profiled_with_its_transform_and_weighed_or_said_not(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The int8 variant of v1 is profiled as it serves; evaluated with its parent's file gone,
    its cost is said not weighed (a WARN naming why), never left out."""
    assert main(["register", "--variant-of", "toy@v1", "--transform", "dynamic-int8"]) == 0
    capsys.readouterr()
    args = [
        "profile",
        "--model",
        "toy",
        "--version",
        "2",
        "--batch-sizes",
        "4",
        "--budget-s",
        "0.5",
    ]
    assert main(args) == 0
    assert capsys.readouterr().out.startswith("Serving profile of toy@v2 on toy (cpu)")
    (project / "teacher.pt").unlink()
    assert main(["evaluate", "--model", "toy", "--version", "2"]) in (0, 1)
    out = capsys.readouterr().out
    said = re.search(
        r"WARN \(report only\) +toy@v2 +toy +microseconds_per_example +production .*toy@v2 "
        r"\(dynamic-int8 of v1\): cost not weighed: paired timing against v1 could not run: ",
        out,
    )
    assert said, out
