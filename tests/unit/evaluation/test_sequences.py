"""Token sequences, several named inputs, language models, multiple choice and multi-label.

The engine pads length-sorted batches and writes results back in id order; each test checks
it against the plainest possible computation: the same model run on one row at a time, unpadded.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.config import Config
from evalsentry.evalsets.evalset import Evalset, InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.contract import ModelFailed, OutputContractViolation
from evalsentry.evaluation.inference import run_inference
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint
from evalsentry.gate.metrics import compute_metrics
from evalsentry.storage import sha256_file
from tests.models import TRUSTED_FACTORIES
from tests.token_models import (
    PAD,
    BagLM,
    LabelNet,
    LastPositionLM,
    NeedsSegment,
    NoMaskLM,
    OOMAboveLM,
    PooledClassifier,
    PositionsFirstLM,
)

RNG_SEED = 11


def token_rows(count: int, low: int = 2, high: int = 40, seed: int = RNG_SEED) -> list[list[int]]:
    """``count`` rows of random byte ids, of random lengths in [low, high)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, rng.integers(low, high)).tolist() for _ in range(count)]


def freeze(tmp: Path, name: str, table: pa.Table, **kwargs: object) -> Evalset:
    """Freeze ``table`` under ``tmp/name`` and load it back."""
    freeze_evalset(table, tmp / name, name=name, **kwargs)  # type: ignore[arg-type]
    return load_evalset(tmp / name)


def lm_evalset(tmp: Path, rows: list[list[int]], **inputs: object) -> Evalset:
    spec = InputsSpec(tokens="ids", pad_id=PAD, max_length=64, **inputs)  # type: ignore[arg-type]
    table = pa.table({"ids": rows, "part": ["a", "b"] * (len(rows) // 2) + ["a"] * (len(rows) % 2)})
    return freeze(
        tmp, "lm", table, task="language_modeling", target="ids", inputs=spec, slices=["part"]
    )


def row_nll(model: torch.nn.Module, ids: list[int], first: int = 1) -> tuple[float, int]:
    """One row's summed NLL over its tokens from position ``first`` on, unpadded, alone."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]))[0]
    logp = torch.log_softmax(logits[:-1].double(), dim=-1)
    nll = -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    return float(nll[first - 1 :].sum()), len(ids) - first


class TestLanguageModelling:
    def test_padded_sorted_batches_equal_rows_one_by_one(self, tmp_path: Path) -> None:
        """Per-example mean NLL, token counts and perplexity match the row-by-row computation."""
        rows = token_rows(61)
        evalset = lm_evalset(tmp_path, rows)
        torch.manual_seed(0)
        model = BagLM().eval()
        result = run_inference(model, evalset, device="cpu", batch_size=8)
        expected = [row_nll(model, r) for r in rows]
        sums = np.array([s for s, _ in expected])
        counts = np.array([c for _, c in expected])
        np.testing.assert_allclose(result.columns["loss"], sums / counts, rtol=1e-5)
        np.testing.assert_array_equal(result.columns["tokens"], counts)
        assert list(result.columns["example_id"]) == list(evalset.ids)
        values = compute_metrics(result.columns, ["perplexity", "token_nll"], num_classes=None)
        assert values["perplexity"].value == pytest.approx(
            np.exp(sums.sum() / counts.sum()), rel=1e-6
        )
        assert values["token_nll"].value == pytest.approx(np.mean(sums / counts), rel=1e-6)
        assert (
            values["perplexity"].ci_low < values["perplexity"].value < values["perplexity"].ci_high
        )

    def test_batches_are_length_sorted_so_padding_stays_small(self, tmp_path: Path) -> None:
        """Tokens read are the real ones; tokens given are each sorted batch padded to its longest."""
        rows = token_rows(64, low=2, high=60)
        evalset = lm_evalset(tmp_path, rows)
        result = run_inference(BagLM(), evalset, device="cpu", batch_size=16)
        lengths = np.sort([len(r) for r in rows])
        padded = sum(
            int(lengths[i : i + 16].max()) * len(lengths[i : i + 16]) for i in range(0, 64, 16)
        )
        assert result.tokens == sum(lengths) and result.padded_tokens == padded
        unsorted = sum(max(len(r) for r in rows[i : i + 16]) * 16 for i in range(0, 64, 16))
        assert result.padded_tokens < unsorted  # what batching in the evalset's order would pad

    def test_out_of_memory_halves_the_batch_logs_it_and_loses_no_row(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """CUDA out of memory on a big batch: retried at half the size, logged, results whole."""
        rows = token_rows(30)
        evalset = lm_evalset(tmp_path, rows)
        model = OOMAboveLM(limit=5).eval()
        with caplog.at_level(logging.WARNING):
            result = run_inference(model, evalset, device="cpu", batch_size=16)
        assert (result.batch_size, result.oom_retries) == (4, 2)
        assert "retrying with batch size 8" in caplog.text
        expected = [row_nll(model, r) for r in rows]
        np.testing.assert_allclose(result.columns["loss"], [s / c for s, c in expected], rtol=1e-5)

    def test_a_prompt_column_leaves_prompt_tokens_unscored(self, tmp_path: Path) -> None:
        """The target may be an integer column: each row's prompt length, whose tokens are not scored."""
        rows = token_rows(20, low=6, high=30)
        prompt = [len(r) // 2 for r in rows]
        spec = InputsSpec(tokens="ids", pad_id=PAD, max_length=64)
        evalset = freeze(
            tmp_path,
            "qa",
            pa.table({"ids": rows, "prompt": prompt}),
            task="language_modeling",
            target="prompt",
            inputs=spec,
        )
        model = BagLM().eval()
        result = run_inference(model, evalset, device="cpu", batch_size=4)
        expected = [row_nll(model, r, first=max(p, 1)) for r, p in zip(rows, prompt, strict=True)]
        np.testing.assert_allclose(result.columns["loss"], [s / c for s, c in expected], rtol=1e-5)

    @pytest.mark.parametrize("side", ["left", "right"])
    def test_truncation_cuts_the_stated_side(self, tmp_path: Path, side: str) -> None:
        """Rows longer than max_length lose tokens on the side stated at freeze, nothing else."""
        rows = token_rows(12, low=10, high=90)
        evalset = lm_evalset(tmp_path, rows, truncation=side)
        model = BagLM().eval()
        result = run_inference(model, evalset, device="cpu", batch_size=5)
        kept = [r[-64:] if side == "left" else r[:64] for r in rows]
        expected = [row_nll(model, r) for r in kept]
        np.testing.assert_allclose(result.columns["loss"], [s / c for s, c in expected], rtol=1e-5)


class TestMultipleChoice:
    @pytest.mark.parametrize("scoring", ["sum", "mean"])
    def test_prediction_is_the_best_continuation(self, tmp_path: Path, scoring: str) -> None:
        """Each choice is scored by its tokens' log-probability given the context, as frozen."""
        rng = np.random.default_rng(3)
        contexts = token_rows(30, low=3, high=20)
        choices = [
            [rng.integers(0, 256, rng.integers(1, 6)).tolist() for _ in range(rng.integers(2, 5))]
            for _ in contexts
        ]
        answers = [int(rng.integers(0, len(c))) for c in choices]
        spec = InputsSpec(tokens="context", choices="choices", pad_id=PAD, max_length=64)
        table = pa.table({"context": contexts, "choices": choices, "answer": answers})
        evalset = freeze(
            tmp_path,
            "mc",
            table,
            task="multiple_choice",
            target="answer",
            inputs=spec,
            scoring=scoring,
        )
        model = BagLM().eval()
        result = run_inference(model, evalset, device="cpu", batch_size=7)
        predicted = []
        for context, options in zip(contexts, choices, strict=True):
            scores = []
            for option in options:
                total, count = row_nll(model, context + option, first=len(context))
                scores.append(-total / (count if scoring == "mean" else 1))
            predicted.append(int(np.argmax(scores)))
        np.testing.assert_array_equal(result.columns["prediction"], predicted)
        np.testing.assert_array_equal(result.columns["target"], answers)
        accuracy = compute_metrics(result.columns, ["accuracy"], num_classes=None)["accuracy"]
        assert accuracy.value == pytest.approx(np.mean(np.array(predicted) == answers))


    def test_a_named_input_reaches_each_choice_s_sequence(self, tmp_path: Path) -> None:
        """Choices with a per-row named input: each continuation's sequence gets its row's value
        (it was given one value per row where the batch holds one sequence per choice)."""
        from tests.token_models import ShiftedLM

        rng = np.random.default_rng(4)
        contexts = token_rows(12, low=3, high=10)
        choices = [[rng.integers(0, 256, 2).tolist() for _ in range(3)] for _ in contexts]
        spec = InputsSpec(
            tokens="context", choices="choices", pad_id=PAD, max_length=64, named={"shift": ["s"]}
        )
        shifts = rng.normal(0, 3, 12)
        table = pa.table({"context": contexts, "choices": choices, "answer": [0] * 12, "s": shifts})
        evalset = freeze(
            tmp_path, "mcs", table, task="multiple_choice", target="answer", inputs=spec
        )
        model = ShiftedLM().eval()
        result = run_inference(model, evalset, device="cpu", batch_size=16)
        predicted = []
        with torch.inference_mode():
            for context, options, shift in zip(contexts, choices, shifts, strict=True):
                scores = []
                for option in options:
                    ids = torch.tensor([context + option])
                    logits = model(input_ids=ids, shift=torch.tensor([[shift]], dtype=torch.float32))
                    logp = torch.log_softmax(logits[0, :-1].double(), -1)
                    picked = logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]]
                    scores.append(float(picked[len(context) - 1 :].sum()))
                predicted.append(int(np.argmax(scores)))
        np.testing.assert_array_equal(result.columns["prediction"], predicted)


class TestNamedInputs:
    def test_tokens_mask_and_a_feature_input_reach_the_model_by_name(self, tmp_path: Path) -> None:
        """model(input_ids=, attention_mask=, extra=) per row equals the padded batches' output."""
        rows = token_rows(40)
        rng = np.random.default_rng(5)
        table = pa.table(
            {
                "ids": rows,
                "p": rng.normal(size=40),
                "q": rng.normal(size=40),
                "y": (np.arange(40) % 2).tolist(),
            }
        )
        spec = InputsSpec(tokens="ids", pad_id=0, max_length=64, named={"extra": ["p", "q"]})
        evalset = freeze(tmp_path, "mixed", table, task="classification", target="y", inputs=spec)
        model = PooledClassifier().eval()
        result = run_inference(model, evalset, device="cpu", batch_size=8)
        with torch.inference_mode():
            alone = [
                model(
                    input_ids=torch.tensor([r]),
                    attention_mask=torch.ones(1, len(r)),
                    extra=torch.tensor([[p, q]], dtype=torch.float32),
                )[0]
                for r, p, q in zip(
                    rows, table["p"].to_pylist(), table["q"].to_pylist(), strict=True
                )
            ]
        np.testing.assert_array_equal(
            result.columns["prediction"], [int(o.argmax()) for o in alone]
        )
        expected_loss = [
            float(-torch.log_softmax(o, 0)[y])
            for o, y in zip(alone, table["y"].to_pylist(), strict=True)
        ]
        np.testing.assert_allclose(result.columns["loss"], expected_loss, rtol=1e-4, atol=1e-6)


class TestMultiLabel:
    def test_bits_hamming_and_f1_against_a_hand_count(self, tmp_path: Path) -> None:
        """Labels above logit 0 are predicted; exact match, Hamming, micro and macro F1 follow."""
        rng = np.random.default_rng(8)
        x = rng.normal(size=(50, 3)).astype(np.float32)
        labels = ["tag0", "tag1", "tag2", "tag3"]
        truth = rng.random((50, 4)) < 0.4
        table = pa.table(
            {
                "a": x[:, 0],
                "b": x[:, 1],
                "c": x[:, 2],
                "tags": [[labels[j] for j in range(4) if t[j]] for t in truth],
            }
        )
        evalset = freeze(
            tmp_path,
            "tags",
            table,
            task="multilabel",
            target="tags",
            inputs=InputsSpec(columns=["a", "b", "c"]),
        )
        assert evalset.spec.classes == labels
        model = LabelNet().eval()
        result = run_inference(model, evalset, device="cpu")
        with torch.inference_mode():
            predicted = (model(torch.from_numpy(x)) > 0).numpy()
        tp, fp, fn = (
            (truth & predicted).sum(0),
            (~truth & predicted).sum(0),
            (truth & ~predicted).sum(0),
        )
        present = (tp + fp + fn) > 0
        values = compute_metrics(
            result.columns,
            ["exact_match", "hamming_score", "micro_f1", "macro_label_f1"],
            num_classes=4,
        )
        assert values["exact_match"].value == pytest.approx(np.mean((truth == predicted).all(1)))
        assert values["hamming_score"].value == pytest.approx(np.mean(truth == predicted))
        assert values["micro_f1"].value == pytest.approx(
            2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum())
        )
        f1 = np.where(present, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0)
        assert values["macro_label_f1"].value == pytest.approx(f1[present].mean())


class TestContract:
    @pytest.mark.parametrize(
        ("model", "message"),
        [
            (NoMaskLM(), "missing named input: the model's forward takes no 'attention_mask'"),
            (
                BagLM(vocab=100),
                "pad id 256 is out of the model's vocabulary (the embedding of its 'input_ids' "
                "takes ids 0..99)",
            ),
            (
                PositionsFirstLM(vocab=100),
                "pad id 256 is out of the model's vocabulary (the embedding of its 'input_ids' "
                "takes ids 0..99)",
            ),
            (LastPositionLM(), "expected float next-token logits of shape ["),
            (BagLM(context=16), "the model's forward raised ValueError: sequence of"),
        ],
    )
    def test_each_break_is_one_line(
        self, tmp_path: Path, model: torch.nn.Module, message: str
    ) -> None:
        """A model that does not fit the evalset fails with one line saying what was expected."""
        evalset = lm_evalset(tmp_path, token_rows(10, low=20, high=40))
        with pytest.raises((ModelFailed, OutputContractViolation)) as caught:
            run_inference(model, evalset, device="cpu")
        assert message in str(caught.value) and "\n" not in str(caught.value)

    def test_the_vocabulary_is_the_table_that_reads_the_ids(self, tmp_path: Path) -> None:
        """A position table declared first (64 rows) is not taken for the vocabulary (257)."""
        evalset = lm_evalset(tmp_path, token_rows(10, low=20, high=40))
        model = PositionsFirstLM(context=64).eval()
        assert next(iter(model.children())) is model.positions
        result = run_inference(model, evalset, device="cpu")
        assert result.num_examples == 10

    def test_a_missing_named_input_is_that_pair_s_error_row(self, tmp_path: Path) -> None:
        """Through the pipeline: one line in the error row, and a fitting model beside it is ok."""
        rows = token_rows(20)
        table = pa.table({"ids": rows, "p": np.zeros(20), "q": np.ones(20), "y": [0, 1] * 10})
        spec = InputsSpec(tokens="ids", pad_id=0, max_length=64, named={"extra": ["p", "q"]})
        evalset = freeze(tmp_path, "mixed", table, task="classification", target="y", inputs=spec)
        config = Config(root=str(tmp_path), trusted_factories=list(TRUSTED_FACTORIES))
        rows_out = {}
        for name, model in (("fits", PooledClassifier()), ("needs-segment", NeedsSegment())):
            path = save_checkpoint(
                model,
                tmp_path / f"{name}.safetensors",
                metrics={},
                config={},
                seed=0,
                data=tmp_path / "mixed" / "evalset.yaml",
            )
            target = Target(name, str(path), 1, "production", sha256_file(path)[0])
            rows_out[name] = evaluate_checkpoint(
                target, evalset, config=config, run_id="r", week="2026-W49"
            ).evaluation
        assert rows_out["fits"]["status"] == "ok" and rows_out["fits"]["input_tokens"] == sum(
            map(len, rows)
        )
        assert rows_out["needs-segment"]["status"] == "error"
        assert (
            "the model's forward needs 'segment', which the evalset does not give"
            in rows_out["needs-segment"]["error"]
        )
