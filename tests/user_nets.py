"""Networks a user might bring: ResNet-, ResNeXt-, MobileNetV2-, ConvNeXt-style, GroupNorm with
squeeze-and-excitation, PReLU and InstanceNorm, MLPs (one with a lazy layer), concat and Flower's
quickstart ``Net``, vision transformers (``nn.TransformerEncoderLayer`` and attention written by hand);
refused: a channel shuffle and a GRU. Then a zoo of layer patterns (MobileNetV3, EfficientNet with
stochastic depth, ConvNeXt with layer scale, ViTs with a class token or separate q/k/v, MLP-Mixer,
U-Net, CBAM, GLU, ShuffleNetV2's split, per-channel buffers, LSTMs, detached branches), each working
or refused in one line (``tests/test_user_zoo.py``).

Each is a factory ``NAME(num_classes=K, in_channels=C)`` as ``model.factory``
expects (torchvision does not import beside this torch, so they are defined here).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv + BatchNorm, identity or 1x1 projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet: stem, stages of basic blocks, global average pool, linear head."""

    def __init__(self, blocks: tuple[int, ...], widths: tuple[int, ...], num_classes: int = 10,
                 in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, cin = [], widths[0]
        for i, (n, w) in enumerate(zip(blocks, widths, strict=True)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if (i > 0 and j == 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet_tiny(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """A small ResNet (two stages, identity and projection shortcuts)."""
    return ResNet((1, 1), (8, 16), num_classes, in_channels)


def resnet18(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """ResNet-18 for 32x32 images (11 M parameters)."""
    return ResNet((2, 2, 2, 2), (64, 128, 256, 512), num_classes, in_channels)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project; residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x + self.block(x) if self.use_res else self.block(x)


class MobileNetV2Tiny(nn.Module):
    """A small MobileNetV2: stem, inverted residual blocks (one with a residual add), head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU6())
        self.blocks = nn.Sequential(InvertedResidual(8, 12, 2, 2), InvertedResidual(12, 12, 1, 2),
                                    InvertedResidual(12, 16, 2, 2))
        self.head = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


def mobilenet_v2_tiny(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """Factory of :class:`MobileNetV2Tiny`."""
    return MobileNetV2Tiny(num_classes, in_channels)


def mlp(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A plain MLP on flattened 8x8 images."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, 48), nn.ReLU(), nn.Linear(48, 24),
                         nn.ReLU(), nn.Linear(24, num_classes))


class ConcatNet(nn.Module):
    """Two branches concatenated along channels (Inception/DenseNet style), then a flatten."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.a = nn.Conv2d(in_channels, 6, 3, padding=1)
        self.b = nn.Conv2d(in_channels, 4, 1)
        self.mix = nn.Conv2d(10, 12, 3, padding=1)
        self.fc = nn.Linear(12 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = torch.cat([F.relu(self.a(x)), F.relu(self.b(x))], dim=1)
        x = F.max_pool2d(F.relu(self.mix(x)), 2)
        return self.fc(torch.flatten(x, 1))


def concat_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ConcatNet` (8x8 inputs)."""
    return ConcatNet(num_classes, in_channels)


class QuickstartNet(nn.Module):
    """Flower quickstart-pytorch's ``Net``: its forward hard-codes the flattened size."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def quickstart_net(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """Factory of :class:`QuickstartNet` (32x32 inputs)."""
    return QuickstartNet(num_classes, in_channels)


class QuickstartNet8(nn.Module):
    """The quickstart ``Net``'s hard-coded flatten, on 8x8 digits."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.view(-1, 16 * 2 * 2)
        return self.fc2(F.relu(self.fc1(x)))


def quickstart_net_8(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`QuickstartNet8` (8x8 inputs)."""
    return QuickstartNet8(num_classes, in_channels)


class HardCodedStackNet(nn.Module):
    """``depth`` convs, each followed by a reshape to its hard-coded width: every conv's group breaks the
    forward once it loses channels; only the hidden linear layer before the head can be compressed."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, depth: int = 12, width: int = 16) -> None:
        super().__init__()
        self.width = width
        self.convs = nn.ModuleList(nn.Conv2d(in_channels if i == 0 else width, width, 3, padding=1)
                                   for i in range(depth))
        self.fc = nn.Linear(width, 32)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        for conv in self.convs:
            y = F.relu(conv(x))
            x = y.reshape(y.shape[0], self.width, *y.shape[2:])
        return self.head(F.relu(self.fc(x.mean((2, 3)))))


def hard_coded_stack_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`HardCodedStackNet` (12 breaking groups)."""
    return HardCodedStackNet(num_classes, in_channels)


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: the channels scaled by a gate computed from their means."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, max(channels // 4, 1), 1)
        self.expand = nn.Conv2d(max(channels // 4, 1), channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        gate = torch.sigmoid(self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(x, 1)))))
        return x * gate


class GroupNormNet(nn.Module):
    """GroupNorm (4 groups), squeeze-and-excitation, a depthwise conv and a 1x1-conv classifier."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 24, 3, padding=1, bias=False)
        self.norm = nn.GroupNorm(4, 24)
        self.se = SqueezeExcite(24)
        self.dw = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.pw = nn.Conv2d(24, 16, 1)
        self.head = nn.Conv2d(16, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.se(F.relu(self.norm(self.stem(x))))
        x = F.relu(self.pw(F.relu(self.dw(x))))
        return torch.flatten(F.adaptive_avg_pool2d(self.head(x), 1), 1)


def group_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`GroupNormNet`."""
    return GroupNormNet(num_classes, in_channels)


class ChannelsLastNet(nn.Module):
    """A ConvNeXt-style block: depthwise conv, LayerNorm and MLP on channels-last features, residual."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 16, 2, stride=2)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.stem(x)
        y = self.down(F.gelu(self.up(self.norm(self.dw(x).permute(0, 2, 3, 1)))))
        return self.head((x + y.permute(0, 3, 1, 2)).mean(dim=(2, 3)))


def channels_last_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ChannelsLastNet`."""
    return ChannelsLastNet(num_classes, in_channels)


def lazy_mlp(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """An MLP whose first layer learns its input size at the first forward (``nn.LazyLinear``)."""
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(48, bias=False), nn.ReLU(),
                         nn.Linear(48, 24, bias=False), nn.BatchNorm1d(24), nn.ReLU(),
                         nn.Linear(24, num_classes))


class SpatialLayerNormNet(nn.Module):
    """A LayerNorm over channels and space: its shape hard-codes the channel count."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.norm = nn.LayerNorm([8, 8, 8])
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(F.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))


def spatial_layer_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SpatialLayerNormNet` (8x8 inputs)."""
    return SpatialLayerNormNet(num_classes, in_channels)


class PerChannelNet(nn.Module):
    """PReLU and InstanceNorm (per-channel parameters), a layer applied twice, average pooling, flatten."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 12, 3, padding=1)
        self.act = nn.PReLU(12)
        self.norm = nn.InstanceNorm2d(12, affine=True)
        self.twice = nn.Conv2d(12, 12, 3, padding=1)
        self.fc = nn.Linear(12 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.norm(self.act(self.stem(x)))
        x = F.elu(self.twice(F.elu(self.twice(x))))
        return self.fc(torch.flatten(F.avg_pool2d(x, 2), 1))


def per_channel_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`PerChannelNet` (8x8 inputs)."""
    return PerChannelNet(num_classes, in_channels)


class VisionTransformer(nn.Module):
    """A small ViT: patch embedding conv, position embedding, pre-norm encoder layers, mean pooling, head.

    ``batch_first=False`` runs the encoder on ``(tokens, batch, embed)``, as
    ``nn.TransformerEncoderLayer`` does by default.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, *, image_size: int = 8, patch: int = 2,
                 embed: int = 32, depth: int = 2, heads: int = 2, ffn: int = 64,
                 batch_first: bool = True) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.patch = nn.Conv2d(in_channels, embed, patch, stride=patch)
        self.position = nn.Parameter(torch.zeros(1, (image_size // patch) ** 2, embed))
        layer = nn.TransformerEncoderLayer(embed, heads, ffn, dropout=0.0, batch_first=batch_first,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed)
        self.head = nn.Linear(embed, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.position
        if self.batch_first:
            pooled = self.encoder(tokens).mean(dim=1)
        else:
            pooled = self.encoder(tokens.transpose(0, 1)).mean(dim=0)
        return self.head(self.norm(pooled))


def vit_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A ViT for the 8x8 digits: 2x2 patches (16 tokens), embedding 32, 2 heads, 2 layers, FFN 64."""
    return VisionTransformer(num_classes, in_channels)


def vit_net_seq_first(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """:func:`vit_net` with the encoder on ``(tokens, batch, embed)`` (``batch_first=False``)."""
    return VisionTransformer(num_classes, in_channels, batch_first=False)


def vit_tiny(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """ViT-Tiny's size for 32x32 images: 4x4 patches, embedding 192, 12 layers, 3 heads, FFN 768."""
    return VisionTransformer(num_classes, in_channels, image_size=32, patch=4, embed=192, depth=12, heads=3,
                             ffn=768)


class HandAttention(nn.Module):
    """Multi-head self-attention written by hand: one fused q/k/v linear, softmax, output projection.

    With ``fused`` the products run in ``F.scaled_dot_product_attention`` instead.
    """

    def __init__(self, embed: int, heads: int, fused: bool = False) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        self.qkv = nn.Linear(embed, 3 * embed)
        self.proj = nn.Linear(embed, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out = torch.softmax(q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class HandAttentionNet(nn.Module):
    """Patch and position embedding, a pre-norm block of hand-written attention and a GELU MLP, head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, fused: bool = False) -> None:
        super().__init__()
        self.patch = nn.Conv2d(in_channels, 32, 2, stride=2)
        self.position = nn.Parameter(torch.zeros(1, 16, 32))
        self.norm1 = nn.LayerNorm(32)
        self.attention = HandAttention(32, 2, fused)
        self.norm2 = nn.LayerNorm(32)
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.position
        tokens = tokens + self.attention(self.norm1(tokens))
        tokens = tokens + self.down(F.gelu(self.up(self.norm2(tokens))))
        return self.head(tokens.mean(dim=1))


def hand_attention_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`HandAttentionNet` (8x8 inputs)."""
    return HandAttentionNet(num_classes, in_channels)


def sdpa_attention_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """:class:`HandAttentionNet` with its products in ``F.scaled_dot_product_attention`` (8x8 inputs)."""
    return HandAttentionNet(num_classes, in_channels, fused=True)


class ResNeXtNet(nn.Module):
    """A ResNeXt-style bottleneck: a grouped 3x3 conv (4 groups) with GroupNorm (8 groups), a residual add."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.reduce = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32))
        self.grouped = nn.Conv2d(32, 32, 3, padding=1, groups=4, bias=False)
        self.norm = nn.GroupNorm(8, 32)
        self.expand = nn.Sequential(nn.Conv2d(32, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.stem(x))
        y = F.relu(self.norm(self.grouped(F.relu(self.reduce(x)))))
        x = F.relu(x + self.expand(y))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnext_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ResNeXtNet`."""
    return ResNeXtNet(num_classes, in_channels)


class ChannelShuffleNet(nn.Module):
    """ShuffleNet's channel shuffle between a grouped 1x1 conv and a depthwise conv (refused)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 12, 3, padding=1)
        self.grouped = nn.Conv2d(12, 12, 1, groups=3)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.head = nn.Linear(12, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.grouped(F.relu(self.stem(x))))
        b, c, h, w = x.shape
        x = x.view(b, 3, c // 3, h, w).transpose(1, 2).reshape(b, c, h, w)
        return self.head(F.relu(self.dw(x)).mean((2, 3)))


def channel_shuffle_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ChannelShuffleNet`."""
    return ChannelShuffleNet(num_classes, in_channels)


class RowRNN(nn.Module):
    """The image's rows as a sequence through a recurrent layer straight from the pixels, a linear head:
    the recurrent layer's hidden size is the only width to prune (none with ``proj_size``)."""

    def __init__(self, cell: type[nn.RNNBase], hidden: int, num_classes: int = 10,
                 in_channels: int = 1, proj_size: int = 0) -> None:
        super().__init__()
        extra = {"proj_size": proj_size} if proj_size else {}
        self.rnn = cell(in_channels * 8, hidden, batch_first=True, **extra)
        self.head = nn.Linear(proj_size or hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, c, h, w = x.shape
        out, _ = self.rnn(x.permute(0, 2, 1, 3).reshape(b, h, c * w))
        return self.head(out[:, -1])


def row_gru(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The rows through a GRU of 16 units (8x8 inputs)."""
    return RowRNN(nn.GRU, 16, num_classes, in_channels)


def row_projected_lstm(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The rows through an LSTM of 24 units projected to 12 (8x8 inputs): its hidden size is kept whole."""
    return RowRNN(nn.LSTM, 24, num_classes, in_channels, proj_size=12)


# ---- a zoo of layer patterns users bring (8x8 digits, one channel)


class LayerScaleBlock(nn.Module):
    """ConvNeXt block: depthwise 7x7, channels-last LayerNorm, GELU MLP, per-channel layer scale, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.gamma * self.down(F.gelu(self.up(y)))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtNet(nn.Module):
    """A patchify stem, two ConvNeXt blocks with layer scale, global pooling, LayerNorm and head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 16, 2, stride=2)
        self.blocks = nn.Sequential(LayerScaleBlock(16), LayerScaleBlock(16))
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(self.norm(self.blocks(self.stem(x)).mean(dim=(2, 3))))


def convnext_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ConvNeXtNet`."""
    return ConvNeXtNet(num_classes, in_channels)


class HardSqueezeExcite(nn.Module):
    """MobileNetV3's squeeze-and-excitation: ReLU, then a hard-sigmoid gate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, max(channels // 4, 8), 1)
        self.expand = nn.Conv2d(max(channels // 4, 8), channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(x.mean((2, 3), keepdim=True)))))


class V3Block(nn.Module):
    """MobileNetV3 bneck: expand, depthwise, SE, project (Hardswish); a residual only at stride 1."""

    def __init__(self, cin: int, hidden: int, cout: int, stride: int) -> None:
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                    nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                                nn.BatchNorm2d(hidden), nn.Hardswish())
        self.se = HardSqueezeExcite(hidden)
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.use_res else y


class MobileNetV3Tiny(nn.Module):
    """Stem, a stride-1 residual bneck, a stride-2 bneck without residual, a Hardswish head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(V3Block(16, 32, 16, 1), V3Block(16, 48, 24, 2))
        self.head = nn.Sequential(nn.Linear(24, 64), nn.Hardswish(), nn.Dropout(0.2),
                                  nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def mobilenet_v3_tiny(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`MobileNetV3Tiny`."""
    return MobileNetV3Tiny(num_classes, in_channels)


class DropPath(nn.Module):
    """Stochastic depth: in training, a whole residual branch is dropped per sample (rescaled)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], *([1] * (x.dim() - 1)), device=x.device) >= self.p
        return x * keep.to(x.dtype) / (1.0 - self.p)


class MBConv(nn.Module):
    """MBConv: expand, depthwise, SiLU SE, project; dropout and stochastic depth on the branch."""

    def __init__(self, channels: int, expand: int = 4, drop_path: float = 0.2) -> None:
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                    nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden, bias=False),
                                nn.BatchNorm2d(hidden), nn.SiLU())
        self.se_reduce = nn.Conv2d(hidden, channels // 2, 1)
        self.se_expand = nn.Conv2d(channels // 2, hidden, 1)
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))
        self.dropout = nn.Dropout2d(0.1)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.dw(self.expand(x))
        y = y * torch.sigmoid(self.se_expand(F.silu(self.se_reduce(y.mean((2, 3), keepdim=True)))))
        return x + self.drop_path(self.dropout(self.project(y)))


class EfficientNetTiny(nn.Module):
    """Stem, two MBConv blocks with stochastic depth, a 1x1 head conv, dropout, classifier."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.SiLU())
        self.blocks = nn.Sequential(MBConv(16), MBConv(16))
        self.head = nn.Sequential(nn.Conv2d(16, 48, 1, bias=False), nn.BatchNorm2d(48), nn.SiLU())
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(48, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = self.head(self.blocks(self.stem(x))).mean((2, 3))
        return self.classifier(self.dropout(x))


def efficientnet_tiny(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`EfficientNetTiny`."""
    return EfficientNetTiny(num_classes, in_channels)


class ClsTokenViT(nn.Module):
    """A ViT with a class token concatenated before the tokens and read out by the head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, embed: int = 32) -> None:
        super().__init__()
        self.patch = nn.Conv2d(in_channels, embed, 2, stride=2)
        self.cls = nn.Parameter(torch.zeros(1, 1, embed))
        self.position = nn.Parameter(torch.zeros(1, 17, embed))
        layer = nn.TransformerEncoderLayer(embed, 2, 64, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed)
        self.head = nn.Linear(embed, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.position
        return self.head(self.norm(self.encoder(tokens)[:, 0]))


def cls_token_vit(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ClsTokenViT`."""
    return ClsTokenViT(num_classes, in_channels)


class SeparateQKVAttention(nn.Module):
    """Self-attention with separate query, key and value linears."""

    def __init__(self, embed: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(embed, embed), nn.Linear(embed, embed), nn.Linear(embed, embed)
        self.out = nn.Linear(embed, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, n, c = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, n, self.heads, c // self.heads).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c // self.heads), dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, c))


class SeparateQKVViT(nn.Module):
    """Patch and position embedding, two pre-norm blocks of separate-q/k/v attention and a GELU MLP."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.patch = nn.Conv2d(in_channels, 32, 2, stride=2)
        self.position = nn.Parameter(torch.zeros(1, 16, 32))
        self.norms = nn.ModuleList([nn.LayerNorm(32) for _ in range(4)])
        self.attention = nn.ModuleList([SeparateQKVAttention(32, 4) for _ in range(2)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
                                  for _ in range(2)])
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.position
        for i, (attention, mlp) in enumerate(zip(self.attention, self.mlp, strict=True)):
            tokens = tokens + attention(self.norms[2 * i](tokens))
            tokens = tokens + mlp(self.norms[2 * i + 1](tokens))
        return self.head(tokens.mean(dim=1))


def separate_qkv_vit(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SeparateQKVViT`."""
    return SeparateQKVViT(num_classes, in_channels)


class MixerBlock(nn.Module):
    """MLP-Mixer block: a token-mixing MLP over the patch dimension (transposed), then a channel MLP."""

    def __init__(self, tokens: int, channels: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_up = nn.Linear(tokens, token_hidden)
        self.token_down = nn.Linear(token_hidden, tokens)
        self.norm2 = nn.LayerNorm(channels)
        self.channel_up = nn.Linear(channels, channel_hidden)
        self.channel_down = nn.Linear(channel_hidden, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.norm1(x).transpose(1, 2)                        # (batch, channels, tokens)
        x = x + self.token_down(F.gelu(self.token_up(y))).transpose(1, 2)
        return x + self.channel_down(F.gelu(self.channel_up(self.norm2(x))))


class MixerNet(nn.Module):
    """MLP-Mixer on 2x2 patches (16 tokens, ``channels`` channels), two blocks, mean over tokens, head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, channels: int = 24) -> None:
        super().__init__()
        self.patch = nn.Conv2d(in_channels, channels, 2, stride=2)
        self.blocks = nn.Sequential(MixerBlock(16, channels, 32, 48), MixerBlock(16, channels, 32, 48))
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(tokens)).mean(dim=1))


def mixer_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`MixerNet`."""
    return MixerNet(num_classes, in_channels)


def mixer_net_square(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """:class:`MixerNet` with as many channels as tokens (16): the token axis passes for the channels'."""
    return MixerNet(num_classes, in_channels, channels=16)


class UNetTiny(nn.Module):
    """A U-Net-style encoder/decoder: a strided down path, ConvTranspose2d up, skip concatenation."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(in_channels, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(12, 24, 3, stride=2, padding=1), nn.BatchNorm2d(24), nn.ReLU())
        self.up = nn.ConvTranspose2d(24, 12, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(24, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        skip = self.enc1(x)
        y = self.dec(torch.cat([skip, self.up(self.enc2(skip))], dim=1))
        return self.head(y.mean((2, 3)))


def unet_tiny(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`UNetTiny`."""
    return UNetTiny(num_classes, in_channels)


class SpatialAttentionNet(nn.Module):
    """CBAM-style spatial attention: channel mean and max as a 2-channel map, a 7x7 conv, a sigmoid gate."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.gate = nn.Conv2d(2, 1, 7, padding=3)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x))
        pooled = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)
        x = x * torch.sigmoid(self.gate(pooled))
        return self.head(F.relu(self.conv2(x)).mean((2, 3)))


def spatial_attention_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SpatialAttentionNet`."""
    return SpatialAttentionNet(num_classes, in_channels)


class TokenLinearNet(nn.Module):
    """A conv's features made tokens by ``x.flatten(2).transpose(1, 2)``, a per-token MLP, mean, head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.token_mlp = nn.Linear(16, 32)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        tokens = F.relu(self.conv(x)).flatten(2).transpose(1, 2)   # (batch, 64 pixels, 16 channels)
        return self.head(F.relu(self.token_mlp(tokens)).mean(dim=1))


def token_linear_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`TokenLinearNet`."""
    return TokenLinearNet(num_classes, in_channels)


class LoopTiedNet(nn.Module):
    """Residual MLP blocks in an ``nn.ModuleList`` loop, and one square linear applied twice (tied)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.inp = nn.Linear(in_channels * 64, 32)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 32))
                                     for _ in range(3)])
        self.tied = nn.Linear(32, 32)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.inp(torch.flatten(x, 1)))
        for block in self.blocks:
            x = x + block(x)
        x = F.relu(self.tied(F.relu(self.tied(x))))
        return self.head(x)


def loop_tied_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`LoopTiedNet`."""
    return LoopTiedNet(num_classes, in_channels)


class ChannelBufferNet(nn.Module):
    """A fixed per-channel scale held as a registered buffer of shape ``[C]`` (not trained)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16))
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x)) * self.scale.view(1, -1, 1, 1)
        return self.head(F.relu(self.conv2(x)).mean((2, 3)))


def channel_buffer_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ChannelBufferNet`."""
    return ChannelBufferNet(num_classes, in_channels)


class ConvLSTMNet(nn.Module):
    """A conv stem whose rows feed an LSTM (channels x width per row), the last state to the head."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.lstm = nn.LSTM(8 * 8, 24, batch_first=True)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv(x))
        b, c, h, w = x.shape
        out, _ = self.lstm(x.permute(0, 2, 1, 3).reshape(b, h, c * w))
        return self.head(out[:, -1])


def conv_lstm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ConvLSTMNet` (8x8 inputs)."""
    return ConvLSTMNet(num_classes, in_channels)


def row_lstm(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The rows through an LSTM of 24 units (8x8 inputs)."""
    return RowRNN(nn.LSTM, 24, num_classes, in_channels)


class DetachNet(nn.Module):
    """A frozen branch computed under ``torch.no_grad()`` and a ``.detach()``-ed gate on the features."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x))
        with torch.no_grad():
            gate = torch.sigmoid(x.mean(dim=(2, 3), keepdim=True))
        y = F.relu(self.conv2(x * gate.detach()))
        return self.head(y.mean((2, 3)))


def detach_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`DetachNet`."""
    return DetachNet(num_classes, in_channels)


class DetachedLayerNet(nn.Module):
    """A layer whose output leaves the autograd graph (``.detach()``) before the next layer reads it."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        features = F.relu(self.conv1(x)).detach()     # conv1 trained by nothing: a frozen feature extractor
        return self.head(F.relu(self.conv2(features)).mean((2, 3)))


def detached_layer_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`DetachedLayerNet`."""
    return DetachedLayerNet(num_classes, in_channels)


class InplaceNet(nn.Module):
    """VGG-style ``nn.Sequential``: in-place ReLUs, adaptive pooling, ``nn.Flatten``, dropout, BatchNorm1d."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((2, 2)))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(128, 64), nn.BatchNorm1d(64),
                                        nn.ReLU(inplace=True), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.classifier(self.features(x))


def inplace_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`InplaceNet` (8x8 inputs)."""
    return InplaceNet(num_classes, in_channels)


class ShapedScaleNet(nn.Module):
    """Per-channel parameters shaped for broadcasting: a scale ``[1, C, 1, 1]`` and a shift ``[C, 1, 1]``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.gamma = nn.Parameter(torch.linspace(0.5, 1.5, 16).reshape(1, 16, 1, 1))
        self.beta = nn.Parameter(torch.zeros(16, 1, 1))
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x)) * self.gamma + self.beta
        return self.head(F.relu(self.conv2(x)).mean((2, 3)))


def shaped_scale_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ShapedScaleNet`."""
    return ShapedScaleNet(num_classes, in_channels)


class GatedNet(nn.Module):
    """A GLU gate: a conv's channels split in halves by ``chunk``, one half gating the other."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        a, b = self.conv(x).chunk(2, dim=1)
        y = F.relu(self.conv2(a * torch.sigmoid(b)))
        return self.head(y.reshape(y.size(0), y.size(1), -1).mean(-1))


def gated_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`GatedNet`."""
    return GatedNet(num_classes, in_channels)


class SplitNet(nn.Module):
    """ShuffleNetV2's split: half the channels pass, half go through a branch, then concatenated."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.branch = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=8),
                                    nn.Conv2d(8, 8, 1))
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        a, b = torch.split(F.relu(self.stem(x)), 8, dim=1)
        return self.head(torch.cat([a, self.branch(b)], dim=1).mean((2, 3)))


def split_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SplitNet`."""
    return SplitNet(num_classes, in_channels)


class NonPersistentBufferNet(nn.Module):
    """A per-channel scale as a non-persistent buffer: not in the state, so it cannot follow the channels."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16), persistent=False)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head((F.relu(self.conv1(x)) * self.scale.view(1, -1, 1, 1)).mean((2, 3)))


def non_persistent_buffer_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`NonPersistentBufferNet`."""
    return NonPersistentBufferNet(num_classes, in_channels)


class TransposeTiedNet(nn.Module):
    """An autoencoder-style tie: the encoder's weight read transposed (``F.linear(h, enc.weight.t())``)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.enc = nn.Linear(in_channels * 64, 32)
        self.mid = nn.Linear(32, 32)
        self.head = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = F.relu(self.mid(F.relu(self.enc(torch.flatten(x, 1)))))
        return self.head(F.linear(h, self.enc.weight.t()))


def transpose_tied_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`TransposeTiedNet`."""
    return TransposeTiedNet(num_classes, in_channels)


class ParameterMatmulNet(nn.Module):
    """A weight held as a bare ``nn.Parameter`` and applied with ``@`` (no layer for torch-pruning to see)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.inp = nn.Linear(in_channels * 64, 32)
        self.weight = nn.Parameter(torch.randn(32, 24) * 0.1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(F.relu(F.relu(self.inp(torch.flatten(x, 1))) @ self.weight))


def parameter_matmul_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`ParameterMatmulNet`."""
    return ParameterMatmulNet(num_classes, in_channels)


class NoGradLayerNet(nn.Module):
    """A frozen layer run under ``torch.no_grad()`` between two trained ones: the graph breaks at it."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.frozen = nn.Conv2d(16, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.conv1(x))
        with torch.no_grad():
            x = F.relu(self.frozen(x))
        return self.head(F.relu(self.conv2(x)).mean((2, 3)))


def no_grad_layer_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`NoGradLayerNet`."""
    return NoGradLayerNet(num_classes, in_channels)


class AuxHeadNet(nn.Module):
    """GoogLeNet-style auxiliary logits: in training, the forward returns ``(logits, aux_logits)``."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.aux = nn.Linear(16, num_classes)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        features = F.relu(self.conv(x)).mean((2, 3))
        return (self.head(features), self.aux(features)) if self.training else self.head(features)


def aux_head_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`AuxHeadNet`."""
    return AuxHeadNet(num_classes, in_channels)


class TrackedInstanceNormNet(nn.Module):
    """InstanceNorm with running statistics, which torch-pruning 1.6.1 does not prune with the channels."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.norm = nn.InstanceNorm2d(16, affine=True, track_running_stats=True)
        self.conv2 = nn.Conv2d(16, 24, 3, padding=1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(F.relu(self.conv2(F.relu(self.norm(self.conv(x))))).mean((2, 3)))


def tracked_instance_norm_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`TrackedInstanceNormNet`."""
    return TrackedInstanceNormNet(num_classes, in_channels)


class SharedWeightNet(nn.Module):
    """Two linear layers tied to one weight (``self.b.weight = self.a.weight``) between prunable layers."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.inp = nn.Linear(in_channels * 64, 32)
        self.a = nn.Linear(32, 32)
        self.b = nn.Linear(32, 32)
        self.b.weight = self.a.weight
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = F.relu(self.inp(torch.flatten(x, 1)))
        return self.head(F.relu(self.b(F.relu(self.a(h)))))


def shared_weight_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`SharedWeightNet`."""
    return SharedWeightNet(num_classes, in_channels)


class CountingNet(nn.Module):
    """A float buffer of shape ``[1]`` counting the forward passes in place (``self.calls += 1``)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.register_buffer("calls", torch.zeros(1))
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        self.calls += 1
        return self.head(F.relu(self.conv(x)).mean((2, 3)))


def counting_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`CountingNet`."""
    return CountingNet(num_classes, in_channels)


def fixed_width_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A network whose output layer ignores ``num_classes`` (3 outputs on a 10-class dataset)."""
    return CountingNet(3, in_channels)
