"""Rows hashed to 64 bits in numpy: the split-leak check's lookups (exact rows, n-grams, shingles)."""

from __future__ import annotations

import numpy as np

_PRIME = np.uint64(0x100000001B3)
_MIX = np.uint64(0xBF58476D1CE4E5B9)


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes (FNV-style over 8-byte words, then a final mix)."""
    flat = np.ascontiguousarray(rows.reshape(len(rows), -1))
    data = flat.view(np.uint8).reshape(len(rows), -1)
    pad = (-data.shape[1]) % 8
    if pad:
        data = np.concatenate([data, np.zeros((len(rows), pad), np.uint8)], axis=1)
    words = np.ascontiguousarray(data).view(np.uint64)
    h = np.full(len(rows), np.uint64(0xCBF29CE484222325))
    with np.errstate(over="ignore"):
        for column in words.T:
            h = (h ^ column) * _PRIME
        h ^= h >> np.uint64(31)
        h *= _MIX
        h ^= h >> np.uint64(29)
    return h
