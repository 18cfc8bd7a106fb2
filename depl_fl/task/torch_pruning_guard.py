"""torch-pruning as DepL uses it, with one guard around its reshape index mapping.

torch-pruning 1.6.1 sizes a reshape's channels by walking the graph; where
the walk ends at the network's input it reports 0 channels, and
``update_reshape_index_mapping`` then divides by that 0 (torchvision's
ShuffleNetV2: a ``view`` of a channel shuffle right after a ``chunk`` fails
the whole trace with ``ZeroDivisionError``). Guarded, such a reshape keeps the
default index mapping, as a reshape whose channels it cannot infer does:
DepL's check of every variant (:func:`depl_fl.task.subnets.check_variants`)
then keeps whole any group the default mapping gets wrong.

A second guard caps its flatten index mapping. Each reshape it reads as a
flatten multiplies a channel index into ``stride`` indices; along a chain of
reshapes that are no flatten (a windowed attention's partition and reverse,
torchvision's Swin Transformer) the index lists compound into millions and
one group takes hours to build. No channel index list of a network is longer
than its largest weight or a sample of its input, so a longer one ends that
root's group (:func:`prunable_groups` leaves it out) in milliseconds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from depl_fl.task import torch_pruning_speed
from depl_fl.task.failed_roots import FailedRoots

#: While :func:`prunable_groups` builds a graph's groups: the longest index list a mapping may return.
_INDEX_LIMIT: list[int] = []


class IndexExplosion(ValueError):
    """A flatten index mapping returned more indices than the network has channels to address."""


def _guarded(update: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(update)
    def guarded(graph: Any, node: Any) -> Any:
        try:
            return update(graph, node)
        except ZeroDivisionError:  # raised before any mapping is written: leave this reshape as it is
            return None

    guarded.depl_guarded = True  # type: ignore[attr-defined]
    return guarded


def _capped(flatten: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(flatten)
    def capped(mapping: Any, idxs: Any) -> Any:
        if _INDEX_LIMIT and not mapping.reverse and len(idxs) * mapping._stride > _INDEX_LIMIT[-1]:
            raise IndexExplosion(f"{len(idxs) * mapping._stride} indices, more than the network's "
                                 f"{_INDEX_LIMIT[-1]}")
        return flatten(mapping, idxs)

    capped.depl_guarded = True  # type: ignore[attr-defined]
    return capped


def torch_pruning() -> ModuleType:
    """The ``torch_pruning`` module, its reshape and flatten index mappings guarded (once per process)."""
    import torch_pruning as tp
    from torch_pruning.dependency import index_mapping

    torch_pruning_speed.install(tp)  # first: the cap below guards the fast flatten mapping
    update = index_mapping.update_reshape_index_mapping
    if not getattr(update, "depl_guarded", False):
        index_mapping.update_reshape_index_mapping = _guarded(update)
    flatten = index_mapping._FlattenIndexMapping.__call__
    if not getattr(flatten, "depl_guarded", False):
        index_mapping._FlattenIndexMapping.__call__ = _capped(flatten)
    return tp


def index_limit(model: Any, sample_numel: int) -> int:
    """The most channel indices any list of ``model``'s holds: its largest weight, buffer or sample."""
    sizes = [t.numel() for t in (*model.parameters(), *model.buffers())]
    return max([sample_numel, *sizes])


def prunable_groups(dg: Any, ignored_layers: list[Any], root_module_types: tuple[type, ...],
                    limit: int | None = None) -> Iterator[Any]:
    """``dg.get_all_groups(ignored_layers, root_module_types)``, skipping roots it cannot group.

    The same walk as torch-pruning 1.6.1's ``get_all_groups``; a root whose
    group it fails to build (an ``IndexError`` in a split's index mapping
    after a channel shuffle, torchvision's ShuffleNetV2) is left out, so its
    channels are kept whole unless another group prunes them, instead of
    failing the whole network. With ``limit`` (:func:`index_limit`), a root
    whose flatten index mapping compounds past it is left out the same way.
    A root left out in an earlier graph of the same signature (a copy traced
    alike, :mod:`depl_fl.task.failed_roots`) is left out without its walk.
    """
    if limit is not None:
        _INDEX_LIMIT.append(limit)
    try:
        yield from _groups(dg, ignored_layers, root_module_types, FailedRoots(dg, limit))
    finally:
        if limit is not None:
            _INDEX_LIMIT.pop()


def _groups(dg: Any, ignored_layers: list[Any], root_module_types: tuple[type, ...],
            failed: FailedRoots) -> Iterator[Any]:
    visited: set[Any] = set()
    ignored = list(ignored_layers) + list(dg.IGNORED_LAYERS_IN_TRACING)
    for module in list(dg.module2node.keys()):
        if module in ignored or not isinstance(module, tuple(root_module_types)) or module in visited:
            continue
        pruner = dg.get_pruner_of_module(module)
        if pruner is None or pruner.get_out_channels(module) is None or failed.known(module):
            continue
        try:
            group = dg.get_pruning_group(module, pruner.prune_out_channels,
                                         list(range(pruner.get_out_channels(module))))
        except (IndexError, ZeroDivisionError, ValueError):  # torch-pruning's index mapping: skip the root
            failed.add(module)
            continue
        prunable = True
        for dep, _ in group:
            if dg.is_out_channel_pruning_fn(dep.handler):
                visited.add(dep.target.module)
                prunable &= dep.target.module not in ignored
        if prunable:
            yield group
