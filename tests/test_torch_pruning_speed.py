"""torch-pruning's index-mapping update made fast (``depl_fl.task.torch_pruning_speed``): the same results.

Grouped by what they protect: every channel walk answers as torch-pruning's
own (answer and step counter, from any start, the step limit included); the
groups, their index lists, the roots left out, the layouts and the pruned
sub-networks of networks through flatten, reshape, window and shuffle paths
are those torch-pruning's own code gives; the flatten mapping returns the same
lists; and canaries that fail when torch-pruning's code under the patches
changes (then re-check the emulation and update the fingerprints).
"""

from __future__ import annotations

import hashlib
import inspect
import random

import numpy as np
import pytest
import torch

from depl_fl.task import torch_pruning_speed
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.subnets import (
    ROOT_TYPES,
    _pruned_copy,
    derive_layout,
    example_batch,
    full_network,
    output_layers,
)
from depl_fl.task.torch_pruning_guard import index_limit, prunable_groups, torch_pruning
from tests.torch_threads import one_thread  # noqa: F401 (autouse)

#: Networks through window reshapes and patch merging (Swin), channels-last permutes (ConvNeXt), a
#: channel shuffle with split (ShuffleNetV2), a flatten into a classifier (Flower's quickstart ``Net``),
#: concatenation, a ViT's token reshapes, residual adds (ResNet-18).
NETWORKS = (
    TaskGeometry("tests.swin_like:swin_tiny", 10, 1, 8),
    TaskGeometry("tests.torchvision_patterns:convnext", 10, 1, 8),
    TaskGeometry("tests.torchvision_patterns:shufflenet_v2", 10, 1, 8),
    TaskGeometry("tests.torchvision_patterns:versioned_net", 10, 1, 8),
    TaskGeometry("tests.user_nets:quickstart_net", 10, 3, 32),
    TaskGeometry("tests.user_nets:concat_net", 10, 1, 8),
    TaskGeometry("tests.user_nets:vit_net", 10, 1, 8),
    TaskGeometry("tests.user_nets:resnet18", 10, 3, 32),
)


def _ids(net: TaskGeometry) -> str:
    return f"{net.arch}@{net.image_size}"


def _model(net: TaskGeometry) -> tuple[torch.nn.Module, torch.Tensor]:
    return full_network(net, seed=0).eval(), example_batch((net.in_channels, net.image_size, net.image_size))


def _graph(model: torch.nn.Module, x: torch.Tensor):
    return torch_pruning().DependencyGraph().build_dependency(model, example_inputs=x, verbose=False)


def _groups_seen(net: TaskGeometry) -> list[tuple]:
    """Every prunable group of a fresh graph: root, then each member's dependency and index lists."""
    model, x = _model(net)
    dg = _graph(model, x)
    names = {module: name for name, module in model.named_modules()}
    seen = []
    limit = index_limit(model, x[0].numel())
    for group in prunable_groups(dg, output_layers(model, x), ROOT_TYPES, limit):
        members = [(_dependency(dg, item.dep, names), list(item.idxs), list(item.root_idxs))
                   for item in group.items]
        seen.append((names.get(group[0].dep.target.module), members))
    return seen


def _dependency(dg, dep, names: dict) -> tuple[str, ...]:
    """A dependency by its layers' names (torch-pruning numbers unwrapped parameters by address)."""
    def node(n) -> str:
        if n.module in names:
            return names[n.module]
        if isinstance(n.module, torch.nn.Parameter):
            return dg._param_to_name[n.module]
        return n.name

    return dep.trigger.__name__, node(dep.source), dep.handler.__name__, node(dep.target)


def _mappings(net: TaskGeometry) -> list[tuple]:
    """Every dependency's index mappings after a graph's update: class and settings."""
    model, x = _model(net)
    dg = _graph(model, x)
    dg.get_pruning_group(*_first_root(dg), [0])  # one more update, as a group walk runs it
    names = {module: name for name, module in model.named_modules()}
    return [(_dependency(dg, dep, names), [_mapping(m) for m in dep.index_mapping])
            for node in dg.module2node.values() for dep in node.dependencies]


def _mapping(mapping) -> tuple | None:
    return None if mapping is None else (type(mapping).__name__, sorted(vars(mapping).items()))


def _first_root(dg) -> tuple:
    for module in dg.module2node:
        if isinstance(module, ROOT_TYPES):
            return module, dg.get_pruner_of_module(module).prune_out_channels
    raise AssertionError("no root")


def _layout_seen(net: TaskGeometry) -> tuple:
    model, x = _model(net)
    layout = derive_layout(model, x)
    axes = [(ax.entry, ax.dim, ax.owner.tolist(), ax.reads) for ax in layout.axes]
    return layout.groups, axes, layout.kept


def _pruned_shapes(net: TaskGeometry) -> list[dict]:
    """The state shapes of the pruned copy cut to each compression in turn (nested, as a job cuts it)."""
    model, x = _model(net)
    pruned = _pruned_copy(model, x)
    shapes = []
    for compression in (0.25, 0.5, 0.75):
        pruned.prune_all(compression)
        shapes.append({k: tuple(v.shape) for k, v in pruned.skeleton().state_dict().items()})
    return shapes


@pytest.mark.parametrize("net", NETWORKS, ids=_ids)
@pytest.mark.parametrize("seen", [_groups_seen, _mappings, _layout_seen, _pruned_shapes],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_fast_update_gives_what_torch_prunings_own_gives(net, seen):
    fast = seen(net)
    with torch_pruning_speed.as_released():
        released = seen(net)
    assert _comparable(fast) == _comparable(released)


def _comparable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def test_a_network_with_roots_left_out_is_compared_too():
    """The Swin copy has a group that passes the index cap and one left out: both paths are exercised."""
    model, x = _model(NETWORKS[0])
    dg = _graph(model, x)
    limit = index_limit(model, x[0].numel())
    roots = [m for m in dg.module2node if isinstance(m, ROOT_TYPES)]
    assert len(list(prunable_groups(dg, output_layers(model, x), ROOT_TYPES, limit))) < len(roots)


@pytest.mark.parametrize("net", NETWORKS[:3], ids=_ids)
def test_every_channel_walk_answers_as_torch_prunings_own_from_any_start(net):
    from torch_pruning.dependency import constants, shape_infer

    model, x = _model(net)
    dg = _graph(model, x)
    limit = constants.MAX_RECURSION_DEPTH
    walks = (shape_infer.infer_out_channels_recursively, shape_infer.infer_in_channels_recursively)
    starts = (0, 7, limit - 40, limit - 1, limit, limit + 1)
    checked = 0
    torch_pruning_speed._MEMOS.append({})
    try:
        for node in dg.module2node.values():
            for walk in walks:
                for start in starts:
                    fast_depth = [start]
                    fast = walk(dg, node, fast_depth)
                    with torch_pruning_speed.as_released():
                        own_depth = [start]
                        own = walk(dg, node, own_depth)
                    assert (fast, fast_depth) == (own, own_depth), (node, walk.__name__, start)
                    checked += 1
    finally:
        torch_pruning_speed._MEMOS.pop()
    assert checked > 100


@pytest.mark.parametrize("stride", [1, 3, 32])
@pytest.mark.parametrize("reverse", [False, True])
def test_the_flatten_mapping_returns_the_same_list(stride, reverse):
    torch_pruning()
    from torch_pruning import _helpers
    from torch_pruning.dependency.index_mapping import _FlattenIndexMapping

    rng = random.Random(0)
    idxs = [_helpers._HybridIndex(rng.randrange(500), rng.randrange(64)) for _ in range(3000)]
    mapping = _FlattenIndexMapping(stride=stride, reverse=reverse)
    fast = mapping(idxs)
    with torch_pruning_speed.as_released():
        own = mapping(idxs)
    assert fast == own  # same values in the same order (a set's order, when reversed)
    assert all(type(i) is _helpers._HybridIndex for i in fast)
    assert mapping([]) == []


def test_an_update_runs_again_once_a_channel_count_changes():
    model, x = _model(NETWORKS[4])
    dg = _graph(model, x)
    module, handler = _first_root(dg)
    before = torch_pruning_speed._read(dg)
    assert before is not None and before.same(getattr(dg, torch_pruning_speed._LAST_READ))
    dg.get_pruning_group(module, handler, [0]).prune()
    assert not torch_pruning_speed._read(dg).same(getattr(dg, torch_pruning_speed._LAST_READ))
    dg.get_pruning_group(module, handler, [0])
    assert torch_pruning_speed._read(dg).same(getattr(dg, torch_pruning_speed._LAST_READ))


#: sha256 (first 16 hex digits) of the torch-pruning 1.6.1 code the fast paths reproduce or rely on.
FINGERPRINTS = {
    "shape_infer.infer_out_channels_recursively": "f6e13d95acd1784a",
    "shape_infer.infer_in_channels_recursively": "a896722bf2d643be",
    "index_mapping.update_index_mapping": "dbadfad5a25ee156",
    "index_mapping._FlattenIndexMapping.__call__": "76cbf7256f4cda7e",
}


def _own(path: str):
    from torch_pruning.dependency import index_mapping, shape_infer

    torch_pruning()
    module, _, name = path.partition(".")
    found = {"shape_infer": shape_infer, "index_mapping": index_mapping}[module]
    for part in name.split("."):
        found = getattr(found, part)
    while hasattr(found, "__wrapped__"):
        found = found.__wrapped__
    return found


@pytest.mark.parametrize("path", sorted(FINGERPRINTS))
def test_canary_torch_prunings_code_under_the_fast_paths_is_unchanged(path):
    source = inspect.getsource(_own(path))
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == FINGERPRINTS[path], (
        f"torch-pruning's {path} changed: re-check depl_fl/task/torch_pruning_speed.py against it")


def test_canary_the_update_reads_what_the_fast_path_watches():
    """update_index_mapping's steps and the channel getters: the inputs :func:`_read` watches."""
    from torch_pruning.dependency import graph

    names = {"update_concat_index_mapping", "update_split_index_mapping", "update_reshape_index_mapping",
             "update_unbind_index_mapping", "update_expand_index_mapping", "update_slice_index_mapping"}
    called = {n for n in names if n in inspect.getsource(_own("index_mapping.update_index_mapping"))}
    assert called == names
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(inspect.getsource(_own(f"index_mapping.{name}")).encode())
    for name in ("get_out_channels", "get_in_channels", "get_pruner_of_module"):
        digest.update(inspect.getsource(getattr(graph.DependencyGraph, name)).encode())
    assert digest.hexdigest()[:16] == UPDATE_STEPS, (
        "torch-pruning's index-mapping steps changed: re-check what _read watches")


#: sha256 (first 16 hex digits) of torch-pruning 1.6.1's index-mapping steps and channel getters.
UPDATE_STEPS = "a75efa5183efd5a4"


@pytest.mark.parametrize("net", [NETWORKS[0], NETWORKS[4]], ids=_ids)
def test_the_groups_kept_whole_are_those_torch_prunings_own_code_keeps(net):
    """The Check tries groups on fresh traces (a root left out in one is skipped in the next)."""
    from depl_fl.task.geometry import with_compressions
    from depl_fl.task.subnets import kept_whole

    cut = with_compressions(net, (0.25, 0.5, 0.75))
    fast = kept_whole.__wrapped__(cut)
    with torch_pruning_speed.as_released():
        released = kept_whole.__wrapped__(cut)
    assert fast == released


def test_a_root_left_out_is_skipped_in_the_next_graph_traced_alike():
    from depl_fl.task import failed_roots

    net = NETWORKS[0]
    first = _groups_seen(net)
    model, x = _model(net)
    dg = _graph(model, x)
    memory = failed_roots.FailedRoots(dg, index_limit(model, x[0].numel()))
    left_out = [m for m in dg.module2node if memory.known(m)]
    assert left_out, "the Swin copy has roots left out at the index cap"
    assert _groups_seen(net) == first
    with torch_pruning_speed.as_released():
        assert not any(memory.known(m) for m in left_out)  # torch-pruning's own walk runs again
        assert _groups_seen(net) == first


def test_graphs_traced_otherwise_do_not_share_a_signature():
    from depl_fl.task.failed_roots import graph_signature

    model, x = _model(NETWORKS[0])
    dg = _graph(model, x)
    again = _graph(*_model(NETWORKS[0]))
    assert graph_signature(dg, 100) == graph_signature(again, 100)
    assert graph_signature(dg, 100) != graph_signature(dg, 101)  # another index cap
    module, handler = _first_root(again)
    again.get_pruning_group(module, handler, [0]).prune()
    from torch_pruning.dependency import index_mapping

    index_mapping.update_index_mapping(again)
    assert graph_signature(dg, 100) != graph_signature(again, 100)  # one channel fewer


def test_the_memory_of_left_out_roots_stays_out_of_a_graph_whose_update_fails(monkeypatch):
    from torch_pruning.dependency import index_mapping

    from depl_fl.task.failed_roots import FailedRoots

    model, x = _model(NETWORKS[4])
    dg = _graph(model, x)
    memory = FailedRoots(dg, 100)

    def failing(_graph):
        raise IndexError("a split's index mapping")

    monkeypatch.setattr(index_mapping, "update_index_mapping", failing)
    module, _ = _first_root(dg)
    assert not memory.known(module)  # no exception: the walk meets it and leaves the root out, as before
    memory.add(module)
    monkeypatch.undo()
    assert not memory.known(module)  # off for this graph
