"""Tiny real torch models the tests build checkpoints from (importable as factories)."""

from __future__ import annotations

import torch
from torch import nn


class TinyNet(nn.Module):
    """A two-layer classifier over flat feature vectors."""

    def __init__(self, features: int = 4, classes: int = 3, hidden: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.flatten(1))


def tiny_net(features: int = 4, classes: int = 3) -> TinyNet:
    """A function factory, as opposed to a class factory."""
    return TinyNet(features=features, classes=classes)


class NotAModule:
    """A callable that builds something that is not a model."""


class Marker:
    """Pickles to a call that would create a file: what a malicious checkpoint does."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, (f"touch {self.path}",))
