"""Patterns of torchvision's networks that DepL once refused: each now derives, slices and trains.

Grouped by what they protect: the derivation of every pattern (its variants
pass the check and are smaller), the slicing (extract then scatter is exact),
a p50 local update, and each fix on its own: torch-pruning's reshape mapping
guarded (with a canary that the unguarded one still fails, so the guard can
go when torch-pruning is fixed), a ``LayerNorm`` subclass with a forward of
its own compared by its affine part on the right axis, and a module's state
version kept when DepL loads a state.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.local_update import local_update
from depl_fl.task.models import get_state, set_state
from depl_fl.task.slicing import extract, scatter
from depl_fl.task.subnets import (
    check_variants,
    example_batch,
    full_network,
    network_layout,
    without_channel_statistics,
)
from depl_fl.task.torch_pruning_guard import torch_pruning
from tests import torchvision_patterns
from tests.torch_threads import one_thread  # noqa: F401 (autouse)

MODULE = "tests.torchvision_patterns"
NETWORKS = ("shufflenet_v2", "convnext", "versioned_net")


def _geo(name: str) -> TaskGeometry:
    return TaskGeometry(f"{MODULE}:{name}", 10, 1, 8)


# --- derivation and slicing ---


@pytest.mark.parametrize("name", NETWORKS)
def test_the_variants_pass_the_check_and_are_smaller(name):
    geo = _geo(name)
    layout = network_layout(geo)
    assert layout.groups, "no group compressed"
    check_variants(geo, layout, (0.0, 0.5, 0.75))  # raises unless each is the silenced network
    sizes = [layout.size_bytes(c) for c in (0.0, 0.5, 0.75)]
    assert sizes[0] > sizes[1] > sizes[2]


@pytest.mark.parametrize("name", NETWORKS)
def test_extract_then_scatter_restores_the_state_exactly(name):
    geo = _geo(name)
    layout = network_layout(geo)
    full = get_state(full_network(geo, seed=2))
    structure = layout.structure(full, 0.5)
    restored = scatter(full, extract(full, structure), structure)
    for key, arr in full.items():
        np.testing.assert_array_equal(restored[key], arr)


@pytest.mark.parametrize("name", NETWORKS)
def test_a_p50_local_update_trains_the_variants_entries(name):
    geo = _geo(name)
    full = get_state(full_network(geo, seed=4))
    sub = extract(full, network_layout(geo).structure(full, 0.5))
    rng = np.random.default_rng(0)
    x, y = rng.random((16, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 16)
    result = local_update(sub, geo, 0.5, x, y, epochs=1, lr=0.05, batch_size=8, seed=0)
    assert np.isfinite(result.train_loss)
    assert any(not np.array_equal(result.kept_state[k], sub[k]) for k in sub if sub[k].dtype.kind == "f")


# --- each fix on its own ---


def test_unguarded_torch_pruning_still_fails_on_units_after_a_shuffle(monkeypatch):
    tp = torch_pruning()
    from torch_pruning.dependency import index_mapping

    monkeypatch.setattr(index_mapping, "update_reshape_index_mapping",
                        index_mapping.update_reshape_index_mapping.__wrapped__)
    with pytest.raises(ZeroDivisionError):  # when this stops failing, the guard can go
        tp.DependencyGraph().build_dependency(torchvision_patterns.shufflenet_v2().eval(),
                                              example_inputs=example_batch((1, 8, 8)))


def test_a_layer_norm_subclass_keeps_its_own_forward_without_statistics():
    norm = torchvision_patterns.LayerNorm2d(4)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 5.0))
        norm.bias.copy_(torch.arange(4.0))
    model = torch.nn.Sequential(norm)
    x = torch.randn(2, 4, 3, 3)
    reduced = without_channel_statistics(model)
    expected = x * norm.weight.reshape(1, 4, 1, 1) + norm.bias.reshape(1, 4, 1, 1)  # on the channel axis
    torch.testing.assert_close(reduced(x), expected)
    torch.testing.assert_close(model(x), torch.nn.functional.layer_norm(  # the original keeps its statistics
        x.permute(0, 2, 3, 1), (4,), norm.weight, norm.bias).permute(0, 3, 1, 2))


def test_loading_a_state_keeps_the_modules_version():
    model = torchvision_patterns.versioned_net()
    state = {k: v + 1 for k, v in get_state(model).items()}
    set_state(model, state)
    np.testing.assert_array_equal(get_state(model)["classifier.bias"], state["classifier.bias"])
