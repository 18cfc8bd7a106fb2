"""torchvision's Swin Transformer (v1), its computation rewritten small (torchvision is BSD-3).

torchvision does not import beside this project's CPU torch, so the network
of ``torchvision.models.swin_transformer`` is rewritten here with the same
computation: the patch embedding (a strided convolution, ``Permute`` to
channels-last, ``LayerNorm``), ``SwinTransformerBlock`` (``LayerNorm``, a
shifted window attention, ``LayerNorm``, an MLP; stochastic depth is the
identity, as it is in evaluation), ``PatchMerging`` between stages, and the
head (``LayerNorm``, permute, average pool, flatten, linear). The attention
is torchvision's functional one: ``F.linear`` with the ``qkv`` and ``proj``
modules' weights, a relative position bias read from a table by an index
buffer, ``torch.roll`` for the shift and the attention mask of shifted
windows. Each factory takes ``(num_classes, in_channels)`` as
``model.factory`` does.

torchvision: Copyright (c) Soumith Chintala 2016, All rights reserved.
Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:
(1) redistributions of source code must retain the above copyright notice,
this list of conditions and the following disclaimer; (2) redistributions in
binary form must reproduce the above copyright notice, this list of conditions
and the following disclaimer in the documentation and/or other materials
provided with the distribution; (3) neither the name of the copyright holder
nor the names of its contributors may be used to endorse or promote products
derived from this software without specific prior written permission.
THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
DAMAGES ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.torchvision_patterns import Permute  # torchvision's ``ops.misc.Permute``


class MLP(nn.Sequential):
    """torchvision's ``ops.misc.MLP`` as Swin builds it: linear, GELU, dropout, linear, dropout."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.0), nn.Linear(hidden, dim),
                         nn.Dropout(0.0))


class PatchMerging(nn.Module):
    """Halve the height and width, concatenate the 2x2 neighbours' channels, normalise, project to 2C."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-3], x.shape[-2]
        x = F.pad(x, (0, 0, 0, width % 2, 0, height % 2))
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                       x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


def _shift_mask(padded_h: int, padded_w: int, window: list[int], shift: list[int],
                like: torch.Tensor) -> torch.Tensor:
    """The -100 / 0 mask that keeps shifted windows from attending across the image's wrap."""
    regions = like.new_zeros((padded_h, padded_w))
    rows = ((0, -window[0]), (-window[0], -shift[0]), (-shift[0], None))
    cols = ((0, -window[1]), (-window[1], -shift[1]), (-shift[1], None))
    label = 0
    for r in rows:
        for c in cols:
            regions[r[0]:r[1], c[0]:c[1]] = label
            label += 1
    windows = (padded_h // window[0]) * (padded_w // window[1])
    regions = regions.view(padded_h // window[0], window[0], padded_w // window[1], window[1])
    regions = regions.permute(0, 2, 1, 3).reshape(windows, window[0] * window[1])
    mask = regions.unsqueeze(1) - regions.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


def shifted_window_attention(x: torch.Tensor, qkv_weight: torch.Tensor, proj_weight: torch.Tensor,
                             position_bias: torch.Tensor, window: list[int], num_heads: int,
                             shift: list[int], qkv_bias: torch.Tensor | None = None,
                             proj_bias: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head self-attention within (shifted) windows of a ``B x H x W x C`` map, as torchvision's."""
    batch, height, width, channels = x.shape
    pad_r = (window[1] - width % window[1]) % window[1]
    pad_b = (window[0] - height % window[0]) % window[0]
    x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
    _, padded_h, padded_w, _ = x.shape
    shift = [0 if window[0] >= padded_h else shift[0], 0 if window[1] >= padded_w else shift[1]]
    if sum(shift) > 0:
        x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    windows = (padded_h // window[0]) * (padded_w // window[1])
    x = x.view(batch, padded_h // window[0], window[0], padded_w // window[1], window[1], channels)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(batch * windows, window[0] * window[1], channels)

    qkv = F.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, channels // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = q * (channels // num_heads) ** -0.5
    attn = q.matmul(k.transpose(-2, -1)) + position_bias
    if sum(shift) > 0:
        mask = _shift_mask(padded_h, padded_w, window, shift, x)
        attn = attn.view(x.size(0) // windows, windows, num_heads, x.size(1), x.size(1))
        attn = (attn + mask.unsqueeze(1).unsqueeze(0)).view(-1, num_heads, x.size(1), x.size(1))
    attn = F.softmax(attn, dim=-1)
    x = attn.matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), channels)
    x = F.linear(x, proj_weight, proj_bias)

    x = x.view(batch, padded_h // window[0], padded_w // window[1], window[0], window[1], channels)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(batch, padded_h, padded_w, channels)
    if sum(shift) > 0:
        x = torch.roll(x, shifts=(shift[0], shift[1]), dims=(1, 2))
    return x[:, :height, :width, :].contiguous()


def _relative_position_index(window: list[int]) -> torch.Tensor:
    """For every pair of a window's tokens, the row of the bias table of their offset."""
    coords = torch.stack(torch.meshgrid(torch.arange(window[0]), torch.arange(window[1]), indexing="ij"))
    flat = torch.flatten(coords, 1)
    relative = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    relative[:, :, 0] += window[0] - 1
    relative[:, :, 1] += window[1] - 1
    relative[:, :, 0] *= 2 * window[1] - 1
    return relative.sum(-1).flatten()


class ShiftedWindowAttention(nn.Module):
    """torchvision's ``ShiftedWindowAttention``: module weights, functional attention."""

    def __init__(self, dim: int, window: list[int], shift: list[int], num_heads: int) -> None:
        super().__init__()
        self.window_size, self.shift_size, self.num_heads = window, shift, num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window[0] - 1) * (2 * window[1] - 1), num_heads))
        self.register_buffer("relative_position_index", _relative_position_index(window))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def position_bias(self) -> torch.Tensor:
        tokens = self.window_size[0] * self.window_size[1]
        bias = self.relative_position_bias_table[self.relative_position_index].view(tokens, tokens, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return shifted_window_attention(x, self.qkv.weight, self.proj.weight, self.position_bias(),
                                        self.window_size, self.num_heads, list(self.shift_size),
                                        qkv_bias=self.qkv.bias, proj_bias=self.proj.bias)


class SwinTransformerBlock(nn.Module):
    """Pre-norm residual block: window attention, then an MLP of 4x the width."""

    def __init__(self, dim: int, num_heads: int, window: list[int], shift: list[int]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ShiftedWindowAttention(dim, window, shift, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, 4 * dim)
        for m in self.mlp.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.normal_(m.bias, std=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SwinTransformer(nn.Module):
    """torchvision's ``SwinTransformer`` body and head (v1 blocks)."""

    def __init__(self, patch: int, embed_dim: int, depths: tuple[int, ...], heads: tuple[int, ...],
                 window: int, num_classes: int, in_channels: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(
            nn.Conv2d(in_channels, embed_dim, kernel_size=patch, stride=patch),
            Permute([0, 2, 3, 1]), nn.LayerNorm(embed_dim))]
        for stage, (depth, num_heads) in enumerate(zip(depths, heads, strict=True)):
            dim = embed_dim * 2 ** stage
            layers.append(nn.Sequential(*(
                SwinTransformerBlock(dim, num_heads, [window, window],
                                     [0 if i % 2 == 0 else window // 2] * 2) for i in range(depth))))
            if stage < len(depths) - 1:
                layers.append(PatchMerging(dim))
        self.features = nn.Sequential(*layers)
        features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = nn.LayerNorm(features)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.features(x)).permute(0, 3, 1, 2)
        return self.head(torch.flatten(self.avgpool(x), 1))


def swin_tiny(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A Swin Transformer small enough for 8x8 digits: two stages, windows of 2x2 shifted by 1."""
    return SwinTransformer(2, 24, (2, 2), (3, 6), 2, num_classes, in_channels)


def swin_t_32(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """torchvision's ``swin_t`` sizes (patch 4, embed 96, depths 2-2-6-2, windows of 7), for 32x32 inputs."""
    return SwinTransformer(4, 96, (2, 2, 6, 2), (3, 6, 12, 24), 7, num_classes, in_channels)
