"""Networks a user might bring to the example app (examples/quickstart-depl) instead of its ``Net``.

``benchmarks/example_app_bytes.sh`` appends ``from benchmarks.example_app_nets import NAME as Net``
to a copy of the app's ``task.py``: the ServerApp and the ClientApp then build this network.
Both take the app's 1x8x8 digits and give 10 logits.
"""

from __future__ import annotations

import torch
from torch import nn


class BnCnn(nn.Module):
    """A small CNN with BatchNorm after every conv and a global average pool."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(torch.flatten(self.features(x), 1))


class Mlp(nn.Module):
    """A two-hidden-layer MLP on the 64 pixels."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64),
                                    nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.layers(x)
