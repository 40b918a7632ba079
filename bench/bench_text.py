"""run_inference() on token sequences against a hand-written PyTorch loop doing the same work.

    python -m bench.bench_text [--rounds 3]

Both score every held-out paragraph of the text example (``examples.textlm``) with its
language model: the same rows, sorted by length, cut into the same batches, each padded to its
longest row with an attention mask, and each row's mean next-token NLL computed. The loop is
what a careful engineer writes by hand; the engine adds its contract checks, ids and metrics'
columns. Rounds alternate and the best of each is compared, so machine noise hits both alike.
Padding overhead is the tokens the model was given over the real ones.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.inference import run_inference
from examples.textlm.data import texts
from examples.textlm.model import PAD_ID, TinyCausalLM, encode

BATCH = 64
MAX_LENGTH = 256


def paragraphs(limit: int | None = None) -> list[list[int]]:
    """The held-out topics' paragraphs as byte ids, 16 to ``MAX_LENGTH`` long."""
    rows = [
        encode(p.strip())[:MAX_LENGTH]
        for text in texts(held_out=True)
        for p in text.split("\n\n")
        if len(p.strip()) >= 16
    ]
    return rows[:limit]


def raw_loop(model: torch.nn.Module, rows: list[list[int]]) -> np.ndarray:
    """The baseline: sorted, padded batches; per-row mean NLL, written back in row order."""
    lengths = np.array([len(r) for r in rows])
    order = np.argsort(lengths, kind="stable")
    out = np.empty(len(rows))
    with torch.inference_mode():
        for start in range(0, len(rows), BATCH):
            index = order[start : start + BATCH]
            width = int(lengths[index].max())
            ids = torch.full((len(index), width), PAD_ID, dtype=torch.long)
            for i, row in enumerate(index):
                ids[i, : lengths[row]] = torch.tensor(rows[row])
            mask = (torch.arange(width)[None, :] < torch.from_numpy(lengths[index])[:, None]).long()
            logits = model(input_ids=ids, attention_mask=mask)
            nll = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]),
                ids[:, 1:].reshape(-1),
                reduction="none",
            ).view(len(index), width - 1)
            scored = mask[:, 1:].bool()
            out[index] = ((nll * scored).sum(1) / scored.sum(1)).numpy()
    return out


def run(rounds: int = 3, limit: int | None = None) -> dict[str, float]:
    """Time both over the held-out paragraphs; the best round of each."""
    torch.manual_seed(0)
    model = TinyCausalLM().eval()
    rows = paragraphs(limit)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "paragraphs"
        spec = InputsSpec(tokens="ids", pad_id=PAD_ID, max_length=MAX_LENGTH)
        freeze_evalset(
            pa.table({"ids": rows}),
            folder,
            name="paragraphs",
            task="language_modeling",
            target="ids",
            inputs=spec,
        )
        evalset = load_evalset(folder)
        raw_loop(model, rows[:BATCH])  # warm-up
        engine, loop = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            expected = raw_loop(model, rows)
            loop.append(time.perf_counter() - start)
            start = time.perf_counter()
            result = run_inference(model, evalset, device="cpu", batch_size=BATCH)
            engine.append(time.perf_counter() - start)
    np.testing.assert_allclose(result.columns["loss"], expected, rtol=1e-4)  # the same work
    unsorted = sum(
        max(map(len, rows[i : i + BATCH])) * len(rows[i : i + BATCH])
        for i in range(0, len(rows), BATCH)
    )
    tokens, padded = int(result.tokens or 0), int(result.padded_tokens or 0)
    return {
        "rows": len(rows),
        "tokens": tokens,
        "raw_loop_s": min(loop),
        "engine_s": min(engine),
        "engine_over_raw": min(engine) / min(loop),
        "padding_overhead": padded / tokens,
        "unsorted_padding_overhead": unsorted / tokens,
        "tokens_per_s": tokens / min(engine),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for key, value in run(args.rounds).items():
        print(f"{key:28s} {value:14.3f}")
