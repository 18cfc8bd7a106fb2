"""The input side of layers torch-pruning 1.6.1 lacks or mis-traces: recurrent layers and ``nn.Bilinear``.

torch-pruning traces a network through autograd and walks into the graph a
layer builds inside its forward. A bidirectional or multi-layer
``nn.LSTM`` (``nn.GRU``, ``nn.RNN``) concatenates its directions inside, so
the channels of the layer before it reach its input through that
concatenation's index mapping and the wrong input columns are sliced
(``tests/test_extra_pruners.py`` pins it); it has no pruner for ``nn.GRU``,
``nn.RNN`` or ``nn.Bilinear`` at all (the last is traced as an elementwise
operation that ties its two inputs and its output into one channel group).

While DepL builds the dependency graph (:func:`traced_as_layers`), each such
layer runs its own forward without gradients and hands on its output joined
to each input by one elementwise reduction, so the graph links the layer
straight to the tensors it reads. The pruners below slice the weights that
read them: a recurrent layer's first-layer input weights (both directions),
a bilinear layer's weight along the first or the second input's dimension
(one pruning function per input, :meth:`BilinearPruner.prune_in2_channels`,
wired in by :func:`separate_bilinear_inputs`). A recurrent layer's hidden
size is kept whole (:func:`keeps_whole`); a bilinear layer's outputs can be
pruned by a group that reaches them (it is no root itself).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from depl_fl.task.torch_pruning_guard import torch_pruning

#: Recurrent layers whose input side DepL prunes (their hidden size stays whole).
RECURRENT_TYPES = (nn.RNNBase,)


def _base_pruner() -> type:
    return torch_pruning().pruner.function.BasePruningFunc


def _keep(width: int, idxs: Sequence[int]) -> list[int]:
    return sorted(set(range(width)) - set(int(i) for i in idxs))


def _sliced(layer: nn.Module, name: str, keep: list[int], dim: int) -> None:
    weight = getattr(layer, name)
    index = torch.as_tensor(keep, dtype=torch.long, device=weight.device)
    setattr(layer, name, nn.Parameter(torch.index_select(weight.detach(), dim, index),
                                      requires_grad=weight.requires_grad))


class HiddenSizeKept(RuntimeError):
    """Raised if a group would prune a recurrent layer's hidden size, which DepL keeps whole."""


def recurrent_pruner() -> Any:
    """A torch-pruning pruner of a recurrent layer's input features (LSTM, GRU, RNN; any depth, direction)."""

    class RecurrentInputPruner(_base_pruner()):
        TARGET_MODULES = RECURRENT_TYPES

        def prune_out_channels(self, layer: nn.RNNBase, idxs: Sequence[int]) -> nn.Module:
            raise HiddenSizeKept(f"{type(layer).__name__}: DepL keeps a recurrent layer's hidden size whole")

        def prune_in_channels(self, layer: nn.RNNBase, idxs: Sequence[int]) -> nn.Module:
            keep = _keep(layer.input_size, idxs)
            # Only the first layer reads the input; deeper layers and the reverse direction's
            # recurrence read hidden states, which stay whole.
            for suffix in ("", "_reverse") if layer.bidirectional else ("",):
                _sliced(layer, f"weight_ih_l0{suffix}", keep, 1)
            layer.input_size = len(keep)
            return layer

        def get_out_channels(self, layer: nn.RNNBase) -> int:
            width = layer.proj_size if getattr(layer, "proj_size", 0) else layer.hidden_size
            return width * (2 if layer.bidirectional else 1)

        def get_in_channels(self, layer: nn.RNNBase) -> int:
            return layer.input_size

    return RecurrentInputPruner()


def bilinear_pruner() -> Any:
    """A torch-pruning pruner of an ``nn.Bilinear``: outputs, first input, second input."""

    class BilinearPruner(_base_pruner()):
        TARGET_MODULES = nn.Bilinear

        def prune_out_channels(self, layer: nn.Bilinear, idxs: Sequence[int]) -> nn.Module:
            keep = _keep(layer.out_features, idxs)
            _sliced(layer, "weight", keep, 0)
            if layer.bias is not None:
                _sliced(layer, "bias", keep, 0)
            layer.out_features = len(keep)
            return layer

        def prune_in_channels(self, layer: nn.Bilinear, idxs: Sequence[int]) -> nn.Module:
            """The first input's features (``weight[:, i, :]``)."""
            keep = _keep(layer.in1_features, idxs)
            _sliced(layer, "weight", keep, 1)
            layer.in1_features = len(keep)
            return layer

        def prune_in2_channels(self, layer: nn.Bilinear, idxs: Sequence[int]) -> nn.Module:
            """The second input's features (``weight[:, :, j]``)."""
            keep = _keep(layer.in2_features, idxs)
            _sliced(layer, "weight", keep, 2)
            layer.in2_features = len(keep)
            return layer

        def get_out_channels(self, layer: nn.Bilinear) -> int:
            return layer.out_features

        def get_in_channels(self, layer: nn.Bilinear) -> int:
            return layer.in1_features

    return BilinearPruner()


def customized_pruners(model: nn.Module) -> dict[type, Any]:
    """The pruners for ``build_dependency(customized_pruners=...)``: one per layer class ``model`` uses.

    torch-pruning looks a customized pruner up by the layer's exact class, so
    a subclass of ``nn.LSTM`` gets its own entry.
    """
    recurrent, bilinear = recurrent_pruner(), bilinear_pruner()
    found: dict[type, Any] = {}
    for module in model.modules():
        if isinstance(module, RECURRENT_TYPES):
            found.setdefault(type(module), recurrent)
        elif isinstance(module, nn.Bilinear):
            found.setdefault(type(module), bilinear)
    return found


def _link(x: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """One elementwise reduction of ``x`` (torch-pruning maps indices through it unchanged), else a zero."""
    if x is None or not x.requires_grad:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    return x.sum(-1, keepdim=True)


def _joined(out: torch.Tensor, first: torch.Tensor, second: torch.Tensor | None = None) -> torch.Tensor:
    """``out`` exactly, its autograd node reading the inputs that need gradients (``addcmul``, value 0)."""
    return torch.addcmul(out.detach(), _link(first, out), _link(second, out), value=0)


@dataclass
class TracedLayers:
    """What :func:`traced_as_layers` records: each bilinear layer's second-input link (its autograd node)."""

    second_inputs: dict[nn.Module, list[Any]] = field(default_factory=dict)


def _recurrent_forward(module: nn.RNNBase) -> Any:
    original = type(module).forward

    def forward(input: Any, hx: Any = None) -> Any:  # noqa: A002 (torch's name)
        data = input.data if isinstance(input, nn.utils.rnn.PackedSequence) else input
        if not data.requires_grad:
            return original(module, input, hx)
        with torch.no_grad():
            out, state = original(module, input, hx)
        if isinstance(out, nn.utils.rnn.PackedSequence):
            return out._replace(data=_joined(out.data, data)), state
        return _joined(out, data), state

    return forward


def _bilinear_forward(module: nn.Bilinear, record: TracedLayers) -> Any:
    original = type(module).forward

    def forward(input1: torch.Tensor, input2: torch.Tensor) -> torch.Tensor:
        if not (input1.requires_grad or input2.requires_grad):
            return original(module, input1, input2)
        with torch.no_grad():
            out = original(module, input1, input2)
        joined = _joined(out, input1, input2)
        if input2.requires_grad:
            record.second_inputs.setdefault(module, []).append(joined.grad_fn.next_functions[2][0])
        return joined

    return forward


@contextlib.contextmanager
def traced_as_layers(model: nn.Module) -> Iterator[TracedLayers]:
    """Within: ``model``'s recurrent and bilinear layers read their inputs directly in the autograd graph.

    Their outputs are unchanged (computed by their own forward, without
    gradients). A layer whose input needs no gradient (it reads the
    network's input) runs as it is: no channel group reaches it.
    """
    record = TracedLayers()
    patched = []
    for module in model.modules():
        if isinstance(module, RECURRENT_TYPES):
            module.forward = _recurrent_forward(module)
        elif isinstance(module, nn.Bilinear):
            module.forward = _bilinear_forward(module, record)
        else:
            continue
        patched.append(module)
    try:
        yield record
    finally:
        for module in patched:
            del module.forward


@functools.cache
def _second_input_link() -> tuple[type, Any]:
    """The class of a bilinear layer's second-input link node, and its pruner (counts ``in2_features``)."""
    ops = torch_pruning().ops

    class SecondInputLink(ops._ElementWiseOp):
        """torch-pruning's elementwise link node before a bilinear layer's second input."""

    class SecondInputLinkPruner(ops.ElementWisePruner):
        def get_out_channels(self, link: Any) -> int:
            return int(link.bilinear.in2_features)

        get_in_channels = get_out_channels

    return SecondInputLink, SecondInputLinkPruner()


def separate_bilinear_inputs(dg: Any, record: TracedLayers) -> None:
    """Give each bilinear layer's second input its own pruning function in the graph ``dg``.

    torch-pruning prunes every input of a layer with one ``prune_in_channels``,
    so a channel group reaching one input would also prune the other's
    producer. The edges to and from the second input's link node use
    :meth:`BilinearPruner.prune_in2_channels` instead, and the link node
    counts the second input's features, so that a flatten feeding it maps
    channels with the right stride (torch-pruning infers a reshape's width
    from the layer it feeds).
    """
    link_class, link_pruner = _second_input_link()
    dg.CUSTOMIZED_PRUNERS[link_class] = link_pruner
    nodes = {node.grad_fn: node for node in dg.module2node.values()}
    for module, links in record.second_inputs.items():
        layer = dg.module2node.get(module)
        if layer is None:
            continue
        pruner = dg.get_pruner_of_module(module)
        first, second = pruner.prune_in_channels, pruner.prune_in2_channels
        dg._in_channel_pruning_fn.add(second)
        for link in (nodes.get(fn) for fn in links):
            if link is None:
                continue
            link.module.__class__ = link_class
            object.__setattr__(link.module, "bilinear", module)  # a reference, not a child module
            for dep in link.dependencies:
                if dep.target is layer and dep.handler == first:
                    dep.handler = second
            for dep in layer.dependencies:
                if dep.target is link and dep.trigger == first:
                    dep.trigger = second


def pruned_width(module: Any, handler: Any) -> int | None:
    """The width a pruning function of this module shrinks, where torch-pruning's own count is not it.

    A bilinear layer's second input (torch-pruning counts a layer's input
    channels once); None for any other.
    """
    if isinstance(module, nn.Bilinear) and getattr(handler, "__name__", "") == "prune_in2_channels":
        return int(module.in2_features)
    return None


def keeps_whole(dg: Any, group: Any) -> bool:
    """Whether ``group`` would prune a recurrent layer's hidden size (kept whole by DepL)."""
    return any(isinstance(item.dep.target.module, RECURRENT_TYPES)
               and dg.is_out_channel_pruning_fn(item.dep.handler) for item in group.items)

