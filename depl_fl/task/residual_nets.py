"""A small residual network with BatchNorm for the bundled 8x8 digits (``model=digits_resnet``).

Not a spec network (:mod:`depl_fl.task.archs`): it reaches DepL through the
same factory path as a user's own network (``model.factory``), so its
variants come from torch-pruning's dependency graph, with the channels of
every residual add coupled and the BatchNorm layers pruned with them.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ResidualBlock(nn.Module):
    """Two 3x3 conv + BatchNorm; identity shortcut, or a 1x1 conv + BatchNorm when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class DigitsResNet(nn.Module):
    """Stem conv + BatchNorm, an identity block, a strided projection block, average pool, linear head.

    Parameters
    ----------
    num_classes, in_channels : int
        Classes and image channels of the dataset.
    width : int
        Channels of the stem and the first block; the second block has twice as many.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.block1 = ResidualBlock(width, width)
        self.block2 = ResidualBlock(width, 2 * width, stride=2)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.block2(self.block1(F.relu(self.bn(self.stem(x)))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def digits_resnet(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The ``model.factory`` of ``model=digits_resnet``: :class:`DigitsResNet` of width 16."""
    return DigitsResNet(num_classes, in_channels)
