"""The text of the example: Python's own documentation topics, split into training and held out.

The text ships with Python (``pydoc_data.topics``: the language reference's sections, which
``help()`` shows), so nothing is downloaded. It differs between Python releases, so the split
used here is kept in the project (``data/topics.parquet``), written once by

    python -m examples.textlm.data

Every fifth topic (by name) is held out: the evaluation sets are built from those only.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TOPICS = Path(__file__).parent / "data" / "topics.parquet"
HELD_OUT_EVERY = 5


def write_topics(path: Path = TOPICS) -> Path:
    """Every documentation topic of this Python as a row ``(name, text, held_out)``."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    table = pa.table(
        {
            "name": names,
            "text": [topics[name] for name in names],
            "held_out": [i % HELD_OUT_EVERY == 0 for i in range(len(names))],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return path


def texts(held_out: bool, path: Path = TOPICS) -> list[str]:
    """The topics' texts of one side of the split, in name order."""
    table = pq.read_table(path).to_pylist()
    return [row["text"] for row in table if row["held_out"] == held_out]


if __name__ == "__main__":
    print(f"wrote {write_topics()}")
