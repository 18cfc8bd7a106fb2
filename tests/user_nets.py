"""Networks a user might bring: ResNet-, ResNeXt-, MobileNetV2-, ConvNeXt-style, GroupNorm with
squeeze-and-excitation, PReLU and InstanceNorm, MLPs (one with a lazy layer), concat and Flower's
quickstart ``Net``, vision transformers (``nn.TransformerEncoderLayer`` and attention written by hand);
refused: a channel shuffle and a GRU.

Each is a factory ``NAME(num_classes=K, in_channels=C)`` as ``model.factory``
expects (torchvision does not import beside this torch, so they are defined here).
"""

from __future__ import annotations

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


class RowGRU(nn.Module):
    """The image's rows as a sequence through a GRU: no convolution or linear channel to prune."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.gru = nn.GRU(in_channels * 8, 16, batch_first=True)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, c, h, w = x.shape
        out, _ = self.gru(x.permute(0, 2, 1, 3).reshape(b, h, c * w))
        return self.head(out[:, -1])


def row_gru(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """Factory of :class:`RowGRU` (8x8 inputs)."""
    return RowGRU(num_classes, in_channels)
