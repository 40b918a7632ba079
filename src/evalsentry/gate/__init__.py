"""The regression gate: metrics, their statistics and the verdicts on a week.

Owns: the metrics (``metrics``) and slices (``slices``), the paired statistics (``comparison``,
``resampling``, ``multiplicity``, ``binomial``, ``margin``, ``stats``), one evaluation against
one reference (``pairs``), drift of live data (``drift``), what an evalset can resolve
(``resolution``), the verdicts and their exit codes (``verdicts``), gating a week or a candidate
(``week``) and the flipped examples behind it (``flips``). Imports the root modules,
``evalsets`` and ``history``; never ``evaluation`` (the gate reads results, it runs no model)
nor ``reports``.
"""
