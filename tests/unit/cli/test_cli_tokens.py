"""Token evalsets through the real entry points: `evalsentry evaluate` (CI) and paired timing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.evaluation.speed import time_pair, token_sample
from evalsentry.evaluation.timing import slowdown_comparison
from evalsentry.gate.verdicts import Verdict
from evalsentry.history.store import History
from evalsentry.storage import sha256_file
from evalsentry.weeks import iso_week
from tests.models import TRUSTED_YAML
from tests.token_models import BagLM, SlowBagLM
from tests.unit.evaluation.test_sequences import lm_evalset, token_rows
from tests.unit.evaluation.test_timing import timing_pair


def lm_checkpoint(path: Path, noise: float = 0.0) -> Path:
    """A BagLM checkpoint; ``noise`` adds that much Gaussian noise to its output layer."""
    torch.manual_seed(0)
    model = BagLM()
    with torch.no_grad():
        model.head.weight.add_(noise * torch.randn_like(model.head.weight))
    return save_checkpoint(
        model, path, metrics={}, config={"noise": noise}, seed=0, data=path.parent / "data.txt"
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a token evalset and a language model's production result of week 40."""
    lm_evalset(tmp_path / "evalsets", token_rows(120))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "data.txt").write_text("training text\n")
    config = tmp_path / "evalsentry.yaml"
    config.write_text("store: store\nevalsets: evalsets\n" + TRUSTED_YAML)
    good = lm_checkpoint(tmp_path / "checkpoints" / "v1.safetensors")
    settings = load_config(config)
    target = Target("lm", str(good), 1, "production", sha256_file(good)[0])
    outcome = evaluate_checkpoint(
        target,
        load_evalset(tmp_path / "evalsets" / "lm"),
        config=settings,
        run_id="r1",
        week="2026-W40",
    )
    record(History(settings.store_url), [outcome])
    return tmp_path


def evaluate(project: Path, checkpoint: Path) -> int:
    """``evalsentry evaluate`` of ``checkpoint`` as a candidate of the ``lm`` line."""
    config = str(project / "evalsentry.yaml")
    return main(["evaluate", "--checkpoint", str(checkpoint), "--model", "lm", "--config", config])


def test_a_language_model_candidate_is_gated_on_perplexity(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The production weights again: exit 0; damaged weights: exit 1, naming perplexity."""
    capsys.readouterr()
    same = lm_checkpoint(project / "checkpoints" / "again.safetensors")
    assert evaluate(project, same) == 0, capsys.readouterr()
    assert "PASS" in capsys.readouterr().out
    damaged = lm_checkpoint(project / "checkpoints" / "damaged.safetensors", noise=1.0)
    weeks = {iso_week()}  # a candidate is gated in the week it is evaluated: today's
    assert evaluate(project, damaged) == 1
    out = capsys.readouterr().out
    weeks.add(iso_week())  # (or the next, past midnight on a Sunday)
    assert any(out.startswith(f"evalsentry gate {week}: FAIL\n") for week in weeks), out
    assert re.search(r"^❌ FAIL +lm \(candidate \w+\) +lm +perplexity +production", out, re.M), out
    candidates = History(str(project / "store")).evaluations(kind="candidate")
    assert len(candidates) == 2 and (candidates["input_tokens"] > 0).all()


def test_paired_timing_of_token_models_finds_the_slower_one(tmp_path: Path) -> None:
    """A language model doing eight times the work is slower over the token evalset; itself is not."""
    evalset = lm_evalset(tmp_path, token_rows(64))
    torch.manual_seed(0)
    fast, slow = BagLM(), SlowBagLM()
    slow.load_state_dict(fast.state_dict())
    pair = timing_pair()
    slower = time_pair(fast, slow, evalset, device="cpu", rounds=5)
    assert slower.examples == len(evalset) and slower.ratio > 2
    assert slowdown_comparison(pair, slower, 0.25).verdict == Verdict.WARN
    twin = BagLM()  # the same model, weights and all: only the machine's noise differs
    twin.load_state_dict(fast.state_dict())
    same = time_pair(fast, twin, evalset, device="cpu", rounds=5)
    assert slowdown_comparison(pair, same, 0.25).verdict == Verdict.PASS


def test_a_token_evalset_is_timed_on_its_first_rows_up_to_a_token_budget(tmp_path: Path) -> None:
    """The sample: the first rows in id order whose tokens fit the budget, at least one row."""
    rows = token_rows(40, low=20, high=40)
    evalset = lm_evalset(tmp_path, rows)
    sample = token_sample(evalset, budget=300)
    lengths = [len(r) for r in rows]
    assert sum(lengths[: len(sample)]) <= 300 < sum(lengths[: len(sample) + 1])
    assert list(sample) == list(range(len(sample)))
    assert len(token_sample(evalset, budget=1)) == 1
    timing = time_pair(BagLM(), BagLM(), evalset, device="cpu", rounds=1)
    assert timing.examples == len(token_sample(evalset)) == 40  # 40 short rows: all fit


def test_a_pad_id_inside_a_row_is_a_real_token_and_freeze_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mask follows each row's length, never the id: a pad id inside a row (an end-of-text
    id that also pads, as GPT-2's does) is scored as a token, and freeze says where it occurs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalsentry.evaluation.inference import run_inference
    from tests.token_models import PAD
    from tests.unit.evaluation.test_sequences import row_nll

    rows = token_rows(20)
    rows[3] = [*rows[3][:2], PAD, *rows[3][2:]]
    rows[7] = [*rows[7], PAD]
    pq.write_table(pa.table({"ids": rows}), tmp_path / "rows.parquet")
    (tmp_path / "evalsentry.yaml").write_text("evalsets: evalsets\n")
    freeze = ["evalset", "freeze", str(tmp_path / "rows.parquet"), "--name", "text"]
    freeze += ["--task", "language_modeling", "--target", "ids", "--tokens", "ids"]
    freeze += ["--pad-id", str(PAD), "--max-length", "64"]
    assert main([*freeze, "--config", str(tmp_path / "evalsentry.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"note: the pad id {PAD} is a token inside 2 row(s) (first: row 3)" in out

    evalset = load_evalset(tmp_path / "evalsets" / "text")
    model = BagLM().eval()
    result = run_inference(model, evalset, device="cpu", batch_size=8)
    order = [int(str(i).rsplit("-", 1)[1]) for i in evalset.ids]  # text-000003: row 3
    expected = [row_nll(model, rows[i]) for i in order]
    assert list(result.columns["tokens"]) == [count for _, count in expected]
    np.testing.assert_allclose(
        result.columns["loss"], [total / count for total, count in expected], rtol=1e-5
    )

    frozen = ["evalset", "freeze", str(tmp_path / "rows.parquet"), "--name", "other"]
    frozen += ["--task", "language_modeling", "--target", "ids", "--tokens", "ids"]
    assert (
        main(
            [
                *frozen,
                "--pad-id",
                "999",
                "--max-length",
                "64",
                "--config",
                str(tmp_path / "evalsentry.yaml"),
            ]
        )
        == 0
    )
    assert "note: the pad id" not in capsys.readouterr().out
