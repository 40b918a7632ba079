"""A multi-label tagger with several named inputs: which traits a documentation passage has.

Each passage (a slice of Python's own documentation topics, ``examples.textlm.data``) gets the
tags that apply to it, from its text: ``code`` (it shows a call or an index: ``(`` or ``[``),
``number`` (a digit), ``quote`` (a quotation mark), ``keyword`` (a Python keyword as a word) and
``heading`` (a line underlined with ``*``, ``=`` or ``-``). The model reads the passage's bytes
and two numbers about it, as a team's tagger would take its text and metadata:

    model(input_ids=[N, T], attention_mask=[N, T], stats=float32 [N, 2]) -> logits [N, 5]

    python -m examples.textlm.tagger --out checkpoints/tagger-v1.safetensors --seed 1

The first run also writes the held-out passages as ``tagger_rows.parquet`` next to ``--out``
(``--rows``), ready for ``evalsentry evalset freeze --task multilabel --tokens input_ids
--named stats=length,spaces``.
"""

from __future__ import annotations

import argparse
import keyword
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from examples.textlm.data import TOPICS, texts
from examples.textlm.model import PAD_ID, VOCAB, encode

FACTORY = "examples.textlm.tagger:Tagger"
TAGS = ("code", "heading", "keyword", "number", "quote")  # in order: the logits' columns
PASSAGE = 160  # bytes per passage
_KEYWORDS = re.compile(r"\b(" + "|".join(keyword.kwlist) + r")\b")


def tags_of(text: str) -> list[str]:
    """The tags that apply to ``text``."""
    found = {
        "code": "(" in text or "[" in text,
        "number": any(c.isdigit() for c in text),
        "quote": '"' in text or "'" in text,
        "keyword": bool(_KEYWORDS.search(text)),
        "heading": bool(re.search(r"^[*=-]{3,}$", text, re.M)),
    }
    return [tag for tag in TAGS if found[tag]]


def passages(held_out: bool, limit: int | None = None) -> pa.Table:
    """Passages of one side of the topics' split: id, input_ids, stats columns, tags, topic."""
    rows: dict[str, list[object]] = {
        k: [] for k in ("id", "input_ids", "length", "spaces", "tags", "part")
    }
    for t, text in enumerate(texts(held_out=held_out)):
        for start in range(0, max(len(text) - 40, 1), PASSAGE):
            piece = text[start : start + PASSAGE]
            ids = encode(piece)[:PASSAGE]
            rows["id"].append(f"t{t:03d}-{start:05d}")
            rows["input_ids"].append(ids)
            rows["length"].append(len(ids) / PASSAGE)
            rows["spaces"].append(piece.count(" ") / max(len(piece), 1))
            rows["tags"].append(tags_of(piece))
            rows["part"].append("opening" if start == 0 else "body")
    table = pa.table(rows)
    return table if limit is None else table.slice(0, limit)


class Tagger(nn.Module):
    """Byte embeddings, a convolution, a masked max-pool, plus the stats: one logit per tag."""

    def __init__(self, dim: int = 32, tags: int = len(TAGS)) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim, padding_idx=PAD_ID)
        self.conv = nn.Conv1d(dim, dim, kernel_size=5, padding=2)
        self.stats = nn.Linear(2, dim)
        self.out = nn.Linear(dim, tags)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, stats: torch.Tensor
    ) -> torch.Tensor:
        """Logits ``[N, tags]``; padding never wins the max-pool."""
        hidden = torch.relu(self.conv(self.tokens(input_ids).transpose(1, 2))).transpose(1, 2)
        hidden = hidden.masked_fill(attention_mask[..., None] == 0, -1e4)
        return self.out(hidden.max(dim=1).values + self.stats(stats))  # type: ignore[no-any-return]


def _batch(table: pa.Table) -> tuple[torch.Tensor, ...]:
    rows = table["input_ids"].to_pylist()
    ids = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    stats = torch.tensor(np.stack([table["length"], table["spaces"]], axis=1), dtype=torch.float32)
    truth = torch.tensor([[tag in tags for tag in TAGS] for tags in table["tags"].to_pylist()])
    return ids, (ids != PAD_ID).long(), stats, truth.float()


def train(out: Path, *, seed: int = 0, steps: int = 150, rows: Path | None = None) -> Path:
    """Train on the training passages and save a lineage-carrying checkpoint at ``out``."""
    import evalsentry

    torch.manual_seed(seed)
    ids, mask, stats, truth = _batch(passages(held_out=False))
    model = Tagger()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    with evalsentry.track_training(device="cpu") as run:
        for _ in range(steps):
            pick = torch.randint(0, len(ids), (64,), generator=generator)
            loss = nn.functional.binary_cross_entropy_with_logits(
                model(ids[pick], mask[pick], stats[pick]), truth[pick]
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if rows is not None and not rows.exists():
        import pyarrow.parquet as pq

        rows.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(passages(held_out=True), rows)
    return evalsentry.save_checkpoint(
        model.eval(),
        out,
        metrics={"train_loss": loss.item()},
        config={"steps": steps},
        seed=seed,
        data=TOPICS,
        factory=FACTORY,
        factory_kwargs={},
        training=run,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rows", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = args.rows or args.out.parent / "tagger_rows.parquet"
    print(f"saved {train(args.out, seed=args.seed, steps=args.steps, rows=rows)}")


if __name__ == "__main__":
    main()
