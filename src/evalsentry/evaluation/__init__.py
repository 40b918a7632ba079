"""Running models: inference, the isolated child process, a week's plan and evaluations.

Owns: the inference engine (``inference``) and the model contract's checks (``contract``), the
child process that loads and runs checkpoints (``child``) and its parent side (``isolation``),
inference speed (``speed`` measures, ``timing`` judges), a week's plan (``planning``), one
evaluation recorded (``pipeline``), evaluating a candidate file (``candidate``) and starting
flows from the CLI without Prefect (``orchestration``). Imports every layer below it (root,
cost, checkpoints, evalsets, history, gate); never ``reports``.
"""
