"""Sub-networks of any ``nn.Module``, derived with torch-pruning's dependency graph.

From a network and an example input, :func:`derive_layout` finds the coupled
channel groups (``torch_pruning.DependencyGraph.get_all_groups``: channels
tied through residual adds, BatchNorm, depthwise and grouped convolutions,
flatten and concatenation; the output layer stays whole) and, for every
state entry, which coordinates belong to which channel
(:class:`depl_fl.task.slicing.SubnetLayout`). The owner of a coordinate is
read from the group's ``root_idxs``; which entries and dimensions a pruning
function removes is observed, not assumed: each group member is pruned once
on a copy whose entries hold their own flat positions, and the survivors
show the dimension (a pruning function that does not remove whole slices is
refused, naming the layer).

:func:`build_skeleton` makes the sub-network itself (really fewer channels):
the network pruned by torch-pruning to the variant's channel counts. Its
shapes depend on the counts only, so a client rebuilds it from the factory
and the compression and loads the entries it receives.
:func:`check_variants` proves, once per job, that the skeleton loaded with the
extracted entries computes exactly what the full network computes with the
dropped channels silenced. A group whose loss of channels breaks the forward
(Flower's quickstart ``Net`` hard-codes ``x.view(-1, 16 * 5 * 5)``) or changes
its function (a channel shuffle) is kept whole and the others are compressed
(:func:`kept_whole`); a network left with no group to compress is refused in
one line naming the layer whose channels it cannot lose.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from depl_fl.errors import ScenarioError
from depl_fl.task import extra_pruners
from depl_fl.task.attention_layers import attention_modules
from depl_fl.task.block_views import block_view_hint
from depl_fl.task.compiled_modules import eager, refuse_compiled
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.network_outputs import logits_of, output_tensors, raw_outputs, use_logits
from depl_fl.task.slicing import Axis, ChannelGroup, SubnetLayout, extract, kept_width, silence
from depl_fl.task.torch_pruning_guard import index_limit, prunable_groups, torch_pruning
from depl_fl.task.traced_buffers import buffers_as_parameters, buffers_traced, traced_buffers

LOG = logging.getLogger("depl_fl.subnets")

#: Layer types whose output channels root a pruning group (and a recurrent layer's hidden size:
#: :data:`depl_fl.task.extra_pruners.RECURRENT_TYPES`, see :func:`_groups`).
ROOT_TYPES = (nn.modules.conv._ConvNd, nn.Linear)


def _tp() -> Any:
    return torch_pruning()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch single-threaded inside the block (tracing small batches gains nothing from threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def example_input(in_channels: int, image_size: int, batch: int = 1) -> torch.Tensor:
    """A deterministic example batch ``(batch, C, S, S)`` for tracing and checks."""
    return example_batch((in_channels, image_size, image_size), batch)


def example_batch(sample_shape: tuple[int, ...], batch: int = 1) -> torch.Tensor:
    """A deterministic example batch of ``batch`` samples of ``sample_shape``."""
    gen = torch.Generator().manual_seed(0)
    return torch.randn(batch, *sample_shape, generator=gen)


def output_layers(model: nn.Module, x: torch.Tensor,
                  training: TrainingOutputs | None = None) -> list[nn.Module]:
    """The layers whose widths the network's outputs show: the logits' layer first, then auxiliary ones.

    Empty when no convolution or linear layer runs (weights used through
    ``torch.nn.functional`` on bare parameters only).

    The logits come from the last convolution or linear layer run (or the one
    producing them). A forward returning more (``(logits, aux_logits)``, a
    dict, an output object) also has each other returned tensor a layer
    produces exactly kept at its width, in evaluation mode and in the training
    mode that auxiliary heads run in (``training``, :func:`training_outputs`
    when not given).
    """
    ran: list[tuple[nn.Module, torch.Tensor]] = []

    def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
        ran.append((module, output))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, ROOT_TYPES)]
    try:
        with torch.no_grad(), raw_outputs():
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    if not ran:  # no layer to root a group at: the network trains whole (check_variants says so)
        return []
    logits = logits_of(out)
    layers = [next((m for m, produced in reversed(ran) if produced is logits), ran[-1][0])]
    returned = output_tensors(out)
    layers += [m for m, produced in ran if any(produced is t for t in returned)]
    layers += [model.get_submodule(name) for name in (training or training_outputs(model, x)).layers]
    return list(dict.fromkeys(layers))


@dataclass(frozen=True)
class TrainingOutputs:
    """What a training-mode forward returns: how many tensors, and the layers producing one exactly."""

    count: int
    layers: tuple[str, ...]


def training_outputs(model: nn.Module, x: torch.Tensor) -> TrainingOutputs:
    """One training-mode forward of ``model`` on two copies of ``x`` (BatchNorm needs two), state restored.

    A forward that fails in training mode counts nothing here: the checks
    report it in one line.
    """
    names = {module: name for name, module in model.named_modules()}
    produced: list[tuple[str, torch.Tensor]] = []
    handles = [m.register_forward_hook(lambda m, _i, o: produced.append((names[m], o)))
               for m in model.modules() if isinstance(m, ROOT_TYPES)]
    try:
        with _training_mode(model), torch.no_grad(), raw_outputs():
            returned = output_tensors(model(torch.cat([x, x])))
    except Exception:  # user code: the checks report a failing training forward in one line
        return TrainingOutputs(0, ())
    finally:
        for h in handles:
            h.remove()
    return TrainingOutputs(len(returned), tuple(name for name, out in produced
                                                if any(out is t for t in returned)))


def _check_forward(model: nn.Module, x: torch.Tensor, name: str, num_classes: int | None = None) -> None:
    """One line unless the full network maps the example batch to one tensor with a row per sample.

    A forward that fails on the dataset's input (too small an image for its
    poolings, a wrong channel count) is the user's network, not a tracing
    problem, and is reported as such. Checked in the model's current mode.
    With ``num_classes`` (a job's task geometry) the rows must be logits of
    that many classes, what the loss (cross-entropy or ``model.loss``) reads.
    """
    mode = "training" if model.training else "evaluation"
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:  # user code: report it in one line
        raise ScenarioError(f"model {name}: its forward fails on an input of shape {tuple(x.shape[1:])} "
                            f"in {mode} mode ({_first_line(exc)})") from None
    if not isinstance(out, torch.Tensor) or out.dim() < 1 or out.shape[0] != x.shape[0]:
        got = type(out).__name__ if not isinstance(out, torch.Tensor) else f"shape {tuple(out.shape)}"
        raise ScenarioError(f"model {name}: forward must return logits with a row per sample "
                            f"(batch {x.shape[0]}) in {mode} mode, got {got}; DepL reads a tensor, the first "
                            "item of a tuple or list, a dict's 'logits' or an object's .logits")
    if num_classes is not None and tuple(out.shape) != (x.shape[0], num_classes):
        raise ScenarioError(f"model {name}: forward must return logits of shape (batch, {num_classes}) "
                            f"for the dataset's {num_classes} classes, got {tuple(out.shape)} for a batch "
                            f"of {x.shape[0]} in {mode} mode (give the output layer num_classes outputs)")


def _every_output(model: nn.Module, x: torch.Tensor, training: TrainingOutputs) -> list[torch.Tensor]:
    """The tensors ``model`` returns in its mode, and those only training mode adds (an auxiliary head).

    GoogLeNet-style auxiliary logits exist in training mode only; a layer that
    feeds them must lose its channels with the layers it reads, so tracing
    sees that forward too (``training``: what it returns). It runs on two
    copies of the samples (BatchNorm in training mode needs two); the state
    it moves (running statistics) is restored.
    """
    outputs = output_tensors(model(x))
    if not model.training and training.count > len(outputs):
        with _training_mode(model):
            outputs += output_tensors(model(torch.cat([x, x])))
    return outputs


@contextlib.contextmanager
def _training_mode(model: nn.Module) -> Iterator[None]:
    """Within: ``model`` in training mode; after: its mode and buffers (running statistics) as before.

    On the model itself, not a copy: a hook-based weight or spectral norm
    holds a computed weight that cannot be deep-copied. Saved: the buffers,
    and the parameters of the user's own modules (a data-dependent
    initialisation such as ActNorm's sets them in its first training
    forward); torch's layers never change their parameters in a forward, and
    copying a large network's weights would double the cost of the probe.
    """
    saved = {name: t.detach().clone() for name, t in _forward_mutable(model)}
    was_training = model.training
    try:
        yield model.train()
    finally:
        model.train(was_training)
        with torch.no_grad():
            for name, t in _forward_mutable(model):
                if name in saved and t.shape == saved[name].shape:
                    t.copy_(saved[name])


def _forward_mutable(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The entries a forward may change: every buffer, and the parameters of modules not from torch."""
    yield from model.named_buffers()
    for prefix, module in model.named_modules():
        if not type(module).__module__.startswith("torch."):
            for name, param in module.named_parameters(recurse=False):
                yield (f"{prefix}.{name}" if prefix else name), param


def _dependency_graph(model: nn.Module, x: torch.Tensor, training: TrainingOutputs) -> Any:
    def forward(net: nn.Module, inputs: torch.Tensor) -> list[torch.Tensor]:
        return _every_output(net, inputs, training)

    try:
        # Every tensor returned (an auxiliary output's layers included); recurrent and bilinear
        # layers and einsum weights read their inputs directly (depl_fl.task.extra_pruners).
        with raw_outputs(), extra_pruners.traced_as_layers(model) as layers:
            dg = _tp().DependencyGraph().build_dependency(model, example_inputs=x, verbose=False,
                                                          forward_fn=forward,
                                                          customized_pruners=extra_pruners.customized_pruners(model))
        extra_pruners.rewire(dg, layers)
        return dg
    except Exception as exc:  # a network torch-pruning cannot trace
        raise ScenarioError(f"model {type(model).__name__}: torch-pruning cannot trace it "
                            f"({_first_line(exc)})") from None


def _groups(model: nn.Module, x: torch.Tensor, keep: Collection[str] = (),
            untracked: list[tuple[str, str]] | None = None) -> tuple[Any, list[Any]]:
    """The dependency graph and its prunable groups (output layer ignored, width >= 2, no attention).

    Channels an attention reads or writes are kept whole
    (:func:`depl_fl.task.attention_layers.attention_modules`), and so are a
    frozen layer's (:func:`_frozen`), a reparametrized layer's
    (:func:`reparametrized_layers`), those of the groups rooted at a layer
    named in ``keep`` (:func:`kept_whole`) and those torch-pruning traces to
    a size they do not fit (:func:`_untracked_by`; appended to ``untracked``
    as ``(root, reason)`` when given).
    """
    reparametrized = {model.get_submodule(name) for name in reparametrized_layers(model)}
    training = training_outputs(model, x)
    try:
        dg = _dependency_graph(model, x, training)
    except ScenarioError:
        if reparametrized:  # check_variants names the reparametrized layer
            return None, []
        raise
    outputs = output_layers(model, x, training)
    limit = index_limit(model, x[0].numel())
    roots = (*ROOT_TYPES, *extra_pruners.RECURRENT_TYPES)  # a recurrent layer's hidden size too
    names = {module: name for name, module in model.named_modules()}
    order = {name: i for i, name in enumerate(names.values())}
    groups = []
    for group in prunable_groups(dg, list(outputs), roots, limit):
        if len(group[0].idxs) < 2:
            if untracked is not None and (tied := _tied_to_narrower(dg, group, names)) is not None:
                untracked.append(tied)
            continue
        if (why := _untracked_by(dg, group, names)) is None:
            groups.append(group)
        elif untracked is not None:
            untracked.append((_root_name(dg, group, names, order), why))
    attention = attention_modules(groups, ROOT_TYPES)

    def whole(group: Any) -> bool:
        return (any(item.dep.target.module in attention or item.dep.target.module in reparametrized
                    or _frozen(item.dep.target.module) for item in group.items)
                or _root_name(dg, group, names, order) in keep)

    return dg, [g for g in groups if not whole(g)]


def _frozen(module: Any) -> bool:
    """Whether a group member holds a parameter the user froze (``requires_grad=False``).

    A frozen layer's channels are kept whole, in and out: dropping its input
    channels would silence (zero) its weights that read them, which no
    training round can restore, and a frozen layer is meant to stay as given.
    """
    if isinstance(module, nn.Parameter):
        return not module.requires_grad
    if not isinstance(module, nn.Module):
        return False
    return any(not p.requires_grad for p in module.parameters(recurse=False))


def reparametrized_layers(model: nn.Module) -> list[str]:
    """Layers whose weight is computed from other entries: a weight or spectral norm, any parametrization.

    ``torch.nn.utils.parametrizations.weight_norm``/``spectral_norm`` (and any
    ``torch.nn.utils.parametrize`` parametrization) keep the weight as
    ``parametrizations.weight.original*`` entries, the older
    ``torch.nn.utils.weight_norm``/``spectral_norm`` as ``weight_g``/``weight_v``
    or ``weight_orig`` with a hook, ``torch.nn.utils.prune`` as ``weight_orig``
    and a ``weight_mask`` buffer with a hook. torch-pruning 1.6.1 does not prune these
    entries, so the channels such a layer reads and writes are kept whole
    (:func:`_groups`), as a frozen layer's; the other groups are compressed
    when torch-pruning can trace the network. When every group meets one
    (or the network cannot be traced), compressed variants are refused,
    naming the layer, and ``model.compressions=[0]`` trains it.
    """
    from torch.nn.utils import parametrize

    found = []
    for name, module in model.named_modules():
        hooks = module._forward_pre_hooks.values()
        if parametrize.is_parametrized(module) or any(isinstance(h, _weight_hooks()) for h in hooks):
            found.append(name)
    return found


def _weight_hooks() -> tuple[type, ...]:
    """Forward pre-hooks that compute a layer's weight from other entries.

    The legacy ``torch.nn.utils.weight_norm``/``spectral_norm`` and ``torch.nn.utils.prune``'s mask.
    """
    from torch.nn.utils.prune import BasePruningMethod
    from torch.nn.utils.spectral_norm import SpectralNorm
    from torch.nn.utils.weight_norm import WeightNorm

    return WeightNorm, SpectralNorm, BasePruningMethod


def _reparametrization_remedy(model: nn.Module, layer: str) -> str:
    """How the user removes the reparametrization of ``layer`` (a prune mask or a parametrization)."""
    from torch.nn.utils.prune import BasePruningMethod

    hooks = model.get_submodule(layer)._forward_pre_hooks.values()
    if any(isinstance(h, BasePruningMethod) for h in hooks):
        return (f"layer {layer!r} has a torch.nn.utils.prune mask (weight_orig, weight_mask), which "
                "torch-pruning cannot slice, so the channels it reads and writes are kept whole; make it "
                "permanent with torch.nn.utils.prune.remove(module, 'weight') to compress")
    return (f"layer {layer!r} has a reparametrized weight, a weight or spectral norm, which "
            "torch-pruning cannot slice, so the channels it reads and writes are kept whole; remove it "
            "with torch.nn.utils.parametrize.remove_parametrizations to compress")


def _refresh_hooked_weights(model: nn.Module, x: torch.Tensor) -> None:
    """Recompute, without gradients, the weights a legacy weight or spectral norm hook set while tracing.

    ``torch.nn.utils.weight_norm``/``spectral_norm`` store the weight they
    compute as a plain attribute; one computed while tracing belongs to an
    autograd graph, and a module holding it cannot be deep-copied. An
    evaluation-mode forward (no power iteration) replaces it by a leaf.
    """
    if any(isinstance(h, _weight_hooks()) for m in model.modules() for h in m._forward_pre_hooks.values()):
        was_training = model.training
        try:
            with torch.no_grad():
                model.eval()(x)
        finally:
            model.train(was_training)


def _copied(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """A deep copy of ``model``, whose legacy-hook weights were perhaps computed by a training step."""
    _refresh_hooked_weights(model, x)
    return copy.deepcopy(model)


def _is_parameter(item: Any) -> bool:
    """Whether a group item is a parameter outside any layer torch-pruning knows (a layer scale)."""
    return isinstance(item.dep.target.module, nn.Parameter)


def _pruned_size(dg: Any, item: Any) -> int | None:
    """The size of the dimension ``item``'s pruning function shrinks (None for an operation)."""
    target = item.dep.target
    if _is_parameter(item):
        return int(target.module.shape[target.pruning_dim])
    if (width := extra_pruners.pruned_width(target.module, item.dep.handler)) is not None:
        return width
    if not isinstance(target.module, nn.Module) or not _own_entries(target.module):
        return None
    size = (dg.get_out_channels(target) if dg.is_out_channel_pruning_fn(item.dep.handler)
            else dg.get_in_channels(target))
    return None if size is None else int(size)


def _untracked_by(dg: Any, group: Any, names: dict[nn.Module, str]) -> str | None:
    """Why a member's indices do not fit the dimension it prunes, in words; None when every member's fit.

    torch-pruning follows channels through views and permutations as if they
    stayed on one axis; a transpose that moves another axis under a layer (an
    MLP-Mixer's token-mixing linear reads the patches, not the channels)
    couples sizes that do not match. Such a group is kept whole; one whose
    sizes happen to match is caught by the Check step (:func:`check_variants`).
    So is a group split along its channels (``torch.chunk``, ``torch.split``:
    a GLU gate, ShuffleNetV2's halves), whose pieces torch-pruning 1.6.1 does
    not prune consistently, one through a depthwise convolution with a
    channel multiplier (:func:`_multiplier_conv`), and one that would prune a
    recurrent layer's hidden size DepL keeps whole (projected, or given an
    initial state: :func:`depl_fl.task.extra_pruners.keeps_whole`). ``names``
    names the layers in the reason.
    """
    if extra_pruners.keeps_whole(dg, group):
        return "they are a recurrent layer's hidden size, projected or given an initial state"
    for item in group.items:
        module = item.dep.target.module
        name = repr(names[module]) if module in names else type(module).__name__
        if item.dep.target.type == _tp().ops.OPTYPE.SPLIT:
            return "they are split (torch.chunk, torch.split), which torch-pruning 1.6.1 mis-slices"
        if _multiplier_conv(module):
            return f"layer {name} is a depthwise convolution with a channel multiplier"
        size = _pruned_size(dg, item)
        if size is not None and len(item.idxs) and max(item.idxs) >= size:
            return (f"layer {name} ({type(module).__name__}) has {size} where they are {len(item.idxs)}: "
                    "they reach it split (a GLU), mixed along another axis (a Conv1d over the channels) or "
                    "moved by a transpose")
    return None


def _tied_to_narrower(dg: Any, group: Any, names: dict[nn.Module, str]) -> tuple[str, str] | None:
    """``(layer, reason)`` when a one-channel ``group`` holds a wider layer's output channels, else None.

    torch-pruning ties a one-channel tensor broadcast over the channels (a
    spatial gate, CBAM's) or a tensor mixed along the channels by a
    one-channel layer (ECA's Conv1d over the pooled channels) to the wider
    layer's channels, so that layer roots no group of its own.
    """
    for item in group.items:
        module, size = item.dep.target.module, _pruned_size(dg, item)
        if (isinstance(module, ROOT_TYPES) and module in names and size is not None
                and size > len(item.idxs) and dg.is_out_channel_pruning_fn(item.dep.handler)):
            narrow = group[0].dep.target.module
            return names[module], (f"torch-pruning ties its {size} channels to the {len(item.idxs)} of layer "
                                   f"{names.get(narrow, type(narrow).__name__)!r} ({type(narrow).__name__}): "
                                   "its one channel broadcast over them (a spatial gate), or they reach it "
                                   "mixed along another axis or moved by a transpose")
    return None


def _tracked(dg: Any, group: Any) -> bool:
    """Whether every member's indices fit the dimension it prunes (:func:`_untracked_by`)."""
    return _untracked_by(dg, group, {}) is None


def _group_multiple(group: Any) -> int:
    """The number of groups of every GroupNorm the group's channels pass through, as one multiple.

    A GroupNorm of ``G`` groups needs a channel count divisible by ``G``, so a
    variant keeps a multiple of their least common multiple (1 without one).
    """
    multiple = 1
    for item in group.items:
        module = item.dep.target.module
        if isinstance(module, nn.GroupNorm):
            multiple = math.lcm(multiple, int(module.num_groups))
    return multiple


def _conv_blocks(module: Any) -> int:
    """The groups of a grouped (not depthwise) convolution; 1 for any other layer."""
    groups = int(getattr(module, "groups", 1)) if isinstance(module, nn.modules.conv._ConvNd) else 1
    return groups if 1 < groups < int(module.in_channels) else 1


def _multiplier_conv(module: Any) -> bool:
    """A depthwise convolution with a channel multiplier (or its converse), which torch-pruning mis-prunes.

    ``groups`` equal to the inputs with ``m x groups`` outputs (MobileNetV1's or
    Xception's depth multiplier), or equal to the outputs with more inputs:
    torch-pruning 1.6.1 takes the second for a depthwise convolution and
    prunes neither as its groups require, so their channels are kept whole.
    """
    if not isinstance(module, nn.modules.conv._ConvNd) or int(module.groups) <= 1:
        return False
    groups, cin, cout = int(module.groups), int(module.in_channels), int(module.out_channels)
    return cin != cout and groups in (cin, cout)


def _group_blocks(group: Any, dg: Any) -> int:
    """Channels tied into one: the least common multiple of the grouped convolutions' groups.

    A grouped convolution reads (or writes) each of its G channel blocks with
    its own slice of one weight, so a variant must drop the same positions in
    every block (:class:`depl_fl.task.slicing.ChannelGroup`); so does a
    bidirectional recurrent layer's hidden size (two blocks: one unit's
    features ``j`` and ``H + j``, :func:`depl_fl.task.extra_pruners.ties_directions`,
    given the graph ``dg``).
    """
    blocks = extra_pruners.ties_directions(dg, group)
    for item in group.items:
        blocks = math.lcm(blocks, _conv_blocks(item.dep.target.module))
    return blocks


def _tied_shape(group: Any, dg: Any) -> tuple[int, int, int]:
    """``(tied width, tied multiple, blocks)`` of a torch-pruning group of the graph ``dg``.

    A GroupNorm of G groups needs ``kept x blocks`` divisible by G.
    """
    blocks = _group_blocks(group, dg)
    multiple = _group_multiple(group)
    return len(group[0].idxs) // blocks, multiple // math.gcd(multiple, blocks), blocks


def _kept_channels(group: Any, dg: Any, compression: float) -> int:
    """Channels of the torch-pruning ``group`` a variant keeps (see :func:`_tied_shape`)."""
    width, multiple, blocks = _tied_shape(group, dg)
    return kept_width(width, compression, multiple) * blocks


def _dropped(group: Any, dg: Any, kept: int, current: int) -> list[int]:
    """Positions ``group`` drops to go from ``current`` to ``kept`` channels: the last ones.

    The last ones of every block where a bidirectional recurrent layer ties
    the blocks (its pruner drops a unit's features in both directions); a
    grouped convolution's blocks are left to torch-pruning, which takes the
    last positions overall as it always has.
    """
    blocks = _group_blocks(group, dg) if extra_pruners.ties_directions(dg, group) > 1 else 1
    now, per = current // blocks, kept // blocks
    return [b * now + c for b in range(blocks) for c in range(per, now)]


def _own_entries(module: nn.Module) -> dict[str, torch.Tensor]:
    entries = dict(module.named_parameters(recurse=False))
    entries.update(dict(module.named_buffers(recurse=False)))
    return entries


def _probe(module: nn.Module, handler: Any, idxs: list[int], name: str) -> list[tuple[str, int]]:
    """Entries and dimensions ``handler`` removes from ``module``, with coordinate == index.

    Raises
    ------
    ScenarioError
        When the pruning function removes anything but whole slices ``idxs``
        along one dimension per entry.
    """
    probe = copy.deepcopy(module)
    before = {}
    with torch.no_grad():
        for key, tensor in _own_entries(probe).items():
            if tensor.is_floating_point():
                before[key] = tuple(tensor.shape)
                tensor.data = torch.arange(tensor.numel(), dtype=torch.float64).reshape(tensor.shape)
    drop = sorted(set(idxs))[::2]
    handler(probe, drop)
    found = []
    after = _own_entries(probe)
    for key, shape in before.items():
        new = after[key]
        changed = [d for d, (a, b) in enumerate(zip(shape, new.shape, strict=True)) if a != b]
        if not changed:
            continue
        ids = new.detach().numpy().astype(np.int64).ravel()
        strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
        d = changed[0]
        coords = np.unique((ids // strides[d]) % shape[d])
        expected = np.setdiff1d(np.arange(shape[d]), drop)
        regular = (len(changed) == 1 and np.array_equal(coords, expected)
                   and ids.size * shape[d] == int(np.prod(shape)) * len(expected))
        if not regular:
            raise ScenarioError(f"layer {name!r} ({type(module).__name__}): torch-pruning's "
                                f"{getattr(handler, '__name__', handler)} does not remove whole slices "
                                f"of {key}; this layer cannot be sliced into sub-networks")
        found.append((key, d))
    return found + [(key, 0) for key in _channel_followers(module) if (key, 0) not in found
                    and any(before[k] == before[key] and d == 0 for k, d in found)]


def _channel_followers(module: nn.Module) -> list[str]:
    """Per-channel buffers of a layer beside per-channel parameters of the same length.

    They follow the channels even where the layer's pruning function leaves
    them whole (torch-pruning 1.6.1's InstanceNorm pruner and its running
    statistics); see :func:`_follow_channels`.
    """
    lengths = {tuple(p.shape) for p in module.parameters(recurse=False) if p.dim() == 1}
    return [key for key, buf in module.named_buffers(recurse=False)
            if buf.is_floating_point() and buf.dim() == 1 and tuple(buf.shape) in lengths]


def _follow_channels(model: nn.Module, followers: dict[str, list[str]]) -> None:
    """Cut each layer's ``followers`` (:func:`_channel_followers`) to the layer's channels, in place."""
    for name, keys in followers.items():
        module = model.get_submodule(name) if name else model
        width = min(int(p.shape[0]) for p in module.parameters(recurse=False) if p.dim() == 1)
        for key in keys:
            module._buffers[key] = module._buffers[key][:width].clone()


def _probe_key(module: nn.Module, handler: Any) -> tuple[Any, ...]:
    """What a probe's outcome depends on: layer type, pruning function, grouping and entry ranks.

    Probing one layer per key keeps the derivation fast on deep networks.
    """
    groups = getattr(module, "groups", 1)
    grouping = "depthwise" if groups > 1 and groups == getattr(module, "out_channels", None) else groups
    # A dimension of size 1 is one a pruning function may leave alone (PReLU's single shared parameter).
    entries = tuple((k, tuple(int(s) == 1 for s in v.shape)) for k, v in _own_entries(module).items())
    return (type(module), getattr(handler, "__name__", str(handler)), grouping, entries)


def _root_name(dg: Any, group: Any, names: dict[nn.Module, str], order: dict[str, int]) -> str:
    """The group's first layer (in module order) whose output channels it prunes."""
    producers = [names[item.dep.target.module] for item in group.items
                 if item.dep.target.module in names and dg.is_out_channel_pruning_fn(item.dep.handler)]
    return min(producers, key=order.__getitem__) if producers else names[group[0].dep.target.module]


def derive_layout(model: nn.Module, x: torch.Tensor, keep: Collection[str] = ()) -> SubnetLayout:
    """The channel groups and per-coordinate owners of every entry of ``model``'s state.

    Parameters
    ----------
    model : torch.nn.Module
        The full network (left unchanged).
    x : torch.Tensor
        An example input batch.
    keep : collection of str
        Root layers of groups kept whole (:func:`kept_whole`): their entries
        travel whole in every variant.

    Returns
    -------
    SubnetLayout
        Groups in torch-pruning's order (deterministic for a given network).

    Raises
    ------
    ScenarioError
        The network cannot be traced or a layer cannot be sliced (one line).
    """
    state = model.state_dict()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    dtypes = {k: str(v.detach().cpu().numpy().dtype) for k, v in state.items()}
    was_training = model.training
    model.eval()
    try:
        with buffers_as_parameters(model, x):
            dg, groups = _groups(model, x, keep)
        _refresh_hooked_weights(model, x)
    finally:
        model.train(was_training)
    names = {module: name for name, module in model.named_modules()}
    order = {name: i for i, name in enumerate(names.values())}
    # Groups in network order, each named by its first producing layer (readable, deterministic).
    groups = sorted(groups, key=lambda g: order[_root_name(dg, g, names, order)])
    found = _Owners({}, {}, shapes)
    out_groups, offset = [], 0
    probed: dict[tuple[Any, ...], list[tuple[str, int]]] = {}
    for group in groups:
        root = _root_name(dg, group, names, order)
        width, multiple, blocks = _tied_shape(group, dg)
        for item in group.items:
            ids = offset + np.asarray(item.root_idxs, dtype=np.int64) % width
            _place(dg, item, ids, names, probed, found)
        out_groups.append(ChannelGroup(root, width, offset, multiple, blocks))
        offset += width
    axes = tuple(Axis(entry, dim, owner, found.reads[(entry, dim)])
                 for (entry, dim), owner in sorted(found.owners.items()))
    _refuse_sliced_ties(model, {ax.entry for ax in axes})
    kept = tuple(sorted(keep, key=lambda name: (order.get(name, len(order)), name)))
    return SubnetLayout(shapes, dtypes, tuple(out_groups), axes, kept)


@dataclass
class _Owners:
    """What :func:`derive_layout` gathers: per (entry, dimension) the owner of every coordinate, and
    whether the entry reads the channels there; the entries' shapes."""

    owners: dict[tuple[str, int], np.ndarray]
    reads: dict[tuple[str, int], bool]
    shapes: dict[str, tuple[int, ...]]

    def own(self, entry: str, dim: int, where: np.ndarray, ids: np.ndarray, is_reader: bool,
            named: tuple[str, str]) -> None:
        """Record channels ``ids`` as the owners of coordinates ``where`` of ``entry``'s dimension ``dim``.

        ``named``: the layer and its entry as a refusal names them.

        Raises
        ------
        ScenarioError
            When a coordinate already belongs to another channel.
        """
        owner = self.owners.setdefault((entry, dim), np.full(self.shapes[entry][dim], -1, dtype=np.int64))
        clash = (owner[where] >= 0) & (owner[where] != ids)
        if np.any(clash):
            raise ScenarioError(f"layer {named[0]!r}: {named[1]} dimension {dim} is shared by two "
                                "channel groups in a way DepL cannot slice")
        owner[where] = ids
        self.reads[(entry, dim)] = self.reads.get((entry, dim), False) or is_reader


def _place(dg: Any, item: Any, ids: np.ndarray, names: dict[nn.Module, str],
           probed: dict[tuple[Any, ...], list[tuple[str, int]]], found: _Owners) -> None:
    """Record the coordinates the group member ``item`` slices as owned by its channels ``ids``.

    Which entries and dimensions: a recurrent layer's hidden units own their
    gate rows and columns (:func:`depl_fl.task.extra_pruners.hidden_axes`), a
    bare weight its map's axes, any other layer what probing its pruning
    function shows (:func:`_probe`, once per :func:`_probe_key`).
    """
    module, axes = item.dep.target.module, None
    if (hidden := extra_pruners.hidden_axes_of(dg, item)) is not None:
        units = np.asarray(item.idxs, dtype=np.int64) % int(module.hidden_size)
        for axis in hidden:
            where = axis.coordinates(units)
            found.own(f"{names[module]}.{axis.entry}", axis.dim, where.ravel(),
                      np.repeat(ids, where.shape[1]), axis.reads, (names[module], axis.entry))
        return
    if _is_parameter(item):  # a layer scale or a per-channel buffer: sliced along its pruning dim
        name, is_reader = dg._param_to_name[module], False
        entries = [("", item.dep.target.pruning_dim)]
    elif (axes := extra_pruners.parameter_axes(module, item.dep.handler)) is not None:
        # a bare weight (and bias) used as a linear map: entries named in full
        name, is_reader = axes[0][0], bool(dg.is_in_channel_pruning_fn(item.dep.handler))
        entries = axes
    elif not isinstance(module, nn.Module) or module not in names or not _own_entries(module):
        return  # an operation (add, concat, flatten) or a parameter-free layer
    else:
        name, handler = names[module], item.dep.handler
        key = _probe_key(module, handler)
        if key not in probed:
            probed[key] = _probe(module, handler, list(item.idxs), name)
        entries, is_reader = probed[key], bool(dg.is_in_channel_pruning_fn(handler))
    for entry, dim in entries:
        full = entry if axes is not None else ".".join(part for part in (name, entry) if part)
        where = np.asarray(item.idxs, dtype=np.int64)
        if is_reader and _conv_blocks(module) > 1:
            where = where % found.shapes[full][dim]  # a grouped convolution reads every block with one slice
        found.own(full, dim, where, ids, is_reader, (name, entry))


def _refuse_sliced_ties(model: nn.Module, sliced: set[str]) -> None:
    """One line when one parameter under two names (a tied weight) would lose channels.

    Each entry is sliced on its own, by its own layer's channels, so the two
    names of a tied weight would be cut, trained and averaged apart; a tie
    whose channels every variant keeps whole travels as it is.
    """
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        other = first.setdefault(id(param), name)
        if other != name and (other in sliced or name in sliced):
            raise ScenarioError(f"model {type(model).__name__}: {other} and {name} are one parameter (a tied "
                                "weight) whose channels a variant would drop; DepL slices every entry by its "
                                "own layer's channels and cannot keep the tie: untie them, or use "
                                "model.compressions=[0]")


@dataclass(frozen=True)
class UserNetwork:
    """A user's network for DepL: a callable building the full network and one input sample's shape.

    Attributes
    ----------
    build : callable
        ``build()`` returns the full ``nn.Module`` (e.g. the class ``Net`` of
        Flower's quickstart ``task.py``); its initial weights do not matter.
    input_shape : tuple of int
        Shape of one input sample, e.g. ``(3, 32, 32)``.
    name : str
        The network's name in messages.
    compressions : tuple of float
        The job's compressed variants, set by DepL
        (:func:`depl_fl.task.geometry.with_compressions`), as a task geometry's.
    """

    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    name: str = "network"
    compressions: tuple[float, ...] = ()


#: What a network is built from: a job's task geometry or a user's network.
Network = TaskGeometry | UserNetwork


def input_shape_of(net: Network) -> tuple[int, ...]:
    if isinstance(net, UserNetwork):
        return tuple(int(d) for d in net.input_shape)
    return (net.in_channels, net.image_size, net.image_size)


def network_name(net: Network) -> str:
    """The network's name in messages and logs."""
    return _name(net)


def _name(net: Network) -> str:
    return net.name if isinstance(net, UserNetwork) else net.arch


def full_network(net: Network, seed: int | None = None) -> nn.Module:
    """The full network of a task geometry or a user's network (seeded when ``seed`` is given).

    Lazy layers (``nn.LazyLinear``, ``nn.LazyConv2d``, ...) are materialised by
    one forward of the example input, from the same seed.
    """
    from depl_fl.task.factory import build_network

    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(int(seed))
        if isinstance(net, UserNetwork):
            model = _build_user_network(net)
            if not isinstance(model, nn.Module):
                raise ScenarioError(f"{net.name}: build() returned {type(model).__name__}, not an nn.Module")
        else:
            model = build_network(net.arch, net.num_classes, net.in_channels, net.image_size, seed=seed)
        model = eager(model)
        refuse_compiled(model, _name(net))
        _materialise_lazy(model, input_shape_of(net))
    return use_logits(model)


def _build_user_network(net: UserNetwork) -> Any:
    """``net.build()``; a builder that needs arguments is refused in one line saying how to give them."""
    import inspect

    try:
        inspect.signature(net.build).bind()
    except TypeError as exc:
        raise ScenarioError(f"{net.name}: UserNetwork calls its builder with no arguments ({exc}); give "
                            "them with functools.partial, e.g. "
                            "UserNetwork(functools.partial(Net, num_classes=10), ...)") from exc
    except ValueError:  # no signature to read (some builtins): just call it
        pass
    return net.build()


def _materialise_lazy(model: nn.Module, sample_shape: tuple[int, ...]) -> None:
    """Give lazy layers their shapes with one evaluation-mode forward of an example batch of two."""
    from torch.nn.modules.lazy import LazyModuleMixin

    if not any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in model.modules()):
        return
    was_training = model.training
    try:
        with torch.no_grad():
            model.eval()(example_batch(sample_shape, batch=2))
    except Exception as exc:  # user code: report it in one line
        raise ScenarioError(f"model {type(model).__name__}: its lazy layers cannot be initialised on an "
                            f"input of shape {tuple(sample_shape)} ({_first_line(exc)})") from None
    finally:
        model.train(was_training)


def plain_network(net: Network) -> Network:
    """``net`` without the job's compressions: what its full network, graph and groups depend on."""
    return dataclasses.replace(net, compressions=()) if net.compressions else net


def widths_of(net: Network) -> tuple[float, ...]:
    """The compressions :func:`kept_whole` tries the groups at: the job's, else :data:`PROBE_COMPRESSION`."""
    return tuple(net.compressions) or (PROBE_COMPRESSION,)


def check_network(net: Network) -> None:
    """Build ``net``'s full network and check its forwards, as every later use does (cached per process).

    Raises
    ------
    ScenarioError
        A factory that does not import, raises or returns no ``nn.Module``, or a
        forward that fails on the example input or returns no ``(batch, K)`` logits.
    """
    _base(net)


def _base(net: Network) -> nn.Module:
    """The full network built once per process (seed 0) and checked once; copies serve every later use."""
    return _plain_base(plain_network(net))


@functools.lru_cache(maxsize=16)
def _plain_base(net: Network) -> nn.Module:
    model = full_network(net, seed=0)
    classes = None if isinstance(net, UserNetwork) else int(net.num_classes)
    was_training = model.training
    try:
        _check_forward(model.eval(), example_batch(input_shape_of(net)), _name(net), classes)
    finally:
        model.train(was_training)
    # Training mode on a copy (BatchNorm statistics move); two samples, as BatchNorm needs.
    _check_forward(copy.deepcopy(model).train(), example_batch(input_shape_of(net), batch=2), _name(net),
                   classes)
    return model


def probe_outputs(net: Network, samples: int) -> torch.Tensor:
    """The full network's evaluation-mode outputs for ``samples`` example samples (what a loss reads)."""
    model = _copied(_base(net), example_batch(input_shape_of(net))).eval()
    with torch.no_grad():
        return model(example_batch(input_shape_of(net), batch=samples))


#: What a variant's sub-network depends on: the network (without its compressions) and the roots
#: of the groups kept whole.
Cut = tuple[Network, frozenset[str]]

#: Sub-networks per (cut, compression), built once per process.
_SKELETONS: dict[tuple[Cut, float], nn.Module] = {}


def _cut(net: Network) -> Cut:
    return plain_network(net), _kept_roots(net)


class _PrunedCopy:
    """A traced copy of a network whose groups lose their last channels, group by group (nested counts)."""

    def __init__(self, model: nn.Module, dg: Any, groups: list[Any],
                 restore: Callable[[nn.Module], None]) -> None:
        names = {module: name for name, module in model.named_modules()}
        order = {name: i for i, name in enumerate(names.values())}
        self._model, self._dg, self._restore = model, dg, restore
        self._roots = {_root_name(dg, g, names, order): g for g in groups}
        self._current = {root: len(g[0].idxs) for root, g in self._roots.items()}
        self._followers = {name: keys for name, module in model.named_modules()
                           if (keys := _channel_followers(module))}
        #: The compression every group was last cut to together (0: none yet).
        self.compression = 0.0

    def prune(self, root: str, compression: float) -> None:
        """Cut the group rooted at ``root`` to the channels variant ``compression`` keeps."""
        group = self._roots[root]
        k = _kept_channels(group, self._dg, compression)
        if k < self._current[root]:
            self._dg.get_pruning_group(group[0].dep.target.module, group[0].dep.handler,
                                       _dropped(group, self._dg, k, self._current[root])).prune()
            self._current[root] = k

    def prune_all(self, compression: float) -> None:
        """Cut every group to variant ``compression`` (at least as compressed as the last one)."""
        for root in self._roots:
            self.prune(root, compression)
        self.compression = compression

    def skeleton(self) -> nn.Module:
        """A copy of the network as pruned so far, buffers restored, in training mode."""
        skeleton = copy.deepcopy(self._model)
        self._restore(skeleton)
        _follow_channels(skeleton, self._followers)
        return skeleton.train()


def _pruned_copy(base: nn.Module, x: torch.Tensor, keep: Collection[str] = ()) -> _PrunedCopy:
    """A :class:`_PrunedCopy` of ``base`` (one trace) whose groups rooted in ``keep`` stay whole."""
    model = _copied(base, x).eval()
    restore = buffers_traced(model, x)  # the copy is pruned and thrown away: only its skeletons are restored
    dg, groups = _groups(model, x, keep)
    _refresh_hooked_weights(model, x)
    return _PrunedCopy(model, dg, groups, restore)


#: Per cut, the traced copy :func:`kept_whole` cut to the job's largest compression, which
#: :func:`prepare_skeletons` goes on cutting (one trace for the whole job).
_TRACED: dict[Cut, _PrunedCopy] = {}


def prepare_skeletons(net: Network, compressions: tuple[float, ...]) -> None:
    """Build the sub-networks of ``compressions`` with one dependency graph (nested channel counts).

    Pruning from the least to the most compressed variant on one traced copy
    costs one trace for all of them. The groups :func:`kept_whole` names keep
    every channel.
    """
    cut = _cut(net)
    todo = sorted({float(c) for c in compressions if c > 0 and (cut, float(c)) not in _SKELETONS})
    if not todo:
        return
    base = _base(net)
    x = example_batch(input_shape_of(net))
    pruned = _TRACED.pop(cut, None)
    with one_thread(), _named_refusals(net, base):
        if pruned is None or todo[0] < pruned.compression:
            pruned = _pruned_copy(base, x, cut[1])
        for compression in todo:
            pruned.prune_all(compression)
            _SKELETONS[(cut, compression)] = pruned.skeleton()


def _skeleton(net: Network, compression: float) -> nn.Module:
    if compression <= 0:
        return _base(net)
    cut = _cut(net)
    if (cut, compression) not in _SKELETONS:
        prepare_skeletons(net, (compression,))
    return _SKELETONS[(cut, compression)]


#: Copies of the cached sub-networks on a device other than the CPU, per (network, compression, device).
_ON_DEVICE: dict[tuple[Cut, float, str], nn.Module] = {}


def cached_skeleton(net: Network, compression: float, device: str = "cpu") -> nn.Module:
    """The cached sub-network itself (weights arbitrary); callers must not keep what they load into it.

    ``device`` (a resolved device, :func:`depl_fl.task.devices.resolve_device`)
    other than ``cpu`` gives a copy cached on that device: the CPU skeleton
    stays on the CPU for what reads it there (FLOP counting, the variants'
    checks, :func:`build_skeleton`).
    """
    if device == "cpu":
        return _skeleton(net, float(compression))
    key = (_cut(net), float(compression), str(device))
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = _copied(_skeleton(net, float(compression)),
                                  example_batch(input_shape_of(net))).to(device)
    return _ON_DEVICE[key]


def build_skeleton(net: Network, compression: float) -> nn.Module:
    """A fresh copy of the sub-network of variant ``compression`` (cached per process; weights arbitrary)."""
    return _copied(_skeleton(net, float(compression)), example_batch(input_shape_of(net)))


@contextlib.contextmanager
def _named_refusals(net: Network, model: nn.Module) -> Iterator[None]:
    """Refusals raised about ``model`` by its class name name the network as the user gave it."""
    try:
        yield
    except ScenarioError as exc:
        prefix = f"model {type(model).__name__}:"
        if not str(exc).startswith(prefix) or prefix == f"model {_name(net)}:":
            raise
        raise ScenarioError(f"model {_name(net)}:{str(exc)[len(prefix):]}") from None


@functools.lru_cache(maxsize=16)
def network_layout(net: Network) -> SubnetLayout:
    """The layout of the network's state, the groups :func:`kept_whole` names kept whole (cached).

    Networks with the same groups kept whole share one layout, whatever their compressions.
    """
    return _layout(*_cut(net))


@functools.lru_cache(maxsize=32)
def _layout(net: Network, keep: frozenset[str]) -> SubnetLayout:
    net = plain_network(net)
    base = _base(net)
    with one_thread(), _named_refusals(net, base):
        return derive_layout(base, example_batch(input_shape_of(net)), keep)


#: The compression at which :func:`kept_whole` tries the groups of a network that was not cut to a
#: job's compressions (:func:`widths_of`).
PROBE_COMPRESSION = 0.5


@dataclass(frozen=True)
class KeptWhole:
    """A channel group every variant keeps whole because the network breaks once it loses channels.

    Attributes
    ----------
    layer : str
        The group's root layer (:attr:`depl_fl.task.slicing.ChannelGroup.root`).
    problem : str
        What goes wrong once it loses channels (the forward's error, or another function).
    hint : str
        What to change in the network to compress it.
    at : tuple of float
        The compressions at which it breaks, when not at every compression tried (else empty).
    """

    layer: str
    problem: str
    hint: str
    at: tuple[float, ...] = ()

    def where(self) -> str:
        """`` at compression 0.75`` when it breaks at some of the job's compressions only, else empty."""
        if not self.at:
            return ""
        return f" at compression{'s' if len(self.at) > 1 else ''} " + ", ".join(f"{c:g}" for c in self.at)

    def reason(self) -> str:
        """Why, in words: the breaking forward or the other function."""
        if self.hint == REORDER_HINT:
            return ("the forward computes another function once it loses output channels"
                    f"{self.where()} (it reorders channels outside its layers)")
        return f"the forward breaks once it loses output channels{self.where()} ({self.problem})"

    def remedy(self) -> str:
        """What to change to compress it."""
        if self.hint == REORDER_HINT:
            return self.hint
        return f"{self.hint} to compress it"


def _kept_roots(net: Network) -> frozenset[str]:
    return frozenset(k.layer for k in kept_whole(net))


@functools.lru_cache(maxsize=16)
def kept_whole(net: Network) -> tuple[KeptWhole, ...]:
    """The channel groups every variant keeps whole so that the others can be compressed (the Check).

    The groups are tried at every compression of the job (:func:`widths_of`:
    the network's ``compressions``, set by
    :func:`depl_fl.task.geometry.with_compressions`; :data:`PROBE_COMPRESSION`
    without them). Every group is compressed at once, from the least to the
    most compressed variant on one traced copy; when each sub-network then
    computes the full network's function with the dropped channels silenced,
    nothing is kept whole (and the sub-networks are cached for the job).
    Otherwise the groups are tried one by one in network order, each added to
    those already compressed, at every compression: a group whose loss of
    channels breaks the forward (a hard-coded size such as Flower's quickstart
    ``x.view(-1, 16 * 5 * 5)``, a reshape into 6 channel blocks, a GroupNorm's
    multiple) or makes it compute another function (a channel shuffle) at
    any of them is kept whole in every variant, the others stay compressed.

    Deterministic (network order, nested channel counts, seed-0 weights), so
    every process that derives it from the same network and compressions
    keeps the same groups whole: the server and the nodes agree (a node
    checks the roots each train message names, :func:`check_kept_whole`).
    One trace per compression for every group kept whole, one forward pair
    per group and compression.
    """
    plain, widths = plain_network(net), widths_of(net)
    base = _base(net)
    x = example_batch(input_shape_of(net))
    with one_thread(), _named_refusals(net, base):
        layout = _layout(plain, frozenset())
        if not layout.groups:
            return ()
        state = {k: v.detach().cpu().numpy().copy() for k, v in base.state_dict().items()}
        probe = _copied(base, x).eval()
        pruned = _pruned_copy(base, x)
        skeletons = {}
        for compression in widths:
            pruned.prune_all(compression)
            skeleton = pruned.skeleton()
            if _variant_problem(skeleton, probe, layout, layout.structure(state, compression), state,
                                x) is not None:
                return _breaking_groups(base, layout, probe, state, x, widths)
            skeletons[compression] = skeleton
        # The job's own variants and checks (check_variants, seed 0): one trace for the whole job.
        cut = (plain, frozenset())
        for compression, skeleton in skeletons.items():
            _SKELETONS.setdefault((cut, compression), skeleton)
            _CHECKED.add((cut, compression))
        _TRACED[cut] = pruned
        return ()


def _breaking_groups(base: nn.Module, layout: SubnetLayout, probe: nn.Module, state: dict[str, np.ndarray],
                     x: torch.Tensor, widths: tuple[float, ...]) -> tuple[KeptWhole, ...]:
    """The groups that break the forward at any of ``widths``, each tried with those compressed before.

    One traced copy per compression carries the groups compressed so far; a
    group that breaks leaves every copy it was cut in unusable, so the next
    group starts from fresh traces.
    """
    compressed: list[str] = []
    kept: list[KeptWhole] = []
    copies: dict[float, _PrunedCopy] = {}
    for group in layout.groups:
        cut = {*compressed, group.root}
        broke: dict[float, tuple[str, str]] = {}
        for compression in widths:
            if compression not in copies:
                copies[compression] = _pruned_copy(base, x)
                for root in compressed:
                    copies[compression].prune(root, compression)
            pruned = copies[compression]
            keep = tuple(np.arange(g.kept(compression) if g.root in cut else g.width, dtype=np.int64)
                         for g in layout.groups)
            try:
                pruned.prune(group.root, compression)
                problem = _variant_problem(pruned.skeleton(), probe, layout,
                                           layout.index_of(keep, compression), state, x)
            except Exception as exc:  # torch-pruning itself fails on this group
                problem = (_first_line(exc), SIZE_HINT)
            if problem is not None:
                broke[compression] = _concrete_hint(problem, group, compression, int(x.shape[0]))
        if not broke:
            compressed.append(group.root)
            continue
        at = () if len(broke) == len(widths) else tuple(broke)
        kept.append(KeptWhole(group.root, *next(iter(broke.values())), at=at))
        copies.clear()
    return tuple(kept)


def _concrete_hint(problem: tuple[str, str], group: ChannelGroup, compression: float,
                   batch: int) -> tuple[str, str]:
    """``problem`` with the generic size hint made concrete for a view of the group's channels as blocks."""
    error, hint = problem
    if hint != SIZE_HINT:
        return problem
    blocks = block_view_hint(error, group.root, batch, group.kept_channels(0.0), compression,
                             group.kept_channels)
    return error, blocks or hint


def check_kept_whole(net: Network, sent: Collection[str]) -> None:
    """Refuse, in one line, a node whose groups kept whole are not those the server sent.

    The server names the roots it keeps whole in every train message
    (``kept-whole``); a node derives its own from the same network and
    compressions (:func:`kept_whole`). They differ only when the two sides
    describe different networks or compressions (or run another torch-pruning).

    Raises
    ------
    ScenarioError
        Naming both sets.
    """
    mine = network_layout(net).kept
    if tuple(sent) != mine:
        widths = ", ".join(f"{c:g}" for c in widths_of(net))
        raise ScenarioError(f"model {_name(net)}: the server keeps layers {list(sent)} whole, this node "
                            f"derives {list(mine)} at compressions {widths}: the ServerApp and the ClientApp "
                            "must describe the same network and compressions (and the same torch-pruning)")


def _warn_kept_whole(net: Network, kept: tuple[KeptWhole, ...]) -> None:
    """One warning line per process and network naming the layers kept whole, why, and what to change."""
    if net in _WARNED:
        return
    _WARNED.add(net)
    layers = "; ".join(f"layer {k.layer!r} kept whole: {k.reason()}" for k in kept)
    remedies = "; ".join(dict.fromkeys(k.remedy() for k in kept))
    LOG.warning("model %s: %s; %s", _name(net), layers, remedies)


#: (cut, compression) pairs whose cached variant :func:`kept_whole` already checked (seed 0).
_CHECKED: set[tuple[Cut, float]] = set()

#: Networks whose kept-whole layers were already reported in this process.
_WARNED: set[Network] = set()


def check_variants(geo: Network, layout: SubnetLayout, compressions: tuple[float, ...],
                   seed: int = 0) -> None:
    """Refuse, in one line, a network whose variants are not its silenced sub-networks.

    For every compression, the skeleton loaded with the entries extracted from
    a seeded full state must have the extracted shapes and compute the full
    network's output with the dropped channels silenced (evaluation mode,
    example input). The groups :func:`kept_whole` names are reported in one
    warning line; only a network left with no group to compress is refused.

    Raises
    ------
    ScenarioError
        Naming the layer whose output channels the network cannot lose.
    """
    compressed = any(c > 0 for c in compressions)
    kept = kept_whole(geo)
    if not layout.groups and compressed:
        if kept:
            first, others = kept[0], ", ".join(repr(k.layer) for k in kept[1:])
            also = f", and so does every other prunable layer ({others})" if others else ""
            raise ScenarioError(
                f"model {_name(geo)}: cannot be pruned structurally: the forward breaks once layer "
                f"{first.layer!r} loses output channels{first.where()} ({first.problem}){also}, so every "
                f"compressed variant would be the full network; {first.hint}, or use model.compressions=[0]")
        layers = reparametrized_layers(_base(geo))
        why = (f" ({_reparametrization_remedy(_base(geo), layers[0])})" if layers
               else _untracked_why(geo) or _no_layer_why(geo))
        raise ScenarioError(f"model {_name(geo)}: no layer's output channels can be pruned{why}, so every "
                            "compressed variant would be the full network; use model.compressions=[0]")
    if kept and compressed:
        _warn_kept_whole(geo, kept)
    prepare_skeletons(geo, tuple(compressions))
    with one_thread():
        _check_variants(geo, layout, compressions, seed)


def _no_layer_why(net: Network) -> str:
    """Why a network without a convolution or linear layer has no group, or ""."""
    if any(isinstance(m, ROOT_TYPES) for m in _base(net).modules()):
        return ""
    return (" (it has no convolution or linear layer: DepL compresses the channels such layers make, and "
            "a bare parameter used through torch.nn.functional only follows them)")


def _untracked_why(net: Network) -> str:
    """Why the first group torch-pruning traces to sizes its channels do not fit stays whole, or ""."""
    net = plain_network(net)
    x = example_batch(input_shape_of(net))
    model, untracked = _copied(_base(net), x).eval(), []
    with one_thread(), buffers_as_parameters(model, x):
        _groups(model, x, (), untracked)
    if not untracked:
        return ""
    order = {name: i for i, (name, _) in enumerate(_base(net).named_modules())}
    untracked.sort(key=lambda found: order.get(found[0], len(order)))
    more = len(untracked) - 1
    others = f", and so do those of {more} other layer{'s' if more > 1 else ''}" if more else ""
    return f" (the output channels of layer {untracked[0][0]!r} stay whole: {untracked[0][1]}{others})"


#: What to change when a pruned forward fails (a size written into the forward).
SIZE_HINT = ("compute sizes from the tensor (e.g. torch.flatten(x, 1)) instead of hard-coding them, and "
             "let no transpose move another axis (tokens) under a layer that reads these channels")
#: What to change when a pruned forward runs but computes another function.
REORDER_HINT = ("a forward that reorders channels outside its layers (e.g. a channel shuffle) "
                "cannot lose channels")


def _variant_problem(sub: nn.Module, probe: nn.Module, layout: SubnetLayout, structure: Any,
                     state: dict[str, np.ndarray], x: torch.Tensor) -> tuple[str, str] | None:
    """``(problem, hint)`` unless sub-network ``sub`` computes ``probe`` with the dropped channels silenced.

    ``sub`` is loaded with the entries of ``state`` that ``structure`` keeps,
    ``probe`` (the full network, evaluation mode) with ``state`` silenced.
    ``sub`` must also run in training mode (its state restored after), where
    an auxiliary head (GoogLeNet's) may read channels the evaluation forward
    never does. A forward that breaks inside a layer names it.
    """
    sliced = layout.sliced_layers
    try:
        _load(sub, extract(state, structure))
        with torch.no_grad():
            with _naming_the_layer(sub):
                got = without_channel_statistics(sub.eval(), sliced)(x)
            _run_in_training_mode(sub, torch.cat([x, x]))  # two samples, as BatchNorm needs
        _load(probe, silence(state, layout, structure))
        with torch.no_grad():
            want = without_channel_statistics(probe, sliced)(x)
    except Exception as exc:  # the pruned forward itself fails
        return _first_line(exc), SIZE_HINT
    finally:
        sub.train()
    if got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        return None
    hint = REORDER_HINT if got.shape == want.shape else SIZE_HINT
    return "its sub-network computes another function than the silenced network", hint


def _run_in_training_mode(model: nn.Module, x: torch.Tensor) -> None:
    """One training-mode forward of ``model`` without gradients; its mode and state are restored."""
    with _training_mode(model), _naming_the_layer(model):
        model(x)


def _check_variants(geo: Network, layout: SubnetLayout, compressions: tuple[float, ...],
                    seed: int) -> None:
    x = example_batch(input_shape_of(geo))
    probe = (_copied(_base(geo), x) if seed == 0 else full_network(plain_network(geo), seed=seed)).eval()
    state = {k: v.detach().cpu().numpy().copy() for k, v in probe.state_dict().items()}
    checked = seed == 0 and layout is network_layout(geo)  # what kept_whole checked is this very check
    cut = _cut(geo)
    for compression in compressions:
        if compression <= 0 or (checked and (cut, float(compression)) in _CHECKED):
            continue
        sub = _skeleton(geo, float(compression))  # the cached skeleton: its weights are arbitrary
        found = _variant_problem(sub, probe, layout, layout.structure(state, compression), state, x)
        if found is None:
            continue
        problem, hint = found
        layer = _breaking_layer(geo, layout)
        if layer is None:
            raise ScenarioError(f"model {_name(geo)}: cannot be pruned structurally: {problem} at "
                                f"compression {compression:g}; {hint}")
        raise ScenarioError(
            f"model {_name(geo)}: cannot be pruned structurally: the forward breaks once layer "
            f"{layer!r} loses output channels ({problem}); {hint}")


def _affine(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            channel_dim: bool) -> torch.Tensor:
    """``x * weight + bias``: on dimension 1 with ``channel_dim`` (GroupNorm), else on the trailing ones."""
    def shaped(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(1, -1, *([1] * (x.dim() - 2))) if channel_dim else t

    if weight is not None:
        x = x * shaped(weight)
    if bias is not None:
        x = x + shaped(bias)
    return x


class _ElementAffine(nn.Module):
    """A normalisation layer's elementwise affine part alone: ``x * weight + bias``.

    With ``channel_dim`` the weight lies on dimension 1 (GroupNorm's
    channels), else on the trailing dimensions (LayerNorm's ``normalized_shape``).
    """

    def __init__(self, weight: torch.Tensor | None, bias: torch.Tensor | None, channel_dim: bool) -> None:
        super().__init__()
        self.weight, self.bias, self.channel_dim = weight, bias, channel_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _affine(x, self.weight, self.bias, self.channel_dim)


@contextlib.contextmanager
def _affine_only_norms() -> Iterator[None]:
    """``F.layer_norm`` and ``F.group_norm`` reduced to their elementwise affine part inside the block."""
    functional = torch.nn.functional
    layer_norm, group_norm = functional.layer_norm, functional.group_norm

    def affine_layer_norm(x: torch.Tensor, _shape: Any, weight: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, *_args: Any, **_kwargs: Any) -> torch.Tensor:
        return _affine(x, weight, bias, channel_dim=False)

    def affine_group_norm(x: torch.Tensor, _groups: int, weight: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, *_args: Any, **_kwargs: Any) -> torch.Tensor:
        return _affine(x, weight, bias, channel_dim=True)

    functional.layer_norm, functional.group_norm = affine_layer_norm, affine_group_norm
    try:
        yield
    finally:
        functional.layer_norm, functional.group_norm = layer_norm, group_norm


def _own_forward_without_statistics(module: nn.Module) -> None:
    """Make ``module`` run its own forward with the normalisation functions reduced to their affine part.

    For a subclass with a forward of its own (torchvision's ``LayerNorm2d``
    permutes to channels-last around ``F.layer_norm``): replacing it by
    :class:`_ElementAffine` would put the weight on the wrong axis.
    """
    forward = type(module).forward

    def without_statistics(*args: Any, **kwargs: Any) -> Any:
        with _affine_only_norms():
            return forward(module, *args, **kwargs)

    module.forward = without_statistics  # type: ignore[method-assign]


def without_channel_statistics(model: nn.Module, layers: Collection[str] | None = None) -> nn.Module:
    """``model`` with its GroupNorm and LayerNorm layers reduced to their elementwise affine part (a copy).

    These layers normalise with statistics over several channels: a silenced
    channel still counts (as zeros) in the full network's statistics and is
    absent from the sub-network's, so the two compute different functions by
    construction, not by a slicing error. Without the statistics the
    comparison checks the slicing alone. With ``layers``, only the named ones
    are reduced (those over pruned channels; one over channels kept whole,
    such as a transformer's embedding, is compared exactly). ``model`` itself
    is returned when nothing is reduced. A subclass with a forward of its own
    keeps it, with the normalisation functions it calls reduced.
    """
    def reduced(name: str, module: nn.Module) -> bool:
        return isinstance(module, (nn.GroupNorm, nn.LayerNorm)) and (layers is None or name in layers)

    if not any(reduced(name, m) for name, m in model.named_modules()):
        return model
    out = copy.deepcopy(model)
    for name, module in list(out.named_modules()):
        if not reduced(name, module):
            continue
        if type(module).forward not in (nn.GroupNorm.forward, nn.LayerNorm.forward):
            _own_forward_without_statistics(module)
            continue
        affine = _ElementAffine(module.weight, module.bias, isinstance(module, nn.GroupNorm))
        parent_name, _, child = name.rpartition(".")
        setattr(out.get_submodule(parent_name) if parent_name else out, child, affine)
    return out


def _breaking_layer(geo: Network, layout: SubnetLayout) -> str | None:
    """The root of the first group whose pruning alone breaks the forward."""
    x = example_batch(input_shape_of(geo))
    for group in layout.groups:
        net = _copied(_base(geo), x).eval()
        traced_buffers(net, x)
        dg, groups = _groups(net, x)
        names = {module: name for name, module in net.named_modules()}
        order = {name: i for i, name in enumerate(names.values())}
        match = [g for g in groups if _root_name(dg, g, names, order) == group.root]
        if not match:
            continue
        g = match[0]
        width = group.width * group.blocks
        dropped = _dropped(g, dg, width - group.multiple * group.blocks, width)
        dg.get_pruning_group(g[0].dep.target.module, g[0].dep.handler, dropped).prune()
        try:
            with torch.no_grad():
                out = net(x)
            if out.shape[0] != x.shape[0]:
                return group.root
        except Exception:  # this group's pruning breaks the forward
            return group.root
    return None


class _LayerError(Exception):
    """An exception raised inside a layer of a pruned forward, its message naming that layer."""


@contextlib.contextmanager
def _naming_the_layer(model: nn.Module) -> Iterator[None]:
    """Within: an exception raised inside one of ``model``'s layers names the innermost one.

    A pruned forward that breaks inside a layer (an LSTM whose input
    torch-pruning sliced otherwise, an ``nn.Bilinear`` it does not slice)
    says where; one raised by the network's own forward code stays as it is.
    """
    running: list[tuple[str, nn.Module]] = []
    handles = []
    for name, module in model.named_modules():
        if module is model:
            continue
        handles.append(module.register_forward_pre_hook(
            lambda m, _args, name=name: running.append((name, m))))
        handles.append(module.register_forward_hook(lambda m, _args, _out: running.pop() and None))
    try:
        yield
    except Exception as exc:
        if not running or isinstance(exc, _LayerError):
            raise
        name, module = running[-1]
        raise _LayerError(f"{_first_line(exc)}; raised in layer {name!r} ({type(module).__name__})") from exc
    finally:
        for h in handles:
            h.remove()


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, _LayerError):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _load(model: nn.Module, state: dict[str, np.ndarray]) -> None:
    from depl_fl.task.models import set_state

    set_state(model, state)
