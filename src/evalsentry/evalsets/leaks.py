"""Split leaks: evalset rows that are also in the training data a team names.

A model scored on examples it was trained on looks better than it is, and a retrain that stops
seeing them looks worse: splits leak. This compares an evalset with training data (Parquet
files, a folder or a glob of them, or a CSV file) in the evalset's own input columns, read the
way the evalset's are (so a row is compared as the model receives it):

- **exact**: a row's inputs equal a training row's, value for value (checked value for value
  after the hash lookup, so no hash collision is ever reported);
- **near** (fixed-size inputs: tabular rows, images): equal after rounding every value to
  ``decimals`` places (default 2);
- **near** (token sequences): its set of token 5-grams and a training row's have a Jaccard
  similarity of at least ``jaccard`` (default 0.8), found by MinHash LSH and confirmed exactly
  (:mod:`evalsentry.evalsets.near_tokens`): nearly the whole example was seen;
- **13-gram** (token sequences): the row shares a run of 13 consecutive token ids with a
  training row, as lm-evaluation-harness's decontamination (after GPT-3): a span of it was
  seen. Its share of 13-grams found is reported.

Each example is reported once, by the strongest kind found: exact, then near, then 13-gram.

Each row (or 13-gram) is hashed to 64 bits in numpy, the training hashes are sorted once and
the evalset's looked up: linear in both sizes but for that sort (``bench.bench_leaks``).
"""

from __future__ import annotations

import glob
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from evalsentry.errors import EvalsetError
from evalsentry.evalsets.hashing import row_hashes
from evalsentry.evalsets.inputs import Ragged, TokenInputs, inputs_array, token_inputs

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import Evalset

NGRAM = 13
DEFAULT_DECIMALS = 2


@dataclass(frozen=True)
class Leak:
    """One evalset example found in the training data."""

    example_id: str
    row: int  # its position in the frozen evalset
    kind: str  # exact | near | 13-gram
    train_row: int | None  # the training row it equals (exact, near), else None
    share: float = 1.0  # of its 13-grams found in the training data (13-gram)


@dataclass(frozen=True)
class LeakCheck:
    """What the check of one evalset against one training set found."""

    evalset: str
    train: str
    train_rows: int
    examples: int
    method: str
    leaks: list[Leak] = field(default_factory=list)

    def kinds(self) -> str:
        """``exact 10, near 6``: the leaks by kind; ``none``."""
        counts = {k: sum(leak.kind == k for leak in self.leaks) for k in ("exact", "near")}
        counts[f"{NGRAM}-gram"] = sum(leak.kind == f"{NGRAM}-gram" for leak in self.leaks)
        return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"

    def headline(self) -> str:
        """What was found, then where.

        ``3 of 719 examples of digits (0.4%) are in the training data (exact 3): train.parquet,
        1,078 rows; ...``, or ``none of the 719 examples of digits is in the training data: ...``.
        """
        where = f"{self.train}, {self.train_rows:,} rows; {self.method}"
        if not self.leaks:
            return f"none of the {self.examples:,} examples of {self.evalset} is in the training data: {where}"
        share = len(self.leaks) / self.examples if self.examples else 0.0
        return (
            f"{len(self.leaks):,} of {self.examples:,} examples of {self.evalset} ({share:.1%}) are "
            f"in the training data ({self.kinds()}): {where}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {**asdict(self), "leaks": [asdict(leak) for leak in self.leaks]}


def check_leaks(
    evalset: Evalset,
    train: str,
    decimals: int = DEFAULT_DECIMALS,
    jaccard: float | None = None,
    *,
    table: pa.Table | None = None,
) -> LeakCheck:
    """The examples of ``evalset`` that are in the training data at ``train``.

    ``decimals`` rounds fixed-size inputs for near rows; ``jaccard`` (default
    :data:`~evalsentry.evalsets.near_tokens.DEFAULT_JACCARD`) is the 5-gram Jaccard similarity a
    token sequence needs to be a near row. ``table``: the training data at ``train``, already
    read (:func:`read_training`), for a caller checking several evalsets against it.

    Raises:
        EvalsetError: nothing at ``train``, a file that cannot be read, or data without the
            evalset's input columns.
    """
    from evalsentry.evalsets.near_tokens import check_jaccard

    if jaccard is not None:
        check_jaccard(jaccard)  # refused for any evalset: a setting never silently unused
    table = read_training(train) if table is None else table
    if table.num_rows == 0:  # nothing compared is never "checked, nothing found"
        raise EvalsetError(f"no training rows at {train}: give the data the line was trained on")
    where = train
    tokens = isinstance(evalset.inputs, TokenInputs)
    try:  # only the reading of their inputs: an error past it is no fault of the data's
        theirs = (token_inputs if tokens else inputs_array)(table, evalset.spec.inputs, where)
    except (KeyError, pa.ArrowInvalid, ValueError, TypeError) as exc:
        # a missing column, or one whose values the evalset's inputs cannot be (text for numbers)
        raise EvalsetError(f"the training data does not hold {evalset.spec.name}'s inputs ({exc}): {train}") from None  # fmt: skip
    except EvalsetError as exc:  # the inputs' own refusal, whose fix is an evalset's
        said = str(exc).rsplit("; ", 1)[0]
        raise EvalsetError(
            f"{said}; the training data must hold {evalset.spec.name}'s input columns in the "
            "types the evalset was frozen with"
        ) from None
    if isinstance(theirs, TokenInputs) and isinstance(evalset.inputs, TokenInputs):
        from evalsentry.evalsets.near_tokens import DEFAULT_JACCARD, SHINGLE

        threshold = DEFAULT_JACCARD if jaccard is None else jaccard
        leaks = _token_leaks(evalset, evalset.inputs.tokens, theirs.tokens, threshold)
        method = (
            f"exact rows, near ones by MinHash LSH ({SHINGLE}-gram Jaccard >= {threshold:g}, "
            f"confirmed exactly), and shared {NGRAM}-grams of token ids"
        )
    else:
        leaks = _fixed_leaks(evalset, np.asarray(evalset.inputs), np.asarray(theirs), decimals)
        method = f"exact rows, and near ones after rounding to {decimals} decimal place(s)"
    return LeakCheck(evalset.spec.name, train, table.num_rows, len(evalset), method, leaks)


def read_training(source: str) -> pa.Table:
    """Training data from a Parquet file, folder or glob, or a CSV file, as one table."""
    import pyarrow.csv as pv
    import pyarrow.parquet as pq

    path = Path(source)
    if glob.has_magic(source):
        files = sorted(Path(p) for p in glob.glob(source))  # noqa: PTH207 - an absolute pattern too
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".csv"))
    else:
        files = [path]
    if not files or not all(f.is_file() for f in files):
        raise EvalsetError(
            f"no training data at {source} (give a Parquet or CSV file, a folder or a glob of them)"
        )
    try:
        tables = [pv.read_csv(f) if f.suffix == ".csv" else pq.read_table(f) for f in files]
    except (OSError, pa.ArrowException) as exc:
        raise EvalsetError(f"{source}: cannot be read as training data ({exc})") from None
    return pa.concat_tables(tables, promote_options="default")


def _matches(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """For each of ``mine``'s rows, the index of an equal row of ``theirs``, else -1."""
    mine, theirs = mine.reshape(len(mine), -1), theirs.reshape(len(theirs), -1)
    ours, their = row_hashes(mine), row_hashes(theirs)
    order = np.argsort(their, kind="stable")
    at = np.minimum(np.searchsorted(their[order], ours), max(len(their) - 1, 0))
    found = np.full(len(mine), -1, np.int64)
    if not len(their):
        return found
    candidates = order[at]
    hit = np.flatnonzero(their[candidates] == ours)
    same = (mine[hit] == theirs[candidates[hit]]).all(axis=1)  # no collision is reported
    found[hit[same]] = candidates[hit[same]]
    return found


def _fixed_leaks(
    evalset: Evalset, mine: np.ndarray, theirs: np.ndarray, decimals: int
) -> list[Leak]:
    exact = _matches(mine + 0.0, theirs + 0.0)  # + 0.0: -0.0 is 0.0
    near = _matches(np.round(mine, decimals) + 0.0, np.round(theirs, decimals) + 0.0)
    leaks = []
    for row in range(len(mine)):
        if exact[row] >= 0 or near[row] >= 0:
            kind, at = ("exact", exact[row]) if exact[row] >= 0 else ("near", near[row])
            leaks.append(Leak(str(evalset.ids[row]), row, kind, int(at)))
    return leaks


def _ngram_hashes(tokens: Ragged) -> tuple[np.ndarray, np.ndarray]:
    """Every 13-gram inside one row: its hash and its row."""
    values = np.asarray(tokens.values, np.int64)
    if len(values) < NGRAM:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(values, NGRAM)
    lengths = tokens.lengths
    row = np.repeat(np.arange(len(lengths)), lengths)[: len(windows)]
    inside = np.arange(len(windows)) + NGRAM <= np.asarray(tokens.offsets)[1:][row]
    return row_hashes(windows[inside]), row[inside]


def _token_leaks(evalset: Evalset, mine: Ragged, theirs: Ragged, jaccard: float) -> list[Leak]:
    from evalsentry.evalsets.near_tokens import near_duplicates

    grams, rows = _ngram_hashes(mine)
    known = np.sort(_ngram_hashes(theirs)[0])
    at = np.searchsorted(known, grams)
    found = np.zeros(len(grams), bool)
    inside = at < len(known)
    found[inside] = known[at[inside]] == grams[inside]
    hits = np.bincount(rows[found], minlength=len(mine))
    total = np.bincount(rows, minlength=len(mine))
    whole = _equal_rows(mine, theirs)
    near, similarity = near_duplicates(mine, theirs, jaccard)
    leaks = []
    for row in range(len(mine)):
        example = str(evalset.ids[row])
        if whole[row] >= 0:
            leaks.append(Leak(example, row, "exact", int(whole[row])))
        elif near[row] >= 0:
            leaks.append(Leak(example, row, "near", int(near[row]), float(similarity[row])))
        elif hits[row]:
            leaks.append(Leak(example, row, f"{NGRAM}-gram", None, hits[row] / total[row]))
    return leaks


def _equal_rows(mine: Ragged, theirs: Ragged) -> np.ndarray:
    """For each row, an equal training row (the same token ids, value for value), else -1."""
    found = np.full(len(mine), -1, np.int64)
    lengths, their_lengths = mine.lengths, theirs.lengths
    for length in np.unique(lengths):
        ours = np.flatnonzero(lengths == length)
        their = np.flatnonzero(their_lengths == length)
        if len(their):
            hit = _matches(_rows(mine, ours, int(length)), _rows(theirs, their, int(length)))
            found[ours[hit >= 0]] = their[hit[hit >= 0]]
    return found


def _rows(tokens: Ragged, rows: np.ndarray, length: int) -> np.ndarray:
    """``rows`` of ``tokens``, each ``length`` long, as a matrix."""
    starts = np.asarray(tokens.offsets)[rows][:, None]
    return np.asarray(np.asarray(tokens.values)[starts + np.arange(length)])
