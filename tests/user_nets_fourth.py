"""A fourth zoo of networks users bring: patterns of real Flower/PyTorch code the other three zoos lack.

PyTorch's own MNIST example (``F.max_pool2d``, ``F.dropout(training=...)``,
``F.log_softmax`` trained with the default loss), a GroupNorm ResNet (the
usual federated ResNet), a pre-activation ResNet, a WideResNet block with
dropout, RepVGG's parallel 3x3 + 1x1 + identity branches, GhostNet's cheap
operation with a concatenation sliced back to ``[:, :out]``, ECA attention (a
Conv1d over the channel descriptor), CBAM (a shared MLP on average and max
pooling, a 7x7 spatial gate), selective kernels (``torch.stack`` and a softmax
over the branches), a conv on a layer's own bare parameters through
``F.conv2d``, a ShuffleNetV2 unit (``torch.chunk`` and ``nn.ChannelShuffle``),
``F.glu`` over the channels, ``nn.PixelUnshuffle``, a ``Conv3d`` on the
unsqueezed input, ``nn.Embedding`` of quantised pixels, ``MaxPool2d`` with
``return_indices`` feeding ``MaxUnpool2d``, a ``torch.jit.script``-ed block
and a whole scripted network (both refused),
an ``nn.Sequential`` built with ``add_module`` (tanh GELU, Hardswish, SiLU),
a ``forward(x, return_features=False)`` with a bias-free linear + BatchNorm1d
neck, CoordConv, and an Inception-ResNet block
(``tests/test_user_zoo_fourth.py``, ``benchmarks/byom_fourth_zoo.py``).

Each is a factory ``NAME(num_classes=K, in_channels=C)`` for the bundled 8x8 digits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tests.user_nets_extra import _factory  # the same (num_classes, in_channels) factory


class PyTorchMNISTNet(nn.Module):
    """PyTorch's ``examples/mnist`` net at 8x8: valid convs, ``F.max_pool2d``, dropout, ``F.log_softmax``.

    Exercises log-probabilities trained with DepL's default cross-entropy (a log-softmax
    of log-probabilities is themselves), ``nn.Dropout`` modules and ``F.dropout`` with
    ``training=self.training``, ``torch.flatten`` of a 2x2 map into a linear layer.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.fc1 = nn.Linear(64 * 2 * 2, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = F.dropout(F.relu(self.fc1(x)), p=0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


class GNBlock(nn.Module):
    """A ResNet basic block with ``nn.GroupNorm(2, C)`` in place of BatchNorm (federated ResNets' choice)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = nn.GroupNorm(2, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = nn.GroupNorm(2, cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(2, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = F.relu(self.gn1(self.conv1(x)))
        return F.relu(self.gn2(self.conv2(out)) + self.shortcut(x))


class GroupNormResNet(nn.Module):
    """A GroupNorm ResNet: a stem, two basic blocks (one with a projection shortcut), a linear head.

    Exercises GroupNorm with 2 groups over residual-tied channels (pruned channels must
    stay divisible by the groups), an empty ``nn.Sequential`` as the identity shortcut.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.gn1 = nn.GroupNorm(2, 16)
        self.layer1 = GNBlock(16, 16, 1)
        self.layer2 = GNBlock(16, 32, 2)
        self.linear = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = self.layer2(self.layer1(F.relu(self.gn1(self.conv1(x)))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).view(out.size(0), -1))


class PreActBlock(nn.Module):
    """A pre-activation block: BN-ReLU-conv twice; the shortcut reads the first pre-activation."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if hasattr(self, "shortcut") else x
        out = self.conv1(out)
        return self.conv2(F.relu(self.bn2(out))) + shortcut


class PreActResNet(nn.Module):
    """PreAct ResNet (He et al. 2016, kuangliu's CIFAR code): a ``hasattr(self, "shortcut")`` test in forward.

    Exercises a residual sum that no norm follows (the final BN before pooling reads it),
    a projection shortcut present on some blocks only.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.layer1 = PreActBlock(16, 16, 1)
        self.layer2 = PreActBlock(16, 32, 2)
        self.bn = nn.BatchNorm2d(32)
        self.linear = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = F.relu(self.bn(self.layer2(self.layer1(self.conv1(x)))))
        return self.linear(F.avg_pool2d(out, 4).flatten(1))


class WideBasic(nn.Module):
    """WideResNet's block: BN-ReLU-conv, dropout, BN-ReLU-conv, plus a 1x1 shortcut when widths differ."""

    def __init__(self, cin: int, cout: int, dropout: float, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=True)
        self.dropout = nn.Dropout(p=dropout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=stride, padding=1, bias=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = self.dropout(self.conv1(F.relu(self.bn1(x))))
        return self.conv2(F.relu(self.bn2(out))) + self.shortcut(x)


class WideResNet(nn.Module):
    """A WRN-10-2-like net: widen factor 2, dropout 0.3 inside each block, ``momentum=0.9`` BatchNorm.

    Exercises dropout between two convs of a block, convs with bias before BatchNorm.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        widths = [8, 8 * 2, 16 * 2]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=True)
        self.layer1 = nn.Sequential(WideBasic(widths[0], widths[1], 0.3, 1),
                                    WideBasic(widths[1], widths[1], 0.3, 1))
        self.layer2 = nn.Sequential(WideBasic(widths[1], widths[2], 0.3, 2))
        self.bn1 = nn.BatchNorm2d(widths[2], momentum=0.9)
        self.linear = nn.Linear(widths[2], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = F.relu(self.bn1(self.layer2(self.layer1(self.conv1(x)))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).view(out.size(0), -1))


class RepVGGBlock(nn.Module):
    """RepVGG's training-time block: 3x3 conv-BN + 1x1 conv-BN + an identity BN (same shape), summed."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.dense = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout))
        self.one = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))
        self.identity = nn.BatchNorm2d(cout) if cin == cout and stride == 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        id_out = 0 if self.identity is None else self.identity(x)
        return F.relu(self.dense(x) + self.one(x) + id_out)


class RepVGGNet(nn.Module):
    """RepVGG-A-like stages; exercises three parallel branches summed, one a bare BatchNorm of the input."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stage0 = RepVGGBlock(in_channels, 16, 1)
        self.stage1 = nn.Sequential(RepVGGBlock(16, 24, 2), RepVGGBlock(24, 24, 1))
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.linear(self.gap(self.stage1(self.stage0(x))).flatten(1))


class GhostModule(nn.Module):
    """GhostNet's module: a primary 1x1 conv, a cheap depthwise conv of it, concatenated, cut to ``oup``."""

    def __init__(self, inp: int, oup: int, ratio: int = 2, relu: bool = True) -> None:
        super().__init__()
        self.oup = oup
        init_channels = -(-oup // ratio)
        new_channels = init_channels * (ratio - 1)
        act = nn.ReLU(inplace=True) if relu else nn.Sequential()
        self.primary_conv = nn.Sequential(nn.Conv2d(inp, init_channels, 1, bias=False),
                                          nn.BatchNorm2d(init_channels), act)
        self.cheap_operation = nn.Sequential(
            nn.Conv2d(init_channels, new_channels, 3, 1, 1, groups=init_channels, bias=False),
            nn.BatchNorm2d(new_channels), nn.ReLU(inplace=True) if relu else nn.Sequential())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x1 = self.primary_conv(x)
        x2 = self.cheap_operation(x1)
        return torch.cat([x1, x2], dim=1)[:, :self.oup, :, :]


class GhostNet(nn.Module):
    """Two ghost modules (the second with an odd ``oup``: the slice drops a channel), a head.

    Exercises a concatenation sliced back to a fixed width ``[:, :self.oup]``.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True))
        self.ghost1 = GhostModule(16, 24)
        self.ghost2 = GhostModule(24, 31, relu=False)
        self.fc = nn.Linear(31, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(self.ghost2(self.ghost1(self.stem(x))).mean((2, 3)))


class ECA(nn.Module):
    """Efficient channel attention: a Conv1d(1, 1, k) over the pooled channels as a sequence, a gate."""

    def __init__(self, k_size: int = 3) -> None:
        super().__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.conv = nn.Conv1d(1, 1, kernel_size=k_size, padding=(k_size - 1) // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.avg_pool(x)
        y = self.conv(y.squeeze(-1).transpose(-1, -2)).transpose(-1, -2).unsqueeze(-1)
        return x * torch.sigmoid(y).expand_as(x)


class ECANet(nn.Module):
    """Convs gated by ECA; exercises a Conv1d whose length is the channel count (neighbours mixed)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.eca1 = ECA(3)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.eca2 = ECA(5)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.eca1(F.relu(self.bn1(self.conv1(x))))
        x = self.eca2(F.relu(self.bn2(self.conv2(x))))
        return self.fc(x.mean((2, 3)))


class CBAM(nn.Module):
    """CBAM: a shared 1x1-conv MLP on average and max pooling, a 7x7 conv on ``[mean, max]`` of channels."""

    def __init__(self, channels: int, reduction: int = 4) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(channels, channels // reduction, 1, bias=False), nn.ReLU(),
                                 nn.Conv2d(channels // reduction, channels, 1, bias=False))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = x * torch.sigmoid(self.mlp(F.adaptive_avg_pool2d(x, 1)) + self.mlp(F.adaptive_max_pool2d(x, 1)))
        s = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)
        return x * torch.sigmoid(self.spatial(s))


class CBAMNet(nn.Module):
    """Convs with CBAM; exercises one MLP on two poolings, a channel mean and max concatenated as 2 maps."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.cbam = CBAM(32)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(self.cbam(x).mean((2, 3)))


class SKConv(nn.Module):
    """Selective kernel: 3x3 and dilated 3x3 branches, a squeezed descriptor, a softmax over the branches."""

    def __init__(self, channels: int, reduced: int = 8) -> None:
        super().__init__()
        self.branches = nn.ModuleList([
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=d, dilation=d, bias=False),
                          nn.BatchNorm2d(channels), nn.ReLU()) for d in (1, 2)])
        self.fc = nn.Sequential(nn.Linear(channels, reduced), nn.ReLU())
        self.select = nn.ModuleList([nn.Linear(reduced, channels) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        feats = torch.stack([branch(x) for branch in self.branches], dim=1)      # (b, 2, c, h, w)
        z = self.fc(feats.sum(1).mean((2, 3)))
        weights = torch.softmax(torch.stack([s(z) for s in self.select], dim=1), dim=1)
        return (feats * weights[..., None, None]).sum(1)


class SelectiveKernelNet(nn.Module):
    """A stem and an SK unit; exercises ``torch.stack`` on a new branch dimension and a softmax over it."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.sk = SKConv(16)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(self.sk(F.relu(self.stem(x))).mean((2, 3)))


class FunctionalConvNet(nn.Module):
    """Convs on the module's own bare ``nn.Parameter`` weights through ``F.conv2d`` and ``F.linear``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.weight1 = nn.Parameter(torch.randn(16, in_channels, 3, 3) * 0.3)
        self.bias1 = nn.Parameter(torch.zeros(16))
        self.weight2 = nn.Parameter(torch.randn(32, 16, 3, 3) * 0.1)
        self.bias2 = nn.Parameter(torch.zeros(32))
        self.head_w = nn.Parameter(torch.randn(num_classes, 32) * 0.1)
        self.head_b = nn.Parameter(torch.zeros(num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(F.conv2d(x, self.weight1, self.bias1, padding=1))
        x = F.relu(F.conv2d(x, self.weight2, self.bias2, stride=1, padding=1))
        return F.linear(x.mean((2, 3)), self.head_w, self.head_b)


class ShuffleV2Unit(nn.Module):
    """ShuffleNetV2's unit: ``x.chunk(2, dim=1)``, a branch on one half, ``cat``, ``nn.ChannelShuffle``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        half = channels // 2
        self.branch = nn.Sequential(nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(),
                                    nn.Conv2d(half, half, 3, padding=1, groups=half, bias=False),
                                    nn.BatchNorm2d(half), nn.Conv2d(half, half, 1, bias=False),
                                    nn.BatchNorm2d(half), nn.ReLU())
        self.shuffle = nn.ChannelShuffle(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x1, x2 = x.chunk(2, dim=1)
        return self.shuffle(torch.cat((x1, self.branch(x2)), dim=1))


class ShuffleNetV2Net(nn.Module):
    """A stem, two ShuffleNetV2 units, a 1x1 conv, a head; exercises ``chunk`` and ``nn.ChannelShuffle``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.units = nn.Sequential(ShuffleV2Unit(16), ShuffleV2Unit(16))
        self.conv5 = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(self.conv5(self.units(self.stem(x))).mean([2, 3]))


class GLUNet(nn.Module):
    """Gated convs: ``F.glu(conv(x), dim=1)`` halves ``2C`` channels into values and gates; ``nn.GLU`` too."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 2 * 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 2 * 24, 3, padding=1)
        self.fc = nn.Linear(24, 2 * 32)
        self.glu = nn.GLU(dim=-1)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.glu(self.conv1(x), dim=1)
        x = F.glu(self.conv2(x), dim=1)
        return self.head(self.glu(self.fc(x.mean((2, 3)))))


class PixelUnshuffleNet(nn.Module):
    """A space-to-depth stem: ``nn.PixelUnshuffle(2)`` turns 1x8x8 into 4x4x4 before the first conv."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.unshuffle = nn.PixelUnshuffle(2)
        self.conv1 = nn.Conv2d(in_channels * 4, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.down = nn.PixelUnshuffle(2)
        self.conv3 = nn.Conv2d(32 * 4, 32, 1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv2(F.relu(self.conv1(self.unshuffle(x)))))
        return self.fc(F.relu(self.conv3(self.down(x))).mean((2, 3)))


class Conv3dNet(nn.Module):
    """The image as a volume: ``x.unsqueeze(1)`` through ``nn.Conv3d``, depth folded into channels."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv3d = nn.Conv3d(1, 8, (1, 3, 3), padding=(0, 1, 1))
        self.bn3d = nn.BatchNorm3d(8)
        self.conv2d = nn.Conv2d(8 * in_channels, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, c, h, w = x.shape
        v = F.relu(self.bn3d(self.conv3d(x.unsqueeze(1))))          # (b, 8, c, h, w)
        x = F.relu(self.conv2d(v.reshape(b, -1, h, w)))
        return self.fc(x.mean((2, 3)))


class PixelEmbeddingNet(nn.Module):
    """Pixels quantised to 16 levels as tokens: ``nn.Embedding``, a learned positional parameter, an MLP."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 32)
        self.pos = nn.Parameter(torch.zeros(1, in_channels * 64, 32))
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = (x.flatten(1) * 15).round().long().clamp(0, 15)
        h = (self.embed(tokens) + self.pos).mean(1)
        return self.fc2(F.gelu(self.fc1(h)))


class UnpoolNet(nn.Module):
    """SegNet's pattern: ``nn.MaxPool2d(return_indices=True)`` and ``nn.MaxUnpool2d`` with those indices."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.enc = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.mid = nn.Conv2d(16, 16, 3, padding=1)
        self.unpool = nn.MaxUnpool2d(2, 2)
        self.dec = nn.Conv2d(16, 24, 3, padding=1)
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.enc(x))
        pooled, indices = self.pool(x)
        x = self.unpool(F.relu(self.mid(pooled)), indices, output_size=x.size())
        return self.fc(F.relu(self.dec(x)).mean((2, 3)))


class ScriptableBlock(nn.Module):
    """A conv-BN-ReLU block meant for ``torch.jit.script``."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return F.relu(self.bn(self.conv(x)))


class ScriptedBlockNet(nn.Module):
    """A ``torch.jit.script``-ed middle block (a ``RecursiveScriptModule``) between eager layers."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.block = torch.jit.script(ScriptableBlock(16, 32))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(self.block(F.relu(self.stem(x))).mean((2, 3)))


def scripted_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The whole network ``torch.jit.script``-ed by its factory (a model shipped as TorchScript; refused)."""
    return torch.jit.script(nn.Sequential(ScriptableBlock(in_channels, 16), nn.AdaptiveAvgPool2d(1),
                                          nn.Flatten(), nn.Linear(16, num_classes)))


def add_module_loop_net(num_classes: int = 10, in_channels: int = 1) -> nn.Sequential:
    """An ``nn.Sequential`` built in a loop with ``add_module`` (tanh GELU, Hardswish, SiLU), then a head."""
    net = nn.Sequential()
    widths = [in_channels, 16, 24, 32]
    acts = [nn.GELU(approximate="tanh"), nn.Hardswish(), nn.SiLU()]
    for i, act in enumerate(acts):
        net.add_module(f"conv{i}", nn.Conv2d(widths[i], widths[i + 1], 3, padding=1, bias=False))
        net.add_module(f"bn{i}", nn.BatchNorm2d(widths[i + 1]))
        net.add_module(f"act{i}", act)
    net.add_module("pool", nn.AdaptiveAvgPool2d(1))
    net.add_module("flatten", nn.Flatten())
    net.add_module("head", nn.Linear(32, num_classes))
    return net


class EmbeddingHeadNet(nn.Module):
    """A neck (``Linear(bias=False)``, ``BatchNorm1d``), ``forward(x, return_features=False)``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.neck = nn.Linear(32, 24, bias=False)
        self.neck_bn = nn.BatchNorm1d(24)
        self.classifier = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor, return_features: bool = False) -> Any:  # noqa: D102
        f = F.relu(self.conv2(F.relu(self.conv1(x)))).mean((2, 3))
        emb = self.neck_bn(self.neck(f))
        logits = self.classifier(F.relu(emb))
        return (logits, emb) if return_features else logits


class CoordConvNet(nn.Module):
    """CoordConv: two coordinate maps made in forward (``torch.linspace``) concatenated to the input."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels + 2, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, _, h, w = x.shape
        ys = torch.linspace(-1, 1, h, device=x.device).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w, device=x.device).view(1, 1, 1, w).expand(b, 1, h, w)
        x = F.relu(self.conv1(torch.cat([x, ys, xs], dim=1)))
        return self.fc(F.relu(self.conv2(x)).mean((2, 3)))


class InceptionResNetBlock(nn.Module):
    """Inception-ResNet-A: three branches concatenated, a 1x1 conv to the input width, a scaled residual."""

    def __init__(self, channels: int, scale: float = 0.2) -> None:
        super().__init__()
        self.scale = scale
        self.b0 = nn.Conv2d(channels, 8, 1)
        self.b1 = nn.Sequential(nn.Conv2d(channels, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.b2 = nn.Sequential(nn.Conv2d(channels, 8, 1), nn.ReLU(), nn.Conv2d(8, 12, 3, padding=1),
                                nn.ReLU(), nn.Conv2d(12, 16, 3, padding=1))
        self.up = nn.Conv2d(32, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        mixed = torch.cat([F.relu(self.b0(x)), F.relu(self.b1(x)), F.relu(self.b2(x))], 1)
        return F.relu(x + self.scale * self.up(mixed))


class InceptionResNetNet(nn.Module):
    """Two Inception-ResNet blocks; exercises a 1x1 conv of a concatenation added to its input."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 24, 3, padding=1), nn.ReLU())
        self.blocks = nn.Sequential(InceptionResNetBlock(24), InceptionResNetBlock(24))
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


pytorch_mnist_net = _factory(PyTorchMNISTNet)
group_norm_resnet = _factory(GroupNormResNet)
preact_resnet = _factory(PreActResNet)
wide_resnet = _factory(WideResNet)
repvgg_net = _factory(RepVGGNet)
ghost_net = _factory(GhostNet)
eca_net = _factory(ECANet)
cbam_net = _factory(CBAMNet)
selective_kernel_net = _factory(SelectiveKernelNet)
functional_conv_net = _factory(FunctionalConvNet)
shufflenet_v2_net = _factory(ShuffleNetV2Net)
glu_net = _factory(GLUNet)
pixel_unshuffle_net = _factory(PixelUnshuffleNet)
conv3d_net = _factory(Conv3dNet)
pixel_embedding_net = _factory(PixelEmbeddingNet)
unpool_net = _factory(UnpoolNet)
scripted_block_net = _factory(ScriptedBlockNet)
embedding_head_net = _factory(EmbeddingHeadNet)
coord_conv_net = _factory(CoordConvNet)
inception_resnet_net = _factory(InceptionResNetNet)


def compiled_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The network wrapped by ``torch.compile`` in its factory (an ``OptimizedModule``: ``_orig_mod.*``)."""
    return torch.compile(PyTorchMNISTNet(num_classes, in_channels))


class MaskPrunedNet(nn.Module):
    """``torch.nn.utils.prune.l1_unstructured`` on the stem: ``weight_orig`` and a ``weight_mask`` buffer.

    Exercises a weight a forward pre-hook computes from two entries: the stem's channels
    whole, the later convs compressed.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        from torch.nn.utils import prune

        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        prune.l1_unstructured(self.conv1, name="weight", amount=0.3)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.conv3 = nn.Conv2d(24, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(F.relu(self.conv3(x)).mean((2, 3)))


mask_pruned_net = _factory(MaskPrunedNet)
