"""torch-pruning as DepL uses it, with one guard around its reshape index mapping.

torch-pruning 1.6.1 sizes a reshape's channels by walking the graph; where
the walk ends at the network's input it reports 0 channels, and
``update_reshape_index_mapping`` then divides by that 0 (torchvision's
ShuffleNetV2: a ``view`` of a channel shuffle right after a ``chunk`` fails
the whole trace with ``ZeroDivisionError``). Guarded, such a reshape keeps the
default index mapping, as a reshape whose channels it cannot infer does:
DepL's check of every variant (:func:`depl_fl.task.subnets.check_variants`)
then keeps whole any group the default mapping gets wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any


def _guarded(update: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(update)
    def guarded(graph: Any, node: Any) -> Any:
        try:
            return update(graph, node)
        except ZeroDivisionError:  # raised before any mapping is written: leave this reshape as it is
            return None

    guarded.depl_guarded = True  # type: ignore[attr-defined]
    return guarded


def torch_pruning() -> ModuleType:
    """The ``torch_pruning`` module, its reshape index mapping guarded (once per process)."""
    import torch_pruning as tp
    from torch_pruning.dependency import index_mapping

    update = index_mapping.update_reshape_index_mapping
    if not getattr(update, "depl_guarded", False):
        index_mapping.update_reshape_index_mapping = _guarded(update)
    return tp


def prunable_groups(dg: Any, ignored_layers: list[Any], root_module_types: tuple[type, ...]) -> Iterator[Any]:
    """``dg.get_all_groups(ignored_layers, root_module_types)``, skipping roots it cannot group.

    The same walk as torch-pruning 1.6.1's ``get_all_groups``; a root whose
    group it fails to build (an ``IndexError`` in a split's index mapping
    after a channel shuffle, torchvision's ShuffleNetV2) is left out, so its
    channels are kept whole unless another group prunes them, instead of
    failing the whole network.
    """
    visited: set[Any] = set()
    ignored = list(ignored_layers) + list(dg.IGNORED_LAYERS_IN_TRACING)
    for module in list(dg.module2node.keys()):
        if module in ignored or not isinstance(module, tuple(root_module_types)) or module in visited:
            continue
        pruner = dg.get_pruner_of_module(module)
        if pruner is None or pruner.get_out_channels(module) is None:
            continue
        try:
            group = dg.get_pruning_group(module, pruner.prune_out_channels,
                                         list(range(pruner.get_out_channels(module))))
        except (IndexError, ZeroDivisionError, ValueError):  # torch-pruning's index mapping: skip the root
            continue
        prunable = True
        for dep, _ in group:
            if dg.is_out_channel_pruning_fn(dep.handler):
                visited.add(dep.target.module)
                prunable &= dep.target.module not in ignored
        if prunable:
            yield group
