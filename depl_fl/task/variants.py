"""Cost of a model variant (full or compressed) for the scenario's ``models``.

Measured on the sub-network itself (:func:`depl_fl.task.subnets.build_skeleton`),
whatever the network. FLOPs are counted, not timed: torch's ``FlopCounterMode``
(:mod:`depl_fl.task.flop_counting`) counts the multiply-accumulates (MACs) of
every convolution and matrix product of one forward pass of one dummy sample
(a linear layer applied to every token or pixel counts once per token, an
attention's ``Q K^T`` and ``A V`` products
count as well, fused or written by hand); ``FLOPs = 2 * MACs`` (bias adds,
normalisation, softmax, activations, residual adds and pooling are ignored: a
few percent at most). The pass runs with gradients enabled so that no fused
inference kernel (``nn.TransformerEncoderLayer``'s fast path) hides its
products from the counter. One training step costs about
3x the forward pass (forward + gradient w.r.t. activations + gradient w.r.t.
weights, each about one forward), so ``train_flops_per_sample = 3 * 2 * MACs``.
The size is the byte count of the sub-network's state entries at their own
dtypes (parameters and buffers: exactly the arrays a train message and its
reply carry, without the few hundred bytes of array headers), i.e. what one
transfer (download or upload) of the model moves.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import sdpa_flop_count

from depl_fl.task.flop_counting import FlopCounter
from depl_fl.task.geometry import TaskGeometry

TRAIN_TO_FORWARD = 3.0
"""Training FLOPs per sample relative to one forward pass."""


@dataclass(frozen=True)
class VariantCost:
    """Per-sample training FLOPs, transfer size and parameter count of a variant."""

    train_flops_per_sample: float
    size_bytes: float
    params: int


def forward_macs(model: nn.Module, in_channels: int, image_size: int) -> int:
    """Multiply-accumulates of one forward pass of one ``C x S x S`` sample through ``model``."""
    return sample_macs(model, (in_channels, image_size, image_size))


def sample_macs(model: nn.Module, sample_shape: tuple[int, ...]) -> int:
    """Multiply-accumulates of one forward pass of one sample of ``sample_shape`` through ``model``.

    Convolutions and every matrix product (linear layers, attention) count;
    see the module docstring.
    """
    with torch.enable_grad(), FlopCounter(display=False, custom_mapping=_ATTENTION_KERNELS) as counter:
        model(torch.zeros(1, *sample_shape))
    return int(counter.get_total_flops()) // 2


def _attention_flops(query_shape: tuple[int, ...], key_shape: tuple[int, ...],
                     value_shape: tuple[int, ...], *_args: Any, out_shape: Any = None, **_kwargs: Any) -> int:
    """FLOPs of a fused scaled-dot-product attention: its ``Q K^T`` and ``A V`` products."""
    return int(sdpa_flop_count(query_shape, key_shape, value_shape))


#: Fused attention kernels torch's counter has no formula for (the CPU ones).
_ATTENTION_KERNELS = {getattr(torch.ops.aten, name): _attention_flops
                      for name in ("_scaled_dot_product_flash_attention_for_cpu",
                                   "_scaled_dot_product_fused_attention_overrideable")
                      if hasattr(torch.ops.aten, name)}


def measure_variant(
    arch: str,
    compression: float,
    num_classes: int,
    in_channels: int,
    image_size: int,
) -> VariantCost:
    """Measure training FLOPs per sample and size of a (compressed) variant.

    Parameters
    ----------
    arch : str
        Built-in architecture or factory ``PKG.MODULE:NAME``.
    compression : float
        Fraction of channels removed per prunable group (0 = full model).
    num_classes, in_channels, image_size : int
        Task geometry.

    Returns
    -------
    VariantCost
        ``train_flops_per_sample = 3 * 2 * forward MACs`` and ``size_bytes``
        (all state entries at their dtypes) of the sub-network. Channel choice
        does not change the counts, so the skeleton is measured.
    """
    geo = TaskGeometry(arch, int(num_classes), int(in_channels), int(image_size))
    return network_variant_cost(geo, float(compression))


def network_variant_cost(net: Any, compression: float) -> VariantCost:
    """:func:`measure_variant` for a task geometry or a :class:`depl_fl.task.subnets.UserNetwork`."""
    from depl_fl.task.subnets import cached_skeleton, input_shape_of, network_layout, one_thread

    model = cached_skeleton(net, float(compression))  # read only: its forward is all that is counted
    try:
        with one_thread():
            macs = sample_macs(model.eval(), input_shape_of(net))
    finally:
        model.train()
    params = sum(p.numel() for p in model.parameters())
    return VariantCost(
        train_flops_per_sample=float(TRAIN_TO_FORWARD * 2 * macs),
        size_bytes=float(network_layout(net).size_bytes(float(compression))),
        params=int(params),
    )


@functools.lru_cache(maxsize=16)
def checked_variant_costs(net: Any, compressions: tuple[float, ...]) -> dict[float, VariantCost]:
    """Costs of every variant, after refusing a network whose variants are not its sub-networks.

    ``net`` is a task geometry or a :class:`depl_fl.task.subnets.UserNetwork`,
    cut to ``compressions`` here (:func:`depl_fl.task.geometry.with_compressions`:
    the groups kept whole are those that break at any of them).
    The job's one-time derivation (torch-pruning's graph, the layout, one
    skeleton per variant and the forward check of
    :func:`depl_fl.task.subnets.check_variants`); cached per process.
    """
    from depl_fl.task.geometry import with_compressions
    from depl_fl.task.subnets import check_variants, network_layout

    net = with_compressions(net, compressions)
    check_variants(net, network_layout(net), tuple(float(c) for c in compressions))
    return {float(c): network_variant_cost(net, float(c)) for c in compressions}
