"""Model zoo for DepL: small plain-torch networks built from a layer spec.

The spec (:mod:`depl_fl.task.archs`) also drives the structured pruning in
:mod:`depl_fl.task.pruning`, so a pruned model is a genuinely smaller network
(fewer channels/units), never a masked dense one. The models use no
BatchNorm (no buffers), so the state dict holds only weights and biases:
pruning, extraction and aggregation stay exact and identical on server and
clients.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from depl_fl.errors import ScenarioError
from depl_fl.task.archs import ARCHS, ArchSpec, LayerSpec, arch_spec, flatten_spatial
from depl_fl.task.slicing import host_array

__all__ = ["ARCHS", "ArchSpec", "LayerSpec", "SpecNet", "arch_spec", "build_model",
           "get_state", "set_state"]


class SpecNet(nn.Module):
    """A feed-forward network built from an :class:`ArchSpec` and group widths."""

    def __init__(
        self,
        spec: ArchSpec,
        widths: Sequence[int],
        num_classes: int,
        in_channels: int,
        image_size: int,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.widths = tuple(int(w) for w in widths)
        spatial = flatten_spatial(spec, image_size)
        for layer in spec.layers:
            c_in = in_channels if layer.in_group is None else self.widths[layer.in_group]
            c_out = num_classes if layer.out_group is None else self.widths[layer.out_group]
            if layer.kind == "conv":
                module: nn.Module = nn.Conv2d(c_in, c_out, layer.kernel, layer.stride, layer.padding)
            elif layer.kind == "dwconv":
                module = nn.Conv2d(c_in, c_in, layer.kernel, layer.stride, layer.padding, groups=c_in)
            else:
                module = nn.Linear(c_in * (spatial if layer.flatten_in else 1), c_out)
            # He init (fan-in, ReLU) avoids the long initial plateau of torch's
            # default init: digits then learns from the first federated round.
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            nn.init.zeros_(module.bias)
            setattr(self, layer.name, module)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        last = self.spec.layers[-1].name
        for op in self.spec.ops:
            if op == "pool":
                x = F.max_pool2d(x, 2)
            elif op == "gap":
                x = F.adaptive_avg_pool2d(x, 1)
            elif op == "flatten":
                x = torch.flatten(x, 1)
            else:
                x = getattr(self, op)(x)
                if op != last:
                    x = F.relu(x)
        return x


def build_model(
    arch: str,
    num_classes: int,
    in_channels: int,
    image_size: int,
    widths: Sequence[int] | None = None,
    seed: int | None = None,
) -> nn.Module:
    """Build a model of the zoo.

    Parameters
    ----------
    arch : str
        ``digits_cnn`` (8x8 grey digits), ``alexnet_like`` or ``mobilenet_like``
        (32x32 colour images; the latter uses depthwise-separable blocks) or
        ``synthetic_mlp`` (feature vectors as ``(n, features, 1, 1)``, dataset ``synthetic``).
    num_classes, in_channels, image_size : int
        Output classes, input channels and square input side.
    widths : sequence of int, optional
        Channel/unit count of every prunable group; defaults to the full model.
    seed : int, optional
        When given, the initial weights are drawn from this seed without
        touching torch's global random state.

    Returns
    -------
    torch.nn.Module
        A :class:`SpecNet`.
    """
    spec = arch_spec(arch)
    widths = spec.default_widths if widths is None else tuple(int(w) for w in widths)
    if len(widths) != len(spec.default_widths) or min(widths) < 1:
        raise ScenarioError(
            f"{arch} needs {len(spec.default_widths)} positive widths, got {list(widths)}"
        )
    if num_classes < 1 or in_channels < 1 or image_size < 1:
        raise ScenarioError("num_classes, in_channels and image_size must be positive")
    if seed is None:
        return SpecNet(spec, widths, num_classes, in_channels, image_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return SpecNet(spec, widths, num_classes, in_channels, image_size)


def get_state(model: nn.Module) -> dict[str, np.ndarray]:
    """Return the model's state dict as numpy arrays in host memory (copies), whatever the model's device."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def set_state(model: nn.Module, state: Mapping[str, np.ndarray]) -> None:
    """Load numpy arrays (or torch tensors on any device) into ``model``, which keeps its device.

    Names and shapes must match exactly.

    Raises
    ------
    ValueError
        If a name is missing or unexpected, or a shape differs.
    """
    own = model.state_dict()
    if set(own) != set(state):
        missing = sorted(set(own) - set(state))
        extra = sorted(set(state) - set(own))
        raise ValueError(f"state names differ from the model: missing {missing}, unexpected {extra}")
    # Keep the modules' state-dict metadata (their ``_version``): a module whose
    # ``_load_from_state_dict`` reads it (torchvision's MNASNet) refuses a state without it.
    tensors: dict[str, torch.Tensor] = OrderedDict()
    metadata = getattr(own, "_metadata", None)
    if metadata is not None:
        tensors._metadata = metadata  # type: ignore[attr-defined]
    for name, ref in own.items():
        arr = host_array(state[name])
        if tuple(arr.shape) != tuple(ref.shape):
            raise ValueError(f"{name}: shape {arr.shape} does not match the model's {tuple(ref.shape)}")
        tensors[name] = torch.as_tensor(arr, dtype=ref.dtype)
    model.load_state_dict(tensors)
