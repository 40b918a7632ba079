"""Near-duplicate token sequences: MinHash LSH over shingles of token ids, confirmed exactly.

A 13-gram shared with a training text says *a span* of an example was seen; a near duplicate
says *nearly all of it* was: the example's set of token 5-grams (shingles) and a training
text's have a Jaccard similarity at or above a stated threshold. Candidates come from
datasketch's MinHash LSH (128 permutations; its bands and rows chosen for the threshold with a
miss weighed 19 times a false candidate: at 0.8, a pair at exactly 0.8 is a candidate 95% of
the time, at 0.85 99.4%, where equal weights gave 40% and 69%); each is then confirmed with the exact Jaccard of the two shingle sets, so an LSH false positive is
never reported. The evalset (the smaller side) is indexed; the training rows go through it as
queries, 4,096 at a time (their shingles and MinHashes made per chunk): beyond the training
table itself, memory grows with the evalset and time with both.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from evalsentry.errors import UsageError
from evalsentry.evalsets.hashing import row_hashes
from evalsentry.evalsets.inputs import Ragged

SHINGLE = 5
DEFAULT_JACCARD = 0.8
#: The highest threshold allowed: MinHash LSH bands it with 128 permutations in two bands.
MAX_JACCARD = 0.99
PERMUTATIONS = 128
#: LSH band choice: (false positive, false negative) weights. Candidates are confirmed exactly,
#: so a miss costs more than a candidate too many.
_WEIGHTS = (0.05, 0.95)
#: Training rows shingled and hashed at a time.
_CHUNK = 4096


def shingle_sets(tokens: Ragged) -> list[np.ndarray]:
    """Each row's distinct 5-grams of token ids, hashed to 64 bits (empty below 5 tokens)."""
    values = np.asarray(tokens.values, np.int64)
    if len(values) < SHINGLE:
        return [np.zeros(0, np.uint64) for _ in range(len(tokens.lengths))]
    windows = np.lib.stride_tricks.sliding_window_view(values, SHINGLE)
    hashes = row_hashes(windows)
    offsets = np.asarray(tokens.offsets)
    return [
        np.unique(hashes[start : max(start, end - SHINGLE + 1)])
        for start, end in itertools.pairwise(offsets)
    ]


def check_jaccard(threshold: float) -> None:
    """Refuse a threshold MinHash LSH cannot band, naming the setting and its range.

    Raises:
        UsageError: ``threshold`` outside (0, :data:`MAX_JACCARD`].
    """
    if not 0 < threshold <= MAX_JACCARD:
        raise UsageError(
            f"jaccard: {threshold:g} is outside (0, {MAX_JACCARD}]: give the 5-gram Jaccard "
            f"similarity a near duplicate has at least (default {DEFAULT_JACCARD})"
        )


def near_duplicates(
    mine: Ragged, theirs: Ragged, threshold: float = DEFAULT_JACCARD
) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``mine``'s rows, the training row most like it at Jaccard >= ``threshold``.

    Returns that row's index (-1 where none) and the exact Jaccard of their 5-gram sets.

    Raises:
        UsageError: ``threshold`` outside (0, :data:`MAX_JACCARD`].
    """
    from datasketch import MinHashLSH

    check_jaccard(threshold)
    ours = shingle_sets(mine)
    best = np.full(len(ours), -1, np.int64)
    similarity = np.zeros(len(ours), np.float64)
    lsh = MinHashLSH(threshold=threshold, num_perm=PERMUTATIONS, weights=_WEIGHTS)
    with lsh.insertion_session() as session:
        for row, minhash in _signed(ours):
            session.insert(row, minhash, check_duplication=False)
    if lsh.is_empty():
        return best, similarity
    for start in range(0, len(theirs), _CHUNK):
        chunk = shingle_sets(_rows(theirs, start, min(start + _CHUNK, len(theirs))))
        for offset, minhash in _signed(chunk):
            for row in lsh.query(minhash):
                j = _jaccard(ours[row], chunk[offset])
                if j >= threshold and j > similarity[row]:
                    best[row], similarity[row] = start + offset, j
    return best, similarity


def _rows(tokens: Ragged, first: int, stop: int) -> Ragged:
    """Rows ``first`` to ``stop`` (exclusive) of ``tokens``, as their own ragged array (a view)."""
    offsets = np.asarray(tokens.offsets)[first : stop + 1]
    values = np.asarray(tokens.values)[offsets[0] : offsets[-1]]
    return Ragged(values, offsets - offsets[0])


def _signed(sets: list[np.ndarray]) -> list[tuple[int, Any]]:
    """``(row, its MinHash)`` for each row with a shingle (shorter rows: exact duplicates only)."""
    from datasketch import MinHash

    rows = [i for i, s in enumerate(sets) if len(s)]
    signatures = MinHash.bulk(
        [sets[i].tolist() for i in rows], num_perm=PERMUTATIONS, hashfunc=int, scheme="affine64"
    )
    return list(zip(rows, signatures, strict=True))


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    shared = len(np.intersect1d(a, b, assume_unique=True))
    return shared / (len(a) + len(b) - shared)
