"""Running models: inference, the isolated child process, a week's evaluations.

Owns: the inference engine (``inference``), the child process that loads and runs checkpoints
(``isolation``), inference speed (``timing``), a week's plan and its recorded outcomes
(``pipeline``), evaluating a candidate file (``candidate``) and starting flows from the CLI
without Prefect (``orchestration``). Imports every layer below it (root, cost, checkpoints,
evalsets, history, gate); never ``reports``.
"""
