"""What torch-pruning 1.6.1 lacks or mis-traces: recurrent layers, ``nn.Bilinear``, bare weights in products.

torch-pruning traces a network through autograd and walks into the graph a
layer builds inside its forward. A bidirectional or multi-layer
``nn.LSTM`` (``nn.GRU``, ``nn.RNN``) concatenates its directions inside, so
the channels of the layer before it reach its input through that
concatenation's index mapping and the wrong input columns are sliced
(``tests/test_extra_pruners.py`` pins it); it has no pruner for ``nn.GRU``,
``nn.RNN`` or ``nn.Bilinear`` at all (the last is traced as an elementwise
operation that ties its two inputs and its output into one channel group),
and it takes ``torch.einsum("bchw,oc->bohw", x, w)``, ``F.linear(x, w)`` or
``x @ w`` on a bare parameter for elementwise operations too (the channels
before then reach the product's reader).

While DepL builds the dependency graph (:func:`traced_as_layers`), each such
layer (and each einsum whose bare weight is a linear map,
:func:`linear_einsum`, and each ``F.linear``, ``torch.matmul``, ``@`` or
``torch.mm`` applying a bare matrix to the last axis of a tensor) computes
its output without gradients and hands it
on joined to each input by one elementwise reduction, so the graph links the
layer straight to the tensors it reads; :func:`rewire` then gives those
links their pruning functions. The pruners slice the weights that read the
inputs: a recurrent layer's first-layer input weights (both directions), a
bilinear layer's weight along the first or the second input's dimension
(one pruning function per input, ``prune_in2_channels``), a mapped weight
along the index it sums over (and along the index it makes, with a bare
bias, when a group reaches the output). A bilinear layer's and a map's
outputs are pruned only by a group that reaches them (neither is a root).

A recurrent layer's hidden size is a group of its own, rooted at the layer
(``nn.RNNBase`` has one ``hidden_size`` for every layer and direction): its
output features ``j`` and ``H + j`` (bidirectional) are hidden unit ``j``,
which owns its gate rows and columns in every layer and direction
(:func:`hidden_axes`); the final state (``h_n``, ``c_n``) is joined to the
output while tracing, so its readers lose the same units. A projected
layer's (``proj_size > 0``) and one given an initial state (``hx``) keep
their hidden size whole (:func:`keeps_whole`). What the graph still gets
wrong, the Check (:func:`depl_fl.task.subnets.check_variants`) keeps whole.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from depl_fl.task.torch_pruning_guard import torch_pruning

#: Recurrent layers whose input features and hidden size DepL prunes.
RECURRENT_TYPES = (nn.RNNBase,)

#: Gates per hidden unit: the rows ``g * hidden_size + j`` of unit ``j`` in each weight and bias.
GATES = {"LSTM": 4, "GRU": 3}


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
    """Raised if a group would prune a hidden size DepL keeps whole (:func:`keeps_whole`)."""


def gates(layer: nn.RNNBase) -> int:
    """Rows per hidden unit in each of ``layer``'s weights and biases: 4 (LSTM), 3 (GRU), 1 (RNN)."""
    return GATES.get(layer.mode.split("_")[0], 1)


def directions(layer: nn.RNNBase) -> int:
    return 2 if layer.bidirectional else 1


def hidden_units(layer: nn.RNNBase, features: Sequence[int]) -> np.ndarray:
    """The hidden units behind output features ``features`` (``j`` and ``H + j`` are unit ``j``)."""
    return np.unique(np.asarray(features, dtype=np.int64) % int(layer.hidden_size))


@dataclass(frozen=True)
class HiddenAxis:
    """One dimension of one entry of a recurrent layer that a hidden unit owns coordinates along.

    ``step`` and ``count``: unit ``j`` owns coordinates ``j + k * step`` for
    ``k < count`` (a weight's gate rows: ``step`` the hidden size, ``count``
    the gates; a deeper layer's input columns: one per direction).
    """

    entry: str
    dim: int
    reads: bool
    step: int
    count: int

    def coordinates(self, units: np.ndarray) -> np.ndarray:
        """``(len(units), count)`` coordinates the units own along :attr:`dim`."""
        return units[:, None] + self.step * np.arange(self.count, dtype=np.int64)[None, :]


def hidden_axes(layer: nn.RNNBase) -> list[HiddenAxis]:
    """Every coordinate a hidden unit owns in ``layer`` (what the pruner's ``prune_out_channels`` slices).

    In every layer ``l`` and direction: the unit's gate rows of
    ``weight_ih_l{l}``, ``weight_hh_l{l}``, ``bias_ih_l{l}``, ``bias_hh_l{l}``;
    its column of ``weight_hh_l{l}`` (read); in layers ``l >= 1`` its input
    columns of ``weight_ih_l{l}`` (read; one per direction of the layer below).
    """
    hidden, rows = int(layer.hidden_size), gates(layer)
    found = []
    for lay in range(int(layer.num_layers)):
        for suffix in ("", "_reverse")[:directions(layer)]:
            for kind in ("ih", "hh"):
                found.append(HiddenAxis(f"weight_{kind}_l{lay}{suffix}", 0, False, hidden, rows))
                if layer.bias:
                    found.append(HiddenAxis(f"bias_{kind}_l{lay}{suffix}", 0, False, hidden, rows))
            found.append(HiddenAxis(f"weight_hh_l{lay}{suffix}", 1, True, hidden, 1))
            if lay >= 1:
                found.append(HiddenAxis(f"weight_ih_l{lay}{suffix}", 1, True, hidden, directions(layer)))
    return found


@functools.cache
def recurrent_pruner() -> Any:
    """A torch-pruning pruner of a recurrent layer's input features and hidden size (LSTM, GRU, RNN)."""

    class RecurrentPruner(_base_pruner()):
        TARGET_MODULES = RECURRENT_TYPES

        def prune_out_channels(self, layer: nn.RNNBase, idxs: Sequence[int]) -> nn.Module:
            """Drop the hidden units behind output features ``idxs``, in every layer and direction.

            ``idxs`` must name every direction's feature of each unit it drops
            (``j`` and ``H + j``): the output reader loses exactly those.
            """
            if getattr(layer, "proj_size", 0):
                raise HiddenSizeKept(f"{type(layer).__name__}: DepL keeps a projected recurrent layer's "
                                     "hidden size whole")
            units = hidden_units(layer, idxs)
            if len(units) * directions(layer) != len(set(int(i) for i in idxs)):
                raise HiddenSizeKept(f"{type(layer).__name__}: features {sorted(idxs)} drop a hidden unit "
                                     "in one direction only")
            hidden = int(layer.hidden_size)
            kept = np.setdiff1d(np.arange(hidden), units)
            for axis in hidden_axes(layer):
                _sliced(layer, axis.entry, axis.coordinates(kept).T.ravel().tolist(), axis.dim)
            layer.hidden_size = len(kept)
            return layer

        def prune_in_channels(self, layer: nn.RNNBase, idxs: Sequence[int]) -> nn.Module:
            keep = _keep(layer.input_size, idxs)
            # Only the first layer reads the input; deeper layers and the recurrences read hidden states.
            for suffix in ("", "_reverse")[:directions(layer)]:
                _sliced(layer, f"weight_ih_l0{suffix}", keep, 1)
            layer.input_size = len(keep)
            return layer

        def get_out_channels(self, layer: nn.RNNBase) -> int:
            width = layer.proj_size if getattr(layer, "proj_size", 0) else layer.hidden_size
            return width * directions(layer)

        def get_in_channels(self, layer: nn.RNNBase) -> int:
            return layer.input_size

    return RecurrentPruner()


@functools.cache
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
    """``x`` summed (an elementwise operation to torch-pruning: indices pass unchanged), else a zero."""
    if x is None or not x.requires_grad:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    return x.sum()


def _joined(out: torch.Tensor, first: torch.Tensor, second: torch.Tensor | None = None) -> torch.Tensor:
    """``out`` exactly, its autograd node reading the inputs that need gradients (``addcmul``, value 0)."""
    return torch.addcmul(out.detach(), _link(first, out), _link(second, out), value=0)


@dataclass
class TracedLayers:
    """What :func:`traced_as_layers` records: the autograd nodes that :func:`rewire` gives pruners."""

    second_inputs: dict[nn.Module, list[Any]] = field(default_factory=dict)
    #: Per bare parameter used as a linear map (``torch.einsum``, a matmul): its links' autograd nodes.
    linear_maps: dict[MappedWeight, list[Any]] = field(default_factory=dict)
    #: Recurrent layers given an initial state (``hx``): their hidden size is kept whole.
    fixed_hidden: set[nn.Module] = field(default_factory=set)


def _recurrent_forward(module: nn.RNNBase, record: TracedLayers) -> Any:
    original = type(module).forward

    def forward(input: Any, hx: Any = None) -> Any:  # noqa: A002 (torch's name)
        data = input.data if isinstance(input, nn.utils.rnn.PackedSequence) else input
        if hx is not None:  # a state from elsewhere is as wide as the hidden size the caller made it
            record.fixed_hidden.add(module)
        with torch.no_grad():
            out, state = original(module, input, hx)
        if not data.requires_grad:  # the network's input: a copy of it as a leaf anchors the layer's node
            data = data.detach().requires_grad_()
        packed = isinstance(out, nn.utils.rnn.PackedSequence)
        joined = _joined(out.data if packed else out, data)
        # The final state's hidden features are the output's (one direction's): its readers join the
        # hidden size's group.
        state = tuple(_joined(s, joined) for s in state) if isinstance(state, tuple) \
            else _joined(state, joined)
        return (out._replace(data=joined) if packed else joined), state

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


@dataclass(frozen=True, eq=False)
class MappedWeight:
    """A bare parameter used as a linear map: ``owner.attr``, state entry ``entry``.

    ``in_dim`` is contracted with one axis of the other operand, ``out_dim``
    becomes an axis of the output; ``bias`` (``(entry, owner, attr)``) is a
    bare vector added along ``out_dim`` (``F.linear``'s third argument).
    """

    entry: str
    owner: nn.Module
    attr: str
    in_dim: int
    out_dim: int
    bias: tuple[str, nn.Module, str] | None = None

    @property
    def weight(self) -> torch.Tensor:
        return getattr(self.owner, self.attr)

    @property
    def parameters(self) -> tuple[torch.Tensor, ...]:
        """The weight, and the bias if any."""
        bias = () if self.bias is None else (getattr(self.bias[1], self.bias[2]),)
        return (self.weight, *bias)


def linear_einsum(equation: str, weight: int) -> tuple[int, int] | None:
    """``(in_dim, out_dim)`` when operand ``weight`` of a two-operand ``equation`` is a linear map, else None.

    A linear map: a matrix whose one index is summed with one index of the
    other operand (and appears nowhere else) and whose other index is an
    output index the other operand lacks; every other index of the other
    operand is kept, none repeated (``"bchw,oc->bohw"``, ``"btc,co->bto"``).
    An implicit output or an ellipsis is none.
    """
    text = equation.replace(" ", "")
    if "->" not in text or "." in text:
        return None
    inputs, out = text.split("->")
    terms = inputs.split(",")
    if len(terms) != 2 or weight not in (0, 1):
        return None
    w, data = terms[weight], terms[1 - weight]
    if len(w) != 2 or any(len(set(t)) != len(t) for t in (w, data, out)):
        return None
    summed = [i for i, s in enumerate(w) if s in data and s not in out]
    made = [i for i, s in enumerate(w) if s in out and s not in data]
    if len(summed) != 1 or len(made) != 1 or set(out) != (set(data) - {w[summed[0]]}) | {w[made[0]]}:
        return None
    return summed[0], made[0]


#: Bare parameters by ``id``: (state entry, owning module, attribute name).
BareParameters = dict[int, tuple[str, nn.Module, str]]


def _bare_parameters(model: nn.Module) -> BareParameters:
    """Parameters of modules torch-pruning has no pruner for (the user's own), by id: entry, owner, name."""
    ops = torch_pruning().ops
    found = {}
    for prefix, module in model.named_modules():
        if ops.module2type(module) != ops.OPTYPE.ELEMENTWISE or isinstance(module, (*RECURRENT_TYPES,
                                                                                   nn.Bilinear)):
            continue
        for name, param in module.named_parameters(recurse=False):
            found.setdefault(id(param), (f"{prefix}.{name}" if prefix else name, module, name))
    return found


def _recorded(record: TracedLayers, bare: BareParameters, out: torch.Tensor,
              data: torch.Tensor, weight: nn.Parameter, dims: tuple[int, int],
              bias: nn.Parameter | None = None) -> torch.Tensor:
    """``out`` joined to ``data``, its link recorded as a use of ``weight`` (one key per state entry)."""
    joined = _joined(out, data)
    entry, owner, attr = bare[id(weight)]
    key = next((k for k in record.linear_maps if k.entry == entry), None) or MappedWeight(
        entry, owner, attr, *dims, bias=None if bias is None else bare[id(bias)])
    record.linear_maps.setdefault(key, []).append(joined.grad_fn)
    return joined


def _einsum(original: Any, bare: BareParameters, record: TracedLayers) -> Any:
    def einsum(equation: Any, *operands: Any) -> Any:
        tensors = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
            else operands
        weights = [i for i, t in enumerate(tensors) if isinstance(t, nn.Parameter) and id(t) in bare]
        dims = linear_einsum(equation, weights[0]) if isinstance(equation, str) and len(weights) == 1 \
            and len(tensors) == 2 else None
        if dims is None or not all(t.requires_grad for t in tensors):
            return original(equation, *operands)
        with torch.no_grad():
            out = original(equation, *operands)
        return _recorded(record, bare, out, tensors[1 - weights[0]], tensors[weights[0]], dims)

    return einsum


def _is_bare(t: Any, bare: BareParameters) -> bool:
    return isinstance(t, nn.Parameter) and id(t) in bare


def _maps_last_axis(data: Any, weight: Any, in_dim: int, bare: BareParameters) -> bool:
    """Whether ``weight`` (bare, a matrix) maps the last axis of ``data`` (a batch of vectors, not bare)."""
    return (_is_bare(weight, bare) and weight.dim() == 2 and isinstance(data, torch.Tensor)
            and not _is_bare(data, bare) and data.dim() >= 2 and data.shape[-1] == weight.shape[in_dim]
            and data.requires_grad and weight.requires_grad)


def _linear(original: Any, bare: BareParameters, record: TracedLayers) -> Any:
    """``F.linear(x, w, b)`` with a bare ``w`` ``[out, in]`` (and a bare ``b`` or none)."""

    def linear(input: Any, weight: Any, bias: Any = None) -> Any:  # noqa: A002 (torch's name)
        bare_bias = bias is None or (_is_bare(bias, bare) and bias is not weight
                                     and bias.shape == weight.shape[:1])
        if not bare_bias or not _maps_last_axis(input, weight, 1, bare):
            return original(input, weight, bias)
        with torch.no_grad():
            out = original(input, weight, bias)
        return _recorded(record, bare, out, input, weight, (1, 0), bias)

    return linear


def _matmul(original: Any, bare: BareParameters, record: TracedLayers) -> Any:
    """``torch.matmul(x, w)``, ``x @ w``, ``torch.mm(x, w)`` with a bare ``w`` ``[in, out]`` second."""

    def matmul(input: Any, other: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 (torch's name)
        if args or kwargs or not _maps_last_axis(input, other, 0, bare):
            return original(input, other, *args, **kwargs)
        with torch.no_grad():
            out = original(input, other)
        return _recorded(record, bare, out, input, other, (0, 1))

    return matmul


@contextlib.contextmanager
def traced_as_layers(model: nn.Module) -> Iterator[TracedLayers]:
    """Within: ``model``'s recurrent and bilinear layers read their inputs directly in the autograd graph.

    Their outputs are unchanged (computed by their own forward, without
    gradients). So do ``torch.einsum`` on a bare parameter of ``model`` used
    as a linear map (:func:`linear_einsum`), called as ``torch.einsum``, and
    a bare matrix applied to the last axis of a tensor as
    ``torch.nn.functional.linear`` (weight ``[out, in]``, bias bare or none),
    ``torch.matmul``, ``@`` or ``torch.mm`` (weight ``[in, out]``, second).
    Any other use runs as it is, and so does a bilinear layer or a product
    whose inputs need no gradient (the network's input): no channel group
    reaches it. A recurrent layer reading such an input is joined to a copy
    of it, so that its hidden size still roots a group (torch-pruning fails
    to walk a deep bidirectional layer's own graph).
    """
    with _FUNCTION_SWAP:  # one swap at a time: a second would restore the first's stand-ins
        yield from _traced_as_layers(model)


#: Held while torch's functions are swapped for stand-ins (graphs built in several threads).
_FUNCTION_SWAP = threading.RLock()

#: Where each swapped function lives, its name, and its stand-in's maker.
_SWAPPED = ((torch, "einsum", _einsum), (torch.nn.functional, "linear", _linear), (torch, "matmul", _matmul),
            (torch, "mm", _matmul), (torch.Tensor, "__matmul__", _matmul))


def _traced_as_layers(model: nn.Module) -> Iterator[TracedLayers]:
    record = TracedLayers()
    patched = []
    bare = _bare_parameters(model)
    # What each place held itself (``Tensor.__matmul__`` is inherited: deleting the stand-in restores it).
    own = [(place, name, vars(place).get(name)) for place, name, _ in _SWAPPED]
    for place, name, stand_in in _SWAPPED:
        setattr(place, name, stand_in(getattr(place, name), bare, record))
    for module in model.modules():
        if isinstance(module, RECURRENT_TYPES):
            module.forward = _recurrent_forward(module, record)
        elif isinstance(module, nn.Bilinear):
            module.forward = _bilinear_forward(module, record)
        else:
            continue
        patched.append(module)
    try:
        yield record
    finally:
        for place, name, held in own:
            if held is None:
                delattr(place, name)
            else:
                setattr(place, name, held)
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


@functools.cache
def _map_link() -> tuple[type, Any]:
    """The class of a linear map's link node, and the pruner slicing its bare weight (and bias)."""
    ops = torch_pruning().ops

    class LinearMapLink(ops._ElementWiseOp):
        """torch-pruning's node of a bare parameter used as a linear map (``torch.einsum``, a matmul)."""

    class MappedWeightPruner(_base_pruner()):
        TARGET_MODULES = LinearMapLink

        def prune_out_channels(self, link: Any, idxs: Sequence[int]) -> Any:
            weight = link.mapped
            kept = _keep(weight.weight.shape[weight.out_dim], idxs)
            _sliced(weight.owner, weight.attr, kept, weight.out_dim)
            if weight.bias is not None:
                _sliced(weight.bias[1], weight.bias[2], kept, 0)
            return link

        def prune_in_channels(self, link: Any, idxs: Sequence[int]) -> Any:
            weight = link.mapped
            kept = _keep(weight.weight.shape[weight.in_dim], idxs)
            _sliced(weight.owner, weight.attr, kept, weight.in_dim)
            return link

        def get_out_channels(self, link: Any) -> int:
            return int(link.mapped.weight.shape[link.mapped.out_dim])

        def get_in_channels(self, link: Any) -> int:
            return int(link.mapped.weight.shape[link.mapped.in_dim])

    return LinearMapLink, MappedWeightPruner()


def link_mapped_weights(dg: Any, record: TracedLayers) -> None:
    """Make each linear map's link node in ``dg`` a layer: its weight's ``in_dim`` reads, ``out_dim`` writes.

    The node torch-pruning made of the stand-in (an elementwise operation,
    which would tie the map's input channels to its outputs) gets the
    pruner of :func:`_map_link`. A weight used by more than one call (a
    shared map, or a second forward in training mode), or whose weight or
    bias the graph meets elsewhere too (any other use), is left as
    torch-pruning traces it: its input channels stay tied to its outputs,
    and the Check keeps that group whole or refuses it. A bias two maps
    share is sliced by each map's output group: the layout refuses two
    different groups on one coordinate, and the Check a map whose outputs
    stay whole while its bias loses entries.
    """
    link_class, pruner = _map_link()
    dg.CUSTOMIZED_PRUNERS[link_class] = pruner
    dg._in_channel_pruning_fn.add(pruner.prune_in_channels)
    dg._out_channel_pruning_fn.add(pruner.prune_out_channels)
    nodes = {node.grad_fn: node for node in dg.module2node.values()}
    for weight, grad_fns in record.linear_maps.items():
        if len(grad_fns) != 1 or grad_fns[0] not in nodes or any(
                any(p is other for other in dg.module2node) for p in weight.parameters):
            continue
        link = nodes[grad_fns[0]]
        link.module.__class__ = link_class
        object.__setattr__(link.module, "mapped", weight)  # a reference, not a child module
        for dep in link.dependencies:
            dep.trigger = pruner.prune_in_channels if dep.target in link.inputs else pruner.prune_out_channels
        for other in (*link.inputs, *link.outputs):
            for dep in other.dependencies:
                if dep.target is link:
                    dep.handler = (pruner.prune_in_channels if other in link.inputs
                                   else pruner.prune_out_channels)


def rewire(dg: Any, record: TracedLayers) -> None:
    """Give the nodes :func:`traced_as_layers` recorded their pruning functions in ``dg``.

    The recurrent layers whose hidden size stays whole are noted on ``dg``
    for :func:`keeps_whole`.
    """
    separate_bilinear_inputs(dg, record)
    link_mapped_weights(dg, record)
    dg.depl_fixed_hidden = frozenset(record.fixed_hidden)


def parameter_axes(module: Any, handler: Any) -> list[tuple[str, int]] | None:
    """``(state entry, dimension)`` pairs a pruning function of a linear map's link node slices, else None.

    The weight's ``in_dim`` for its input channels; its ``out_dim`` and the
    bias (if any) for its outputs.
    """
    if not isinstance(module, _map_link()[0]):
        return None
    weight = module.mapped
    if handler.__name__ == "prune_in_channels":
        return [(weight.entry, weight.in_dim)]
    return [(weight.entry, weight.out_dim), *(() if weight.bias is None else ((weight.bias[0], 0),))]


def pruned_width(module: Any, handler: Any) -> int | None:
    """The width a pruning function of this module shrinks, where torch-pruning's own count is not it.

    A bilinear layer's second input (torch-pruning counts a layer's input
    channels once), a linear map's weight dimension; None for any other.
    """
    if isinstance(module, nn.Bilinear) and getattr(handler, "__name__", "") == "prune_in2_channels":
        return int(module.in2_features)
    if (axes := parameter_axes(module, handler)) is not None:
        return int(module.mapped.weight.shape[axes[0][1]])
    return None


def keeps_whole(dg: Any, group: Any) -> bool:
    """Whether ``group`` would prune a recurrent layer's hidden size that DepL keeps whole.

    A projected layer's (``proj_size > 0``: its outputs are the projection's)
    and a layer's given an initial state ``hx`` (made elsewhere as wide as the
    hidden size).
    """
    fixed = getattr(dg, "depl_fixed_hidden", frozenset())
    return any(isinstance(module := item.dep.target.module, RECURRENT_TYPES)
               and dg.is_out_channel_pruning_fn(item.dep.handler)
               and (getattr(module, "proj_size", 0) or module in fixed) for item in group.items)


def ties_directions(dg: Any, group: Any) -> int:
    """The directions of the bidirectional recurrent layers whose hidden size ``group`` prunes (1 without).

    Their output features ``j`` and ``H + j`` are one hidden unit, dropped together.
    """
    return 2 if any(isinstance(module := item.dep.target.module, RECURRENT_TYPES) and module.bidirectional
                    and dg.is_out_channel_pruning_fn(item.dep.handler) for item in group.items) else 1


def hidden_axes_of(dg: Any, item: Any) -> list[HiddenAxis] | None:
    """The coordinates a group item's hidden units own (:func:`hidden_axes`) when it prunes a hidden size."""
    module = item.dep.target.module
    if isinstance(module, RECURRENT_TYPES) and dg.is_out_channel_pruning_fn(item.dep.handler):
        return hidden_axes(module)
    return None
