"""More networks a Flower/PyTorch user plausibly has, beyond ``tests/user_nets.py``.

VGG with two convolutions a stage and a dropout classifier, DenseNet's growing
concatenation, SqueezeNet's fire modules, Inception's parallel branches, a mix
of activations (PReLU with one shared parameter among them), dilated and
reflect/replicate/circular-padded convolutions, InstanceNorm with and without
affine parameters, an FPN-style upsampling path, a Conv1d over the flattened
pixels, ``nn.ModuleDict`` blocks, weight and spectral norm parametrizations, a
frozen stem, a bottleneck residual with a 1x1 projection shortcut, BatchNorm
without running statistics or without affine parameters, a depthwise conv
with a channel multiplier, PixelShuffle, log-probabilities trained with a
user NLL loss, channels viewed as blocks (a forward that runs at some
compressions only), and factories of unusual signatures
(``tests/test_user_zoo_more.py``, ``benchmarks/byom_zoo_bench.py --module``).

Each is a factory ``NAME(num_classes=K, in_channels=C)`` for the bundled 8x8
digits unless its docstring says otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrizations


class VGGNet(nn.Module):
    """VGG style: ``features`` (two bias-free conv + BatchNorm per stage) and a dropout ``classifier``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()

        def stage(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2)]

        self.features = nn.Sequential(*stage(in_channels, 16), *stage(16, 32))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(32 * 2 * 2, 64),
                                        nn.ReLU(inplace=True), nn.Dropout(0.3), nn.Linear(64, 64),
                                        nn.ReLU(inplace=True), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.classifier(self.features(x))


class DenseLayer(nn.Module):
    """Pre-activation DenseNet layer: BN-ReLU-1x1 conv-BN-ReLU-3x3 conv, concatenated to its input."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, 2 * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(2 * growth)
        self.conv2 = nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.conv2(F.relu(self.norm2(self.conv1(F.relu(self.norm1(x))))))
        return torch.cat([x, y], 1)


class DenseNetTiny(nn.Module):
    """A small DenseNet: stem, dense block of 3 layers, transition (1x1 conv, avg pool), dense block, head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        growth = 6
        self.stem = nn.Conv2d(in_channels, 12, 3, padding=1, bias=False)
        self.block1 = nn.Sequential(*[DenseLayer(12 + i * growth, growth) for i in range(3)])
        self.trans = nn.Sequential(nn.BatchNorm2d(30), nn.ReLU(), nn.Conv2d(30, 16, 1, bias=False),
                                   nn.AvgPool2d(2))
        self.block2 = nn.Sequential(*[DenseLayer(16 + i * growth, growth) for i in range(2)])
        self.norm = nn.BatchNorm2d(28)
        self.fc = nn.Linear(28, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.block2(self.trans(self.block1(self.stem(x))))
        return self.fc(F.relu(self.norm(x)).mean((2, 3)))


class Fire(nn.Module):
    """SqueezeNet's fire module: a 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""

    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, expand, 1)
        self.expand3x3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(x)), F.relu(self.expand3x3(x))], 1)


class SqueezeNetTiny(nn.Module):
    """SqueezeNet style: fire modules, a 1x1 conv classifier with ``num_classes`` outputs, global pooling."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(inplace=True),
                                      Fire(16, 8, 12), Fire(24, 8, 12), nn.MaxPool2d(2, ceil_mode=True),
                                      Fire(24, 12, 16))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(32, num_classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.flatten(self.classifier(self.features(x)), 1)


class InceptionBlock(nn.Module):
    """Inception's four branches: 1x1; 1x1-3x3; 1x1-3x3-3x3; 3x3 max pool-1x1; concatenated."""

    def __init__(self, cin: int) -> None:
        super().__init__()

        def conv(a: int, b: int, k: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(a, b, k, padding=k // 2, bias=False), nn.BatchNorm2d(b), nn.ReLU())

        self.b1 = conv(cin, 8, 1)
        self.b2 = nn.Sequential(conv(cin, 6, 1), conv(6, 8, 3))
        self.b3 = nn.Sequential(conv(cin, 4, 1), conv(4, 6, 3), conv(6, 6, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv(cin, 6, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class InceptionNet(nn.Module):
    """A stem, two Inception blocks with a pool between them, global average pooling, a linear head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.inc1 = InceptionBlock(16)
        self.inc2 = InceptionBlock(28)
        self.fc = nn.Linear(28, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.inc2(F.max_pool2d(self.inc1(self.stem(x)), 2))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ActivationMixNet(nn.Module):
    """PReLU with one shared parameter, LeakyReLU, ELU, GELU, SiLU, Mish, Hardswish, a per-channel PReLU."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.a1 = nn.PReLU()                                # one parameter for every channel
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.a2 = nn.LeakyReLU(0.1)
        self.c3 = nn.Conv2d(16, 24, 3, padding=1)
        self.a3 = nn.ELU()
        self.c4 = nn.Conv2d(24, 24, 3, padding=1)
        self.fc1 = nn.Linear(24, 32)
        self.a5 = nn.PReLU(32, init=0.1)                    # one parameter per unit
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.a2(self.c2(self.a1(self.c1(x))))
        x = F.gelu(self.c4(F.silu(self.a3(self.c3(x)))))
        x = F.mish(x).mean((2, 3))
        return self.head(F.hardswish(self.fc2(self.a5(self.fc1(x)))))


class PaddingNet(nn.Module):
    """Dilated convolutions, ``padding_mode`` reflect, replicate and circular, ``padding="same"``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1, padding_mode="reflect")
        self.c2 = nn.Conv2d(16, 16, 3, padding=2, dilation=2, padding_mode="replicate")
        self.c3 = nn.Conv2d(16, 24, 3, padding="same", dilation=2, padding_mode="circular")
        self.c4 = nn.Conv2d(24, 24, 3, padding="same", bias=False)
        self.bn = nn.BatchNorm2d(24)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.c3(F.relu(self.c2(F.relu(self.c1(x))))))
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        return self.head(F.relu(self.bn(self.c4(x))).mean((2, 3)))


class InstanceNormNet(nn.Module):
    """InstanceNorm2d without affine parameters, then one with them (style-transfer style)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.n1 = nn.InstanceNorm2d(16)
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        self.n2 = nn.InstanceNorm2d(24, affine=True)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.n1(self.c1(x)))
        return self.head(F.relu(self.n2(self.c2(x))).mean((2, 3)))


class FPNNet(nn.Module):
    """A feature pyramid: ``nn.Upsample`` and ``F.interpolate`` of coarse features added to lateral 1x1s."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(24, 32, 3, stride=2, padding=1)
        self.lat1, self.lat2, self.lat3 = nn.Conv2d(16, 16, 1), nn.Conv2d(24, 16, 1), nn.Conv2d(32, 16, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.smooth = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        f1 = F.relu(self.c1(x))
        f2 = F.relu(self.c2(f1))
        f3 = F.relu(self.c3(f2))
        p3 = self.lat3(f3)
        p2 = self.lat2(f2) + self.up(p3)
        p1 = self.lat1(f1) + F.interpolate(p2, size=f1.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(F.relu(self.smooth(p1)).mean((2, 3)))


class PixelConv1dNet(nn.Module):
    """The image as a sequence: ``x.flatten(2)`` (channels x pixels) through Conv1d, BatchNorm1d, pooling."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(in_channels, 16, 5, padding=2)
        self.bn1 = nn.BatchNorm1d(16)
        self.c2 = nn.Conv1d(16, 24, 3, stride=2, padding=1)
        self.c3 = nn.Conv1d(24, 24, 3, padding=1, groups=24)
        self.pool = nn.AdaptiveMaxPool1d(4)
        self.head = nn.Linear(24 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.bn1(self.c1(x.flatten(2))))
        x = F.relu(self.c3(F.relu(self.c2(x))))
        return self.head(self.pool(x).flatten(1))


class ModuleDictNet(nn.Module):
    """Blocks held in an ``nn.ModuleDict`` and run by key, a head picked from another ``ModuleDict``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({
            "stem": nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU()),
            "body": nn.Sequential(nn.Conv2d(16, 24, 3, padding=1), nn.BatchNorm2d(24), nn.ReLU()),
            "neck": nn.Sequential(nn.Conv2d(24, 32, 1), nn.ReLU()),
        })
        self.heads = nn.ModuleDict({"digits": nn.Linear(32, num_classes)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        for key in ("stem", "body", "neck"):
            x = self.blocks[key](x)
        return self.heads["digits"](x.mean((2, 3)))


class WeightNormNet(nn.Module):
    """``parametrizations.weight_norm`` on a conv and a linear layer (a magnitude and a direction entry)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = parametrizations.weight_norm(nn.Conv2d(in_channels, 16, 3, padding=1))
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        self.fc = parametrizations.weight_norm(nn.Linear(24, 32))
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.c2(F.relu(self.c1(x)))).mean((2, 3))
        return self.head(F.relu(self.fc(x)))


class SpectralNormNet(nn.Module):
    """``parametrizations.spectral_norm`` on a conv (power-iteration vectors ``_u``, ``_v`` as buffers)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.c2 = parametrizations.spectral_norm(nn.Conv2d(16, 24, 3, padding=1))
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(F.relu(self.c2(F.relu(self.c1(x)))).mean((2, 3)))


class LegacyWeightNormNet(nn.Module):
    """The older hook-based ``torch.nn.utils.weight_norm`` (``weight_g``/``weight_v`` entries) on one conv."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        import warnings

        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of parametrizations
            self.c2 = torch.nn.utils.weight_norm(nn.Conv2d(16, 24, 3, padding=1))
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(F.relu(self.c2(F.relu(self.c1(x)))).mean((2, 3)))


class PartialWeightNormNet(nn.Module):
    """``parametrizations.weight_norm`` on the stem only: its channels whole, the later convs compressed."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = parametrizations.weight_norm(nn.Conv2d(in_channels, 16, 3, padding=1))
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(24)
        self.c3 = nn.Conv2d(24, 32, 3, padding=1)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.bn2(self.c2(F.relu(self.c1(x)))))
        return self.head(F.relu(self.c3(x)).mean((2, 3)))


class PartialSpectralNormNet(nn.Module):
    """The older hook-based ``torch.nn.utils.spectral_norm`` on the last conv; the first conv compresses."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        import warnings

        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self.c3 = torch.nn.utils.spectral_norm(nn.Conv2d(24, 32, 3, padding=1))
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.c2(F.relu(self.c1(x))))
        return self.head(F.relu(self.c3(x)).mean((2, 3)))


class FrozenStemNet(nn.Module):
    """A stem whose parameters are frozen (``requires_grad=False``), then trained layers."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        for p in self.stem.parameters():
            p.requires_grad_(False)
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(F.relu(self.c2(self.stem(x))).mean((2, 3)))


class FrozenMiddleNet(nn.Module):
    """A frozen layer (``requires_grad=False``) between two trained ones: its input channels are pruned."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.frozen = nn.Conv2d(16, 24, 3, padding=1)
        self.frozen.requires_grad_(False)
        self.c3 = nn.Conv2d(24, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.frozen(F.relu(self.c1(x))))
        return self.head(F.relu(self.c3(x)).mean((2, 3)))


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck: 1x1 reduce, 3x3, 1x1 expand (x4), added to a 1x1 projection shortcut."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.downsample(x))


class BottleneckNet(nn.Module):
    """A stem and two bottleneck blocks, each with a projection shortcut, then a linear head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.layer1 = Bottleneck(16, 8, 1)
        self.layer2 = Bottleneck(32, 12, 2)
        self.fc = nn.Linear(48, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layer2(self.layer1(self.stem(x))), 1), 1))


class BatchNormVariantsNet(nn.Module):
    """BatchNorm without running statistics (batch statistics in evaluation too) and without affine."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16, track_running_stats=False)
        self.c2 = nn.Conv2d(16, 24, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(24, affine=False)
        self.fc = nn.Linear(24, 32)
        self.bn3 = nn.BatchNorm1d(32, momentum=None)             # cumulative moving average
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.bn2(self.c2(F.relu(self.bn1(self.c1(x))))))
        return self.head(F.relu(self.bn3(self.fc(x.mean((2, 3))))))


class DepthMultiplierNet(nn.Module):
    """A depthwise conv with a channel multiplier of 2 (``groups=C``, ``2C`` outputs), MobileNetV1 style."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 12, 3, padding=1)
        self.dw = nn.Conv2d(12, 24, 3, padding=1, groups=12)
        self.pw = nn.Conv2d(24, 32, 1)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.dw(F.relu(self.stem(x))))
        return self.head(F.relu(self.pw(x)).mean((2, 3)))


class PixelShuffleNet(nn.Module):
    """Sub-pixel upsampling: ``nn.PixelShuffle(2)`` folds 4 channels into a 2x2 block (ESPCN style)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.c3 = nn.Conv2d(8, 16, 3, padding=1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.shuffle(F.relu(self.c2(F.relu(self.c1(x)))))
        return self.head(F.relu(self.c3(x)).mean((2, 3)))


class ActNorm(nn.Module):
    """Glow's ActNorm: a per-channel shift and scale set from the first training batch (a bool flag)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.register_buffer("initialized", torch.tensor(False))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if self.training:
            if not bool(self.initialized):
                with torch.no_grad():
                    self.loc.copy_(-x.mean((0, 2, 3), keepdim=True))
                    self.scale.copy_(1.0 / (x.std((0, 2, 3), keepdim=True) + 1e-6))
                    self.initialized.fill_(True)
            self.steps += 1
        return (x + self.loc) * self.scale


class ActNormNet(nn.Module):
    """Convs with ActNorm (data-dependent initialisation, a bool and an int64 buffer) instead of BatchNorm."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1, self.n1 = nn.Conv2d(in_channels, 16, 3, padding=1), ActNorm(16)
        self.c2, self.n2 = nn.Conv2d(16, 24, 3, padding=1), ActNorm(24)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.n2(self.c2(F.relu(self.n1(self.c1(x))))))
        return self.head(x.mean((2, 3)))


class ChannelBlocksNet(nn.Module):
    """A forward that views ``conv2``'s channels as blocks and back (an activation per block).

    With ``blocks``, that many blocks (``x.view(b, blocks, -1, h, w)``), else
    blocks of ``block_size`` channels (``x.view(b, -1, block_size, h, w)``):
    only the channel counts the view divides run, so the group of ``conv2``
    breaks at some compressions and not at others.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, width: int = 12,
                 blocks: int | None = None, block_size: int | None = None) -> None:
        super().__init__()
        self.blocks, self.block_size = blocks, block_size
        self.conv1 = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, width, 3, padding=1)
        self.conv3 = nn.Conv2d(width, 16, 3, padding=1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = self.conv2(x)
        b, c, h, w = x.shape
        blocks = (b, self.blocks, -1, h, w) if self.blocks else (b, -1, self.block_size, h, w)
        x = F.relu(x.view(blocks)).view(b, c, h, w)
        x = F.relu(self.conv3(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LogSoftmaxNet(nn.Module):
    """A network ending in ``log_softmax`` (log-probabilities), trained with :func:`nll_loss`."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 24, 3, padding=1)
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        return F.log_softmax(self.fc(x.mean((2, 3))), dim=1)


def nll_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample negative log-likelihood of log-probabilities (``model.loss`` for :class:`LogSoftmaxNet`)."""
    return F.nll_loss(logits, targets, reduction="none")


# --- factories ---------------------------------------------------------------------------------------------


def vgg_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`VGGNet` (8x8 inputs)."""
    return VGGNet(num_classes, in_channels)


def densenet_tiny(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`DenseNetTiny`."""
    return DenseNetTiny(num_classes, in_channels)


def squeezenet_tiny(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SqueezeNetTiny`."""
    return SqueezeNetTiny(num_classes, in_channels)


def inception_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`InceptionNet`."""
    return InceptionNet(num_classes, in_channels)


def activation_mix_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ActivationMixNet`."""
    return ActivationMixNet(num_classes, in_channels)


def padding_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`PaddingNet`."""
    return PaddingNet(num_classes, in_channels)


def instance_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`InstanceNormNet`."""
    return InstanceNormNet(num_classes, in_channels)


def fpn_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`FPNNet`."""
    return FPNNet(num_classes, in_channels)


def pixel_conv1d_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`PixelConv1dNet`."""
    return PixelConv1dNet(num_classes, in_channels)


def module_dict_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ModuleDictNet`."""
    return ModuleDictNet(num_classes, in_channels)


def weight_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`WeightNormNet`."""
    return WeightNormNet(num_classes, in_channels)


def spectral_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SpectralNormNet`."""
    return SpectralNormNet(num_classes, in_channels)


def legacy_weight_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`LegacyWeightNormNet`."""
    return LegacyWeightNormNet(num_classes, in_channels)


def partial_weight_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`PartialWeightNormNet`."""
    return PartialWeightNormNet(num_classes, in_channels)


def partial_spectral_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`PartialSpectralNormNet`."""
    return PartialSpectralNormNet(num_classes, in_channels)


def frozen_stem_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`FrozenStemNet`."""
    return FrozenStemNet(num_classes, in_channels)


def frozen_middle_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`FrozenMiddleNet`."""
    return FrozenMiddleNet(num_classes, in_channels)


def bottleneck_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`BottleneckNet`."""
    return BottleneckNet(num_classes, in_channels)


def batch_norm_variants_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`BatchNormVariantsNet`."""
    return BatchNormVariantsNet(num_classes, in_channels)


def depth_multiplier_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`DepthMultiplierNet`."""
    return DepthMultiplierNet(num_classes, in_channels)


def pixel_shuffle_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`PixelShuffleNet`."""
    return PixelShuffleNet(num_classes, in_channels)


def actnorm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ActNormNet`."""
    return ActNormNet(num_classes, in_channels)


def six_block_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """12 channels viewed as 6 blocks: 6 channels (compression 0.5) run, 3 (0.75) do not."""
    return ChannelBlocksNet(num_classes, in_channels, width=12, blocks=6)


def four_channel_blocks_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """16 channels as blocks of 4: 8 and 4 (compressions 0.5, 0.75) run, 11, 6, 2 (0.3, 0.6, 0.9) do not."""
    return ChannelBlocksNet(num_classes, in_channels, width=16, block_size=4)


def log_softmax_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`LogSoftmaxNet` (train it with ``model.loss=tests.user_nets_more:nll_loss``)."""
    return LogSoftmaxNet(num_classes, in_channels)


def sequential_cnn(num_classes: int = 10, in_channels: int = 1) -> nn.Sequential:
    """A CNN returned as one ``nn.Sequential`` (entries named ``0.weight``, ``1.running_mean``, ...)."""
    return nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, num_classes))


# --- factory signatures ------------------------------------------------------------------------------------


def classes_only(num_classes: int) -> nn.Module:
    """A factory without ``in_channels`` (it builds for the digits' one channel)."""
    return VGGNet(num_classes, 1)


def keyword_factory(**kwargs: Any) -> nn.Module:
    """A factory taking ``**kwargs``."""
    return ModuleDictNet(kwargs["num_classes"], kwargs["in_channels"])


def with_extra_defaults(num_classes: int = 10, in_channels: int = 1, width: int = 16,
                        dropout: float = 0.1) -> nn.Module:
    """A factory with more keyword parameters of its own, all with defaults."""
    return nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(), nn.Dropout(dropout),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))


def positional_only(num_classes: int, in_channels: int, /) -> nn.Module:
    """A factory whose parameters are positional-only, named as DepL offers them (passed by position)."""
    return VGGNet(num_classes, in_channels)


def positional_other_name(classes: int, /, in_channels: int = 1) -> nn.Module:
    """A positional-only parameter of another name without a default (refused)."""
    return VGGNet(classes, in_channels)


def needs_width(num_classes: int, width: int) -> nn.Module:
    """A factory with a required parameter DepL cannot give."""
    return with_extra_defaults(num_classes, 1, width)


def other_names(n_classes: int = 10, channels: int = 1) -> nn.Module:
    """A factory whose parameters have other names, all with defaults (it is called with none)."""
    return VGGNet(n_classes, channels)


def raising_factory(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A factory that raises."""
    raise RuntimeError("weights file not found: /nonexistent/model.pt")


def not_a_module(num_classes: int = 10, in_channels: int = 1) -> Any:
    """A factory returning a dict, not an ``nn.Module``."""
    return {"conv": nn.Conv2d(in_channels, 4, 3)}


#: A network instance at module level, not a factory.
module_instance = VGGNet(10, 1)

#: Not callable at all.
NOT_CALLABLE = 42
