"""A small classifier for rows of numeric feature columns, raw values in, logits out.

The input scaling lives inside the model as buffers, so it travels in the checkpoint's state
dict: the evalset's feature columns, exactly as frozen, are the model's input, and no separate
preprocessing step can drift from the one the model was trained with. List this module (or
your copy of it) under ``trusted_factories:`` in evalsentry.yaml.
"""

from __future__ import annotations

import torch
from torch import nn

#: Floor for a feature's standard deviation: a constant column is centred, not blown up.
MIN_SCALE = 1e-6


class TabularNet(nn.Module):
    """Standardise the ``features`` inputs, one hidden layer, ``classes`` logits."""

    def __init__(self, features: int, classes: int, hidden: int = 32) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("scale", torch.ones(features))
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def fit_scaling(self, inputs: torch.Tensor) -> None:
        """Set the standardisation from training inputs ``(N, features)``."""
        self.mean.copy_(inputs.mean(0))
        self.scale.copy_(inputs.std(0).clamp_min(MIN_SCALE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, classes)`` for raw feature rows ``(N, features)``."""
        return self.net((x - self.mean) / self.scale)
