"""Small networks written after the patterns torchvision's networks use (torchvision is BSD-3).

torchvision does not import beside this project's CPU torch, so the patterns
that its networks use and that DepL once mis-handled are written here at a
small size: ShuffleNetV2's units after a channel shuffle (``chunk``, ``cat``,
``view``/``transpose``), ConvNeXt's ``LayerNorm2d`` (a ``nn.LayerNorm``
subclass that permutes to channels-last around ``F.layer_norm``) and layer
scale, and MNASNet's versioned ``_load_from_state_dict``. Each factory takes
``(num_classes, in_channels)`` as ``model.factory`` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    return torch.transpose(x, 1, 2).contiguous().view(batch, channels, height, width)


def _depthwise(channels: int, stride: int) -> nn.Conv2d:
    return nn.Conv2d(channels, channels, 3, stride, 1, bias=False, groups=channels)


class ShuffleUnit(nn.Module):
    """torchvision's ShuffleNetV2 ``InvertedResidual``."""

    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = oup // 2
        self.branch1 = nn.Sequential(
            _depthwise(inp, stride), nn.BatchNorm2d(inp), nn.Conv2d(inp, half, 1, bias=False),
            nn.BatchNorm2d(half), nn.ReLU(inplace=True)) if stride > 1 else nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
            _depthwise(half, stride), nn.BatchNorm2d(half), nn.Conv2d(half, half, 1, bias=False),
            nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """torchvision's ShuffleNetV2, one stage of three units (the first with two units after a shuffle)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(in_channels, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.stage2 = nn.Sequential(ShuffleUnit(24, 48, 2), ShuffleUnit(48, 48, 1), ShuffleUnit(48, 48, 1))
        self.conv5 = nn.Sequential(nn.Conv2d(48, 64, 1, bias=False), nn.BatchNorm2d(64),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stage2(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


class LayerNorm2d(nn.LayerNorm):
    """torchvision's ``LayerNorm2d``: a LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """torchvision's ConvNeXt block (stochastic depth left out: it is the identity in evaluation)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), Permute([0, 2, 3, 1]),
                                   nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
                                   nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_scale * self.block(x) + x


class ConvNeXt(nn.Module):
    """torchvision's ConvNeXt, two stages of width 16 and 32 (``LayerNorm2d`` in stem, downsampling, head)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(in_channels, 16, 2, 2), LayerNorm2d(16, eps=1e-6)), CNBlock(16),
            nn.Sequential(LayerNorm2d(16, eps=1e-6), nn.Conv2d(16, 32, 2, 2)), CNBlock(32))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(LayerNorm2d(32, eps=1e-6), nn.Flatten(1), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


class VersionedNet(nn.Module):
    """MNASNet's pattern: ``_load_from_state_dict`` refuses a state without the module's version."""

    _version = 2

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                    nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):  # noqa: ANN001
        version = local_metadata.get("version", None)
        if version not in (1, 2):
            raise ValueError(f"version should be set to 1 or 2 instead of {version}")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


def shufflenet_v2(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return ShuffleNetV2(num_classes, in_channels)


def convnext(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return ConvNeXt(num_classes, in_channels)


def versioned_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return VersionedNet(num_classes, in_channels)
