"""torchvision's own networks as ``model.factory`` entries: ``NAME(num_classes=K, in_channels=C)``.

Each builds the torchvision network untrained (``weights=None``) for ``num_classes``
and swaps its first convolution for one reading ``in_channels`` (same kernel,
stride, padding, bias), the change a user makes for grey-scale or other inputs.
torchvision is optional (it does not import beside this project's CPU torch);
a machine without it gets a one-line ``ImportError``.

Use: ``python -m depl_fl.main model=custom model.factory=benchmarks.torchvision_nets:resnet18``
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn


def _models() -> Any:
    try:
        import torchvision.models as models
    except Exception as exc:  # absent, or built for another torch
        raise ImportError(f"torchvision is needed for these networks and does not import here ({exc})") \
            from None
    return models


def _reading(model: nn.Module, in_channels: int) -> nn.Module:
    """``model`` with its first ``Conv2d`` reading ``in_channels`` channels."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            if module.in_channels == in_channels:
                return model
            conv = nn.Conv2d(in_channels, module.out_channels, module.kernel_size, module.stride,
                             module.padding, module.dilation, 1, module.bias is not None, module.padding_mode)
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, conv)
            return model
    raise ValueError(f"{type(model).__name__} has no Conv2d to read {in_channels} channels")


def _builder(name: str, **kwargs: Any) -> Any:
    def build(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
        model = getattr(_models(), name)(weights=None, num_classes=num_classes, **kwargs)
        return _reading(model, in_channels)

    build.__name__ = name
    build.__doc__ = f"torchvision's ``{name}`` for ``num_classes`` classes, reading ``in_channels`` channels."
    return build


resnet18 = _builder("resnet18")
resnet50 = _builder("resnet50")
resnext50_32x4d = _builder("resnext50_32x4d")
mobilenet_v2 = _builder("mobilenet_v2")
mobilenet_v3_small = _builder("mobilenet_v3_small")
efficientnet_b0 = _builder("efficientnet_b0")
efficientnet_v2_s = _builder("efficientnet_v2_s")
shufflenet_v2_x0_5 = _builder("shufflenet_v2_x0_5")
squeezenet1_1 = _builder("squeezenet1_1")
densenet121 = _builder("densenet121")
regnet_x_400mf = _builder("regnet_x_400mf")
regnet_y_400mf = _builder("regnet_y_400mf")
mnasnet0_5 = _builder("mnasnet0_5")
convnext_tiny = _builder("convnext_tiny")
googlenet = _builder("googlenet", aux_logits=False, init_weights=True)
vgg11_bn = _builder("vgg11_bn")
alexnet = _builder("alexnet")
swin_t = _builder("swin_t")


def vit_small_32(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """torchvision's ``VisionTransformer`` sized for 32x32 inputs (patch 4, 6 layers, 6 heads, width 384)."""
    model = _models().VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=6,
                                        hidden_dim=384, mlp_dim=1536, num_classes=num_classes)
    return _reading(model, in_channels)
