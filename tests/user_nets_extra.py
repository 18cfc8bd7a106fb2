"""A third zoo of networks users bring: outputs that are not one tensor, and layers the other zoos lack.

Forwards that return a dict of logits and features, a Hugging Face-style
output object, a ``(logits, embedding)`` pair in both modes, GoogLeNet-style
auxiliary logits in a namedtuple (training mode only), a domain-adversarial
head behind a custom ``torch.autograd.Function``; an encoder/decoder with
``nn.Upsample`` and ``ConvTranspose2d``, a learnable per-channel scale and a
scalar temperature, concat pooling (``F.adaptive_max_pool2d`` beside a mean)
into a bias-free head, input normalisation as float buffers, activation
checkpointing, an ``nn.Sequential`` from an ``OrderedDict``, a LayerNorm MLP,
dilated convs after reflection and zero padding with per-channel PReLU,
Mish/SELU/LocalResponseNorm/Dropout2d/AlphaDropout, ``nn.Unflatten``, a
Conv1d over the rows, a stem that repeats a gray input to RGB, a block
applied twice, ``F.unfold`` patches, an ``nn.ParameterDict`` of scales,
``F.interpolate`` of the input, two branches fused by ``nn.Bilinear``, a
bidirectional two-layer LSTM after a conv, a 1x1 conv written with
``torch.einsum`` on a bare parameter;
and a network refused in one line: a stem that ignores ``in_channels``
(``tests/test_user_zoo_extra.py``, ``benchmarks/byom_unseen_zoo.py``).

Each is a factory ``NAME(num_classes=K, in_channels=C)`` for the bundled 8x8 digits.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


class TwoConvFeatures(nn.Module):
    """Two 3x3 convs with ReLU, mean-pooled: the features most networks below start from."""

    def __init__(self, in_channels: int, width: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return F.relu(self.conv2(F.relu(self.conv1(x)))).mean((2, 3))


class DictOutputNet(nn.Module):
    """A forward returning ``{"logits": ..., "features": ...}``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = TwoConvFeatures(in_channels)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # noqa: D102
        f = self.features(x)
        return {"logits": self.fc(f), "features": f}


@dataclass
class ClassifierOutput:
    """A Hugging Face-style output object: the logits as an attribute beside the hidden states."""

    logits: torch.Tensor
    hidden_states: torch.Tensor | None = None


class HFOutputNet(nn.Module):
    """A GELU MLP returning a :class:`ClassifierOutput`."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.embed = nn.Linear(in_channels * 64, 64)
        self.hidden = nn.Linear(64, 64)
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> ClassifierOutput:  # noqa: D102
        h = F.gelu(self.hidden(F.gelu(self.embed(x.flatten(1)))))
        return ClassifierOutput(logits=self.classifier(h), hidden_states=h)


class TupleAlwaysNet(nn.Module):
    """``(logits, normalised embedding)`` in training and evaluation mode (a metric-learning head)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = TwoConvFeatures(in_channels)
        self.proj = nn.Linear(32, 16)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        f = self.features(x)
        return self.fc(f), F.normalize(self.proj(f), dim=1)


GoogLeNetOutputs = namedtuple("GoogLeNetOutputs", ["logits", "aux_logits"])


class GoogLeNetAuxNet(nn.Module):
    """torchvision GoogLeNet's pattern: an auxiliary classifier on middle features, in training mode only."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
        self.aux = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Conv2d(32, 16, 1), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.7), nn.Linear(32, num_classes))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> GoogLeNetOutputs | torch.Tensor:  # noqa: D102
        x = F.relu(self.conv2(F.max_pool2d(F.relu(self.conv1(x)), 2)))
        aux = self.aux(x) if self.training else None
        logits = self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.conv3(x)), 1), 1))
        return GoogLeNetOutputs(logits, aux) if self.training else logits


class HardCodedAuxNet(nn.Module):
    """An auxiliary head in training mode only, reading ``x.view(-1, 32 * 4 * 4)``: a hard-coded width."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
        self.aux = nn.Linear(32 * 4 * 4, num_classes)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:  # noqa: D102
        x = F.relu(self.conv2(F.max_pool2d(F.relu(self.conv1(x)), 2)))
        logits = self.fc(F.relu(self.conv3(x)).mean((2, 3)))
        return (logits, self.aux(x.view(-1, 32 * 4 * 4))) if self.training else logits


class GradientReversal(torch.autograd.Function):
    """DANN's gradient reversal: the identity forward, the gradient negated backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return -grad


class DomainAdversarialNet(nn.Module):
    """A class head and, in training mode, a domain head behind :class:`GradientReversal`."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = TwoConvFeatures(in_channels)
        self.fc = nn.Linear(32, num_classes)
        self.domain = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:  # noqa: D102
        f = self.features(x)
        if self.training:
            return self.fc(f), self.domain(GradientReversal.apply(f))
        return self.fc(f)


class EncoderDecoderNet(nn.Module):
    """Encoder, a decoder with ``nn.Upsample`` and ``ConvTranspose2d`` over a skip concatenation, a head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU())
        self.enc2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.SiLU())
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec1 = nn.Conv2d(32, 16, 3, padding=1)
        self.deconv = nn.ConvTranspose2d(16 + 16, 16, 2, stride=2)
        self.head = nn.Sequential(nn.Conv2d(16, 24, 3, stride=2, padding=1), nn.Hardswish(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        e1 = self.enc1(x)
        d = F.relu(self.dec1(self.up(self.enc2(e1))))
        return self.head(F.relu(self.deconv(torch.cat([d, e1], 1))))


class TemperatureScaleNet(nn.Module):
    """A learnable per-channel scale of shape ``[C]`` indexed to broadcast, and a scalar temperature."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(16))
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)
        self.temperature = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x)) * self.scale[None, :, None, None]
        return self.fc(F.relu(self.conv2(x)).mean((2, 3))) / self.temperature


class ConcatPoolNet(nn.Module):
    """fastai's concat pooling: ``F.adaptive_max_pool2d`` beside a mean, BatchNorm1d, a bias-free head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn = nn.BatchNorm1d(64)
        self.fc = nn.Linear(64, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        pooled = torch.cat([F.adaptive_max_pool2d(x, 1).flatten(1), x.mean((2, 3))], dim=1)
        return self.fc(self.bn(pooled))


class NormalizedInputNet(nn.Module):
    """Input normalisation by float buffers ``[1, C, 1, 1]`` and a fixed per-channel gain buffer."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.register_buffer("mean", torch.full((1, in_channels, 1, 1), 0.3))
        self.register_buffer("std", torch.full((1, in_channels, 1, 1), 0.4))
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.register_buffer("channel_gain", torch.linspace(0.5, 1.5, 16).view(1, 16, 1, 1))
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.bn1(self.conv1((x - self.mean) / self.std))) * self.channel_gain
        return self.fc(F.relu(self.bn2(self.conv2(x))).mean((2, 3)))


class CheckpointedNet(nn.Module):
    """The middle block under activation checkpointing (``torch.utils.checkpoint``) in training."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                                   nn.Conv2d(32, 32, 3, padding=1))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x))
        x = checkpoint(self.block, x, use_reentrant=False) if self.training else self.block(x)
        return self.fc(F.relu(x).mean((2, 3)))


class LayerNormMLP(nn.Module):
    """Linear layers only: an input projection, a pre-norm residual GELU MLP, LayerNorm, a head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.inp = nn.Linear(in_channels * 64, 64)
        self.norm1 = nn.LayerNorm(64)
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)
        self.norm2 = nn.LayerNorm(64)
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = self.inp(x.flatten(1))
        h = h + self.fc2(F.gelu(self.fc1(self.norm1(h))))
        return self.head(self.norm2(h))


class DilatedPadNet(nn.Module):
    """Reflection and zero padding before dilated convs, ``nn.PReLU(num_parameters=C)``, ``torch.amax``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.pad1 = nn.ReflectionPad2d(2)
        self.conv1 = nn.Conv2d(in_channels, 16, 3, dilation=2)
        self.prelu1 = nn.PReLU(num_parameters=16)
        self.pad2 = nn.ZeroPad2d((1, 1, 1, 1))
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.prelu2 = nn.PReLU(num_parameters=32)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=4, dilation=4)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.prelu2(self.conv2(self.pad2(self.prelu1(self.conv1(self.pad1(x))))))
        return self.fc(torch.amax(F.relu(self.conv3(x)), dim=(2, 3)))


class RegularizedNet(nn.Module):
    """Mish, ``nn.LocalResponseNorm``, ``nn.Dropout2d``; SELU with ``nn.AlphaDropout`` in the classifier."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.lrn = nn.LocalResponseNorm(5)
        self.drop2d = nn.Dropout2d(0.1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32, 48)
        self.adrop = nn.AlphaDropout(0.1)
        self.fc2 = nn.Linear(48, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.drop2d(self.lrn(F.mish(self.conv1(x))))
        x = F.max_pool2d(F.mish(self.conv2(x)), 2)
        x = self.adrop(F.selu(self.fc1(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))))
        return self.fc2(x)


class UnflattenNet(nn.Module):
    """A linear stem made feature maps by ``nn.Unflatten(1, (16, 4, 4))`` (a DCGAN-generator-like stem)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, 16 * 4 * 4), nn.ReLU(),
                                  nn.Unflatten(1, (16, 4, 4)))
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(F.relu(self.conv(self.stem(x))).mean((2, 3)))


class RowConv1dNet(nn.Module):
    """The image rows as a sequence: ``nn.Conv1d`` over the rows, each row's pixels its features."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(in_channels * 8, 32, 3, padding=1)
        self.conv2 = nn.Conv1d(32, 32, 3, padding=2, dilation=2)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, c, h, w = x.shape
        rows = x.permute(0, 1, 3, 2).reshape(b, c * w, h)   # (batch, features, length = rows)
        return self.fc(F.relu(self.conv2(F.relu(self.conv1(rows)))).amax(-1))


class GrayToRGBNet(nn.Module):
    """Ignores ``in_channels``: a 3-channel stem, a 1-channel input repeated to 3 channels first."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        return self.fc(F.relu(self.conv2(F.relu(self.conv1(x)))).mean((2, 3)))


class SharedBlockNet(nn.Module):
    """One conv-BN-ReLU block applied twice in a row (shared weights)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.block(self.block(F.relu(self.stem(x))))
        return self.fc(F.relu(self.conv(x)).mean((2, 3)))


class UnfoldNet(nn.Module):
    """2x2 patches by ``F.unfold``, a linear per patch, reshaped back to a 4x4 map, a conv."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.patch = nn.Linear(in_channels * 4, 16)
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        patches = F.unfold(x, 2, stride=2).transpose(1, 2)          # (batch, 16 patches, C * 4)
        maps = F.relu(self.patch(patches)).transpose(1, 2).reshape(x.shape[0], 16, 4, 4)
        return self.fc(F.relu(self.conv(maps)).mean((2, 3)))


class ParamDictScaleNet(nn.Module):
    """Per-channel scales in an ``nn.ParameterDict`` and shifts in an ``nn.ParameterList``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.scales = nn.ParameterDict({"s1": nn.Parameter(torch.ones(16)),
                                        "s2": nn.Parameter(torch.ones(32))})
        self.shifts = nn.ParameterList([nn.Parameter(torch.zeros(16)), nn.Parameter(torch.zeros(32))])
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x) * self.scales["s1"].view(1, -1, 1, 1) + self.shifts[0].view(1, -1, 1, 1))
        x = F.relu(self.conv2(x) * self.scales["s2"].view(1, -1, 1, 1) + self.shifts[1].view(1, -1, 1, 1))
        return self.fc(x.mean((2, 3)))


class UpsampledInputNet(nn.Module):
    """The digits upsampled to 16x16 by ``F.interpolate`` first, a circular-padded conv, a flatten head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, padding_mode="circular")
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.max_pool2d(F.relu(self.conv1(F.interpolate(x, size=(16, 16), mode="nearest"))), 2)
        return self.fc(torch.flatten(F.relu(self.conv2(x)), 1))


class EinsumNet(nn.Module):
    """A 1x1 conv as ``torch.einsum("bchw,oc->bohw", x, w)`` on a bare parameter (its input sliced)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.mix = nn.Parameter(torch.randn(24, 16) * 0.2)
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(torch.einsum("bchw,oc->bohw", F.relu(self.conv1(x)), self.mix))
        return self.fc(x.mean((2, 3)))


class BilinearNet(nn.Module):
    """A conv branch and an MLP branch fused by ``nn.Bilinear`` (each branch compressed, the fusion whole)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.mlp = nn.Linear(in_channels * 64, 24)
        self.fuse = nn.Bilinear(16, 24, 32)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        a = F.relu(self.conv(x)).mean((2, 3))
        return self.fc(F.relu(self.fuse(a, F.relu(self.mlp(x.flatten(1))))))


class BiLSTMNet(nn.Module):
    """A conv stem whose rows feed a two-layer bidirectional LSTM (input columns and hidden units sliced)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.lstm = nn.LSTM(8 * 8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out, _ = self.lstm(F.relu(self.conv(x)).permute(0, 2, 1, 3).flatten(2))
        return self.fc(out[:, -1])


class RGBOnlyNet(nn.Module):
    """A CIFAR stem hard-coded to 3 input channels, ignoring ``in_channels`` (refused on 1-channel digits)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(F.relu(self.conv1(x)).mean((2, 3)))


def ordered_dict_net(num_classes: int = 10, in_channels: int = 1) -> nn.Sequential:
    """An ``nn.Sequential`` from an ``OrderedDict`` (named entries), adaptive pooling, a bias-free head."""
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(in_channels, 16, 3, padding=1)), ("relu1", nn.ReLU()),
        ("conv2", nn.Conv2d(16, 32, 3, padding=1)), ("bn2", nn.BatchNorm2d(32)), ("relu2", nn.ReLU()),
        ("pool", nn.AdaptiveAvgPool2d((1, 1))), ("flatten", nn.Flatten()),
        ("fc", nn.Linear(32, num_classes, bias=False)),
    ]))


def _factory(cls: type[nn.Module]) -> Any:
    def build(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
        return cls(num_classes, in_channels)

    build.__doc__ = f"Factory of :class:`{cls.__name__}`."
    return build


dict_output_net = _factory(DictOutputNet)
hf_output_net = _factory(HFOutputNet)
tuple_always_net = _factory(TupleAlwaysNet)
googlenet_aux_net = _factory(GoogLeNetAuxNet)
hard_coded_aux_net = _factory(HardCodedAuxNet)
domain_adversarial_net = _factory(DomainAdversarialNet)
encoder_decoder_net = _factory(EncoderDecoderNet)
temperature_scale_net = _factory(TemperatureScaleNet)
concat_pool_net = _factory(ConcatPoolNet)
normalized_input_net = _factory(NormalizedInputNet)
checkpointed_net = _factory(CheckpointedNet)
layer_norm_mlp = _factory(LayerNormMLP)
dilated_pad_net = _factory(DilatedPadNet)
regularized_net = _factory(RegularizedNet)
unflatten_net = _factory(UnflattenNet)
row_conv1d_net = _factory(RowConv1dNet)
gray_to_rgb_net = _factory(GrayToRGBNet)
shared_block_net = _factory(SharedBlockNet)
unfold_net = _factory(UnfoldNet)
param_dict_scale_net = _factory(ParamDictScaleNet)
upsampled_input_net = _factory(UpsampledInputNet)
einsum_net = _factory(EinsumNet)
bilinear_net = _factory(BilinearNet)
bilstm_net = _factory(BiLSTMNet)
rgb_only_net = _factory(RGBOnlyNet)
