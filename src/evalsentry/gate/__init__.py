"""The regression gate: metrics, their statistics and the verdicts on a week.

Owns: the metrics (``metrics``), the paired statistics (``comparison``, ``resampling``,
``multiplicity``, ``binomial``, ``margin``, ``stats``), drift of live data (``drift``), what an
evalset can resolve (``resolution``), the verdicts and their exit codes (``verdicts``), gating
a week (``week``) and the flipped examples behind it (``flips``). Imports the root modules,
``evalsets`` and ``history``; never ``evaluation`` (the gate reads results, it runs no model)
nor ``reports``.
"""
