"""Architecture specs of the model zoo (torch-free).

Every architecture is a list of :class:`LayerSpec` entries plus a list of
forward operations. The same spec drives the torch model builder
(:mod:`depl_fl.task.models`) and the numpy-only structured pruning
(:mod:`depl_fl.task.pruning`), which the server imports without torch.

A *prunable group* is a set of channels (or hidden units) produced by one
layer and consumed by the following ones; ``widths`` gives the channel count
of every group.
"""

from __future__ import annotations

from dataclasses import dataclass

from depl_fl.errors import ScenarioError

ARCHS = ("digits_cnn", "alexnet_like", "mobilenet_like", "synthetic_mlp")


@dataclass(frozen=True)
class LayerSpec:
    """One parameterised layer of a spec network.

    Parameters
    ----------
    name : str
        Attribute name; parameters are ``<name>.weight`` and ``<name>.bias``.
    kind : str
        ``"conv"`` (dense 2-D convolution), ``"dwconv"`` (depthwise
        convolution: output channels are its input channels) or ``"linear"``.
    in_group : int or None
        Prunable group feeding the layer; ``None`` = the fixed network input.
    out_group : int or None
        Prunable group produced; ``None`` = fixed output (the classifier).
        For ``dwconv`` it equals ``in_group``.
    kernel, stride, padding : int
        Convolution geometry (ignored for linear layers).
    """

    name: str
    kind: str
    in_group: int | None
    out_group: int | None
    kernel: int = 3
    stride: int = 1
    padding: int = 1
    flatten_in: bool = False


@dataclass(frozen=True)
class ArchSpec:
    """Layers, forward operations and default group widths of an architecture."""

    layers: tuple[LayerSpec, ...]
    ops: tuple[str, ...]
    default_widths: tuple[int, ...]


# Forward ops: a layer name (followed by ReLU unless it is the last layer),
# "pool" (2x2 max pool), "gap" (global average pool) or "flatten".
_SPECS: dict[str, ArchSpec] = {
    "digits_cnn": ArchSpec(
        layers=(
            LayerSpec("conv1", "conv", None, 0),
            LayerSpec("conv2", "conv", 0, 1),
            LayerSpec("fc1", "linear", 1, 2, flatten_in=True),
            LayerSpec("fc2", "linear", 2, None),
        ),
        ops=("conv1", "conv2", "pool", "flatten", "fc1", "fc2"),
        default_widths=(16, 32, 64),
    ),
    "alexnet_like": ArchSpec(
        layers=(
            LayerSpec("conv1", "conv", None, 0),
            LayerSpec("conv2", "conv", 0, 1),
            LayerSpec("conv3", "conv", 1, 2),
            LayerSpec("conv4", "conv", 2, 3),
            LayerSpec("fc1", "linear", 3, 4, flatten_in=True),
            LayerSpec("fc2", "linear", 4, None),
        ),
        ops=("conv1", "pool", "conv2", "pool", "conv3", "conv4", "pool",
             "flatten", "fc1", "fc2"),
        default_widths=(32, 64, 128, 128, 256),
    ),
    "mobilenet_like": ArchSpec(
        layers=(
            LayerSpec("stem", "conv", None, 0),
            LayerSpec("dw1", "dwconv", 0, 0),
            LayerSpec("pw1", "conv", 0, 1, kernel=1, padding=0),
            LayerSpec("dw2", "dwconv", 1, 1, stride=2),
            LayerSpec("pw2", "conv", 1, 2, kernel=1, padding=0),
            LayerSpec("dw3", "dwconv", 2, 2),
            LayerSpec("pw3", "conv", 2, 3, kernel=1, padding=0),
            LayerSpec("dw4", "dwconv", 3, 3, stride=2),
            LayerSpec("pw4", "conv", 3, 4, kernel=1, padding=0),
            LayerSpec("dw5", "dwconv", 4, 4, stride=2),
            LayerSpec("pw5", "conv", 4, 5, kernel=1, padding=0),
            LayerSpec("fc", "linear", 5, None, flatten_in=True),
        ),
        ops=("stem", "dw1", "pw1", "dw2", "pw2", "dw3", "pw3", "dw4", "pw4",
             "dw5", "pw5", "gap", "flatten", "fc"),
        default_widths=(32, 64, 128, 128, 256, 256),
    ),
    # Feature vectors enter as (n, features, 1, 1): in_channels = features, image_size = 1.
    "synthetic_mlp": ArchSpec(
        layers=(
            LayerSpec("fc1", "linear", None, 0, flatten_in=True),
            LayerSpec("fc2", "linear", 0, 1),
            LayerSpec("fc3", "linear", 1, None),
        ),
        ops=("flatten", "fc1", "fc2", "fc3"),
        default_widths=(64, 32),
    ),
}


def arch_spec(arch: str) -> ArchSpec:
    """Return the layer spec of ``arch``.

    Raises
    ------
    ScenarioError
        If ``arch`` is not one of :data:`ARCHS`.
    """
    try:
        return _SPECS[arch]
    except KeyError:
        raise ScenarioError(
            f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}"
        ) from None


def flatten_spatial(spec: ArchSpec, image_size: int) -> int:
    """Number of spatial positions per channel entering the first flatten."""
    size = image_size
    by_name = {layer.name: layer for layer in spec.layers}
    for op in spec.ops:
        if op == "pool":
            size //= 2
        elif op == "gap":
            size = 1
        elif op == "flatten":
            return size * size
        else:
            layer = by_name[op]
            if layer.kind != "linear":
                size = (size + 2 * layer.padding - layer.kernel) // layer.stride + 1
        if size < 1:
            raise ScenarioError(f"image_size {image_size} is too small for this architecture")
    raise AssertionError("spec without flatten")
