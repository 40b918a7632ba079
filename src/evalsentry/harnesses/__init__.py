"""Results of evaluation harnesses (lm-evaluation-harness, Inspect) imported into the history.

Owns: reading a harness's own logs (``lm_eval_logs``: ``lm_eval --log_samples`` folders;
``inspect_logs``: Inspect's logs, through Inspect's reader) into one :class:`~.run.HarnessRun`,
and recording it as a week's evaluation of a model line (``run``), paired by content so the
gate, the reports and the bill read it like any other; picking up each configured line's new
runs for the ``import-results`` flow (``pickup``). Imports the root modules, ``history``,
``gate`` and ``evaluation``; Inspect only on its own path.
"""
