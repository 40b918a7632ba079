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


def test_a_language_model_is_profiled_per_token_as_requests_arrive(tmp_path: Path) -> None:
    """A token evalset: each call serves the next rows in the evalset's order, padded to the
    longest with a mask; the tokens counted are the rows' real ones, so tokens/s is exact."""
    from evalsentry.evaluation.profile import profile_batches
    from tests.token_models import BagLM
    from tests.unit.evaluation.test_sequences import lm_evalset, token_rows

    rows = token_rows(10)
    evalset = lm_evalset(tmp_path, rows)
    found = profile_batches(BagLM(), evalset, device="cpu", batch_sizes=[1, 4], budget_s=0.2)
    one, four = found.batches
    lengths = [len(r) for r in rows]
    # Call i of size s serves rows i*s .. i*s+s-1, wrapping around the 10 rows.
    assert one.tokens == [lengths[i % 10] for i in range(len(one.seconds))]
    assert four.tokens == [sum(lengths[(4 * i + j) % 10] for j in range(4)) for i in range(len(four.seconds))]  # fmt: skip
    assert BatchProfile(4, [0.5, 1.5], [100, 300]).tokens_per_s == 200.0
    assert BatchProfile(4, [0.5]).tokens_per_s is None  # tensor inputs count no tokens


def test_a_token_profile_checks_the_model_s_contract_first(tmp_path: Path) -> None:
    """Token ids beyond the model's vocabulary are refused in one line before any call is
    timed, as evaluation refuses them (on CUDA an unchecked lookup kills the device)."""
    from evalsentry.evaluation.contract import ModelFailed
    from evalsentry.evaluation.profile import profile_batches
    from tests.token_models import BagLM
    from tests.unit.evaluation.test_sequences import lm_evalset, token_rows

    evalset = lm_evalset(tmp_path, token_rows(6))
    with pytest.raises(ModelFailed, match="is out of the model's vocabulary"):
        profile_batches(BagLM(vocab=100), evalset, device="cpu", batch_sizes=[2], budget_s=0.1)


def test_a_token_profile_s_rows_add_tokens_per_second_and_their_price() -> None:
    """The table gains tokens/s and the cost per 1M tokens at the device's price."""
    from evalsentry.cli import profile as profile_cli

    batches = [BatchProfile(1, [0.01] * 5, [100] * 5), BatchProfile(8, [0.04] * 5, [800] * 5)]
    rows = [profile_cli._row(b, 3.6, "USD") for b in batches]
    assert rows[0][-2:] == ["10,000", "0.10 USD"]  # 100 tokens in 10 ms; 1M tokens = 100 s
    assert rows[1][-2:] == ["20,000", "0.05 USD"]
    assert profile_cli.TOKEN_HEADERS == ["tokens/s", "per 1M tokens"]
