"""Frozen, hash-pinned evaluation sets.

Owns: the evalset folder and its manifest (``evalset``), the shape of its stored suite
(``suite_shape``), freezing one (``freeze``), its identity hash (``identity``), the Great
Expectations check of its data (``validation``), verifying then validating before use
(``check``) and the cache of passed checks (``validation_cache``). Imports the root modules only.
"""
