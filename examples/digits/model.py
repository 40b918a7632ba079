"""A small convolutional network for the 8x8 handwritten digits."""

from __future__ import annotations

import torch
from torch import nn

PIXEL_MAX = 16.0  # the digits data stores ink as integers 0..16


class DigitsCNN(nn.Module):
    """Two convolutions and a classifier; about 30k parameters, trains in seconds on a CPU."""

    def __init__(self, channels: int = 16, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * channels * 4 * 4, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images shaped ``(N, 1, 8, 8)`` with values 0..16."""
        return self.classifier(self.features(x / PIXEL_MAX))
