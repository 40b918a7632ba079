"""Evaluation sets of the text example, built from the held-out topics only.

- ``lm_rows``: language modelling: chunks of held-out text (whole paragraphs where they fit)
  as byte ids of varying length, to be scored token by token (perplexity).
- ``cloze_rows``: multiple choice: a stretch of held-out text, then four words of the same
  length, one of them the word that comes next in the text (accuracy).

Both return pyarrow tables with a stable string ``id`` and a ``topic`` slice column (the kind of
documentation: ``syntax``, ``operators`` or ``data model``). They are deterministic: the same
``topics.parquet`` and arguments give the same rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from examples.textlm.data import TOPICS

# The held-out topics (every fifth name of the stored split) by the part of the language
# reference they come from; a name not listed here is "other".
KINDS = {
    "syntax": ("assert", "else", "for", "identifiers", "integers", "numbers"),
    "operators": (
        "bitwise",
        "booleans",
        "comparisons",
        "power",
        "slicings",
        "subscriptions",
        "unary",
    ),
    "data model": ("attribute-access", "customization", "typesmapping"),
}
TOPIC_OF = {name: kind for kind, names in KINDS.items() for name in names}
WORD = re.compile(rb"(?<= )[A-Za-z]{4,12}\b")


def held_out(path: Path = TOPICS) -> list[tuple[str, bytes]]:
    """The held-out topics as ``(name, UTF-8 text)``, in name order."""
    rows = pq.read_table(path).to_pylist()
    return [(row["name"], row["text"].encode("utf-8")) for row in rows if row["held_out"]]


def chunks(text: bytes, max_bytes: int) -> list[bytes]:
    """``text`` in pieces of at most ``max_bytes``: paragraphs packed, long ones cut at a space."""
    pieces: list[bytes] = []
    for whole in text.split(b"\n\n"):
        rest = whole
        while len(rest) > max_bytes:
            cut = rest.rfind(b" ", 1, max_bytes) if b" " in rest[1:max_bytes] else -1
            cut = cut if cut > 0 else max_bytes
            pieces.append(rest[:cut])
            rest = rest[cut:].lstrip(b" ")
        pieces.append(rest)
    packed: list[bytes] = []
    for piece in pieces:
        if packed and len(packed[-1]) + 2 + len(piece) <= max_bytes:
            packed[-1] += b"\n\n" + piece
        else:
            packed.append(piece)
    return packed


def lm_rows(*, min_bytes: int = 32, max_bytes: int = 256, path: Path = TOPICS) -> pa.Table:
    """Held-out text in chunks of ``min_bytes`` to ``max_bytes`` byte ids, unpadded.

    Columns: ``id`` (``"<topic name>#<k>"``), ``input_ids`` (list<int64>), ``topic``.
    """
    ids, inputs, topics = [], [], []
    for name, text in held_out(path):
        kept = [chunk for chunk in chunks(text, max_bytes) if len(chunk) >= min_bytes]
        for k, chunk in enumerate(kept):
            ids.append(f"{name}#{k}")
            inputs.append(list(chunk))
            topics.append(TOPIC_OF.get(name, "other"))
    return pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "input_ids": pa.array(inputs, pa.list_(pa.int64())),
            "topic": pa.array(topics, pa.string()),
        }
    )


def cloze_rows(
    *,
    rows: int = 400,
    choices: int = 4,
    min_context: int = 48,
    max_context: int = 200,
    seed: int = 0,
    path: Path = TOPICS,
) -> pa.Table:
    """Which word comes next: the true one or ``choices - 1`` others of the same length.

    Each row takes a word (4 to 12 letters, after a space) at least ``min_context`` bytes into
    a held-out topic; its context is the ``min_context`` to ``max_context`` bytes before it (the
    length drawn at random), ending in that space. The other choices are distinct words of the
    same length drawn from all held-out text, so a model cannot tell them apart by length.

    Columns: ``id`` (``"<topic name>@<byte offset of the word>"``), ``context`` (list<int64>),
    ``choices`` (list<list<int64>>), ``answer`` (int64, index of the true word), ``topic``.
    """
    rng = np.random.default_rng(seed)
    topics = held_out(path)
    by_length: dict[int, list[bytes]] = {}
    for word in sorted({m.group() for _, text in topics for m in WORD.finditer(text)}):
        by_length.setdefault(len(word), []).append(word)
    slots = [
        (name, text, m.start(), m.group())
        for name, text in topics
        for m in WORD.finditer(text)
        if m.start() >= min_context
    ]
    picked = sorted(rng.choice(len(slots), size=min(rows, len(slots)), replace=False))
    table: dict[str, list[object]] = {
        k: [] for k in ("id", "context", "choices", "answer", "topic")
    }
    for index in picked:
        name, text, start, word = slots[index]
        length = int(rng.integers(min_context, max_context + 1))
        others = [w for w in by_length[len(word)] if w != word]
        drawn = [others[i] for i in rng.choice(len(others), size=choices - 1, replace=False)]
        order = rng.permutation(choices)
        options = [([word, *drawn])[i] for i in order]
        table["id"].append(f"{name}@{start}")
        table["context"].append(list(text[max(0, start - length) : start]))
        table["choices"].append([list(option) for option in options])
        table["answer"].append(int(np.flatnonzero(order == 0)[0]))
        table["topic"].append(TOPIC_OF.get(name, "other"))
    return pa.table(
        {
            "id": pa.array(table["id"], pa.string()),
            "context": pa.array(table["context"], pa.list_(pa.int64())),
            "choices": pa.array(table["choices"], pa.list_(pa.list_(pa.int64()))),
            "answer": pa.array(table["answer"], pa.int64()),
            "topic": pa.array(table["topic"], pa.string()),
        }
    )


def freeze_perplexity(evalsets_dir: Path, name: str = "text") -> None:
    """Freeze :func:`lm_rows` as the evalset ``name`` (byte ids, scored token by token)."""
    from evalsentry.evalsets.evalset import InputsSpec
    from evalsentry.evalsets.freeze import freeze_evalset
    from examples.textlm.model import PAD_ID, TinyCausalLM

    freeze_evalset(
        lm_rows(),
        Path(evalsets_dir) / name,
        name=name,
        task="language_modeling",
        target="input_ids",
        inputs=InputsSpec(tokens="input_ids", pad_id=PAD_ID, max_length=TinyCausalLM().context),
        id_column="id",
        slices=["topic"],
    )
