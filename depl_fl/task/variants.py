"""Cost of a model variant (full or compressed) for the scenario's ``models``.

FLOPs are counted, not timed: forward hooks on every ``Conv2d``/``Linear``
count multiply-accumulates (MACs) on one dummy sample; ``FLOPs = 2 * MACs``
(bias adds, ReLU and pooling are ignored, < 1 % here). One training step costs
about 3x the forward pass (forward + gradient w.r.t. activations + gradient
w.r.t. weights, each about one forward), so ``train_flops_per_sample = 3 * 2 *
MACs``. The size is the float32 byte count of the pruned state, i.e. what one
transfer (download or upload) of the model moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from depl_fl.task.archs import arch_spec
from depl_fl.task.models import build_model
from depl_fl.task.pruning import kept_width

TRAIN_TO_FORWARD = 3.0
"""Training FLOPs per sample relative to one forward pass."""


@dataclass(frozen=True)
class VariantCost:
    """Per-sample training FLOPs, transfer size and parameter count of a variant."""

    train_flops_per_sample: float
    size_bytes: float
    params: int


def variant_widths(arch: str, compression: float) -> tuple[int, ...]:
    """Group widths of ``arch`` after removing ``compression`` of every group."""
    return tuple(kept_width(w, compression) for w in arch_spec(arch).default_widths)


def forward_macs(model: nn.Module, in_channels: int, image_size: int) -> int:
    """Multiply-accumulates of one forward pass of one sample through ``model``."""
    total = 0

    def hook(module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        nonlocal total
        if isinstance(module, nn.Conv2d):
            per_output = (module.in_channels // module.groups) * module.kernel_size[0] * module.kernel_size[1]
            total += output[0].numel() * per_output
        else:
            total += module.in_features * module.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    try:
        with torch.no_grad():
            model(torch.zeros(1, in_channels, image_size, image_size))
    finally:
        for h in handles:
            h.remove()
    return total


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
        Architecture name.
    compression : float
        Fraction of channels removed per prunable group (0 = full model).
    num_classes, in_channels, image_size : int
        Task geometry.

    Returns
    -------
    VariantCost
        ``train_flops_per_sample = 3 * 2 * forward MACs``, ``size_bytes = 4 *
        params`` (float32). Channel choice does not change the counts, so an
        untrained model with the pruned widths is measured.
    """
    model = build_model(arch, num_classes, in_channels, image_size,
                        widths=variant_widths(arch, compression), seed=0)
    macs = forward_macs(model, in_channels, image_size)
    params = sum(p.numel() for p in model.parameters())
    return VariantCost(
        train_flops_per_sample=float(TRAIN_TO_FORWARD * 2 * macs),
        size_bytes=float(4 * params),
        params=int(params),
    )


def model_id(compression: float) -> str:
    """Scenario model id of a compression factor: ``full``, ``p50``, ``p75``, ``p90``..."""
    return "full" if compression == 0 else f"p{int(round(compression * 100))}"
