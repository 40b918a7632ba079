"""evalsentry: weekly evaluation of registered PyTorch checkpoints with a regression gate.

The public functions are imported lazily so that ``import evalsentry`` (and the fast CLI paths)
never pay for torch, Great Expectations or pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below loads on first use, declared for type checkers
    from evalsentry.checkpoints.checkpoint import load_checkpoint, save_checkpoint
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.checkpoints.training import TrainingRun, track_training
    from evalsentry.config import load_config
    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.evalsets.freeze import freeze_evalset
    from evalsentry.evaluation.inference import run_inference
    from evalsentry.trust import Trust

__version__ = "0.1.0"

_LAZY = {
    "save_checkpoint": "evalsentry.checkpoints.checkpoint",
    "load_checkpoint": "evalsentry.checkpoints.checkpoint",
    "Registry": "evalsentry.checkpoints.registry",
    "load_config": "evalsentry.config",
    "load_evalset": "evalsentry.evalsets.evalset",
    "freeze_evalset": "evalsentry.evalsets.freeze",
    "run_inference": "evalsentry.evaluation.inference",
    "track_training": "evalsentry.checkpoints.training",
    "TrainingRun": "evalsentry.checkpoints.training",
    "Trust": "evalsentry.trust",
}
__all__ = [
    "Registry",
    "TrainingRun",
    "Trust",
    "__version__",
    "freeze_evalset",
    "load_checkpoint",
    "load_config",
    "load_evalset",
    "run_inference",
    "save_checkpoint",
    "track_training",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evalsentry' has no attribute {name!r}")
