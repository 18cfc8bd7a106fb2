"""torchvision's Swin Transformer (a small hand copy) through DepL's variant derivation.

Grouped by what they protect: the derivation (its variants pass the check and
are smaller, in seconds rather than hours: torch-pruning's flatten index
mapping capped), the slicing (extract then scatter is exact), a p50 local
update, and the cap on its own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depl_fl.task import torch_pruning_guard
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.local_update import local_update
from depl_fl.task.models import get_state
from depl_fl.task.slicing import extract, scatter
from depl_fl.task.subnets import check_variants, full_network, network_layout
from depl_fl.task.torch_pruning_guard import IndexExplosion, index_limit, prunable_groups, torch_pruning
from tests import swin_like
from tests.torch_threads import one_thread  # noqa: F401 (autouse)

GEO = TaskGeometry("tests.swin_like:swin_tiny", 10, 1, 8)


@pytest.fixture(scope="module")
def layout():
    return network_layout(GEO)


def test_the_variants_pass_the_check_and_are_smaller(layout):
    assert layout.groups, "no group compressed"
    check_variants(GEO, layout, (0.0, 0.5, 0.75))  # raises unless each is the silenced network
    sizes = [layout.size_bytes(c) for c in (0.0, 0.5, 0.75)]
    assert sizes[0] > sizes[1] > sizes[2]


def test_extract_then_scatter_restores_the_state_exactly(layout):
    full = get_state(full_network(GEO, seed=2))
    structure = layout.structure(full, 0.5)
    restored = scatter(full, extract(full, structure), structure)
    for key, arr in full.items():
        np.testing.assert_array_equal(restored[key], arr)


def test_a_p50_local_update_trains_the_variants_entries(layout):
    full = get_state(full_network(GEO, seed=4))
    sub = extract(full, layout.structure(full, 0.5))
    rng = np.random.default_rng(0)
    x, y = rng.random((16, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 16)
    result = local_update(sub, GEO, 0.5, x, y, epochs=1, lr=0.05, batch_size=8, seed=0)
    assert np.isfinite(result.train_loss)
    assert any(not np.array_equal(result.kept_state[k], sub[k]) for k in sub if sub[k].dtype.kind == "f")


def test_the_flatten_mapping_refuses_more_indices_than_the_limit():
    torch_pruning()
    from torch_pruning import _helpers
    from torch_pruning.dependency.index_mapping import _FlattenIndexMapping

    idxs = [_helpers._HybridIndex(idx=i, root_idx=i) for i in range(4)]
    mapping = _FlattenIndexMapping(stride=8)
    assert len(mapping(idxs)) == 32  # no limit outside prunable_groups
    model = swin_like.swin_tiny()
    x = torch.zeros(1, 1, 8, 8)
    dg = torch_pruning().DependencyGraph().build_dependency(model.eval(), example_inputs=x)
    groups = prunable_groups(dg, [model.head], (torch.nn.Linear, torch.nn.Conv2d), limit=31)
    next(groups, None)  # inside the walk the limit holds
    with pytest.raises(IndexExplosion):
        mapping(idxs)
    groups.close()
    assert len(mapping(idxs)) == 32  # and is lifted after it
    assert not torch_pruning_guard._INDEX_LIMIT
    assert index_limit(model, x[0].numel()) == max(p.numel() for p in model.parameters())
