"""The Parquet metric history: evaluations, per-example predictions, comparisons.

Owns: reading, appending and compacting the history (``store``) and the ledger of every file it
published (``ledger``). Imports the root modules only.
"""
