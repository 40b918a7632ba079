"""The Parquet metric history: evaluations, per-example predictions, comparisons, drift.

Owns: the tables and their schemas (``schema``), the store's files and writes (``files``), the
ledger of every file it published (``ledger``), compaction (``compaction``), ``History`` itself
(``store``: appends, reads, baselines) and the current rows as frames (``frames``). Imports the
root modules only.
"""
