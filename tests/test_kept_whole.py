"""A forward that breaks once a channel group loses channels: that group kept whole, the others compressed.

Flower's quickstart ``Net`` hard-codes its flattened size (``x.view(-1, 16 * 5 * 5)``):
the group of the conv before it is kept whole (:func:`depl_fl.task.subnets.kept_whole`),
the other groups are compressed, one warning line names the layer, and only a
network left with no group to compress is refused (one line, exit 2).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.models import get_state, set_state
from depl_fl.task.slicing import extract, scatter, silence
from depl_fl.task.subnets import (
    UserNetwork,
    build_skeleton,
    check_variants,
    example_batch,
    full_network,
    kept_whole,
    network_layout,
)
from tests.log_lines import LogLines
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)

ROOT = Path(__file__).resolve().parent.parent

#: network -> (groups kept whole, groups compressed).
KEPT = {
    "quickstart_net_8": (("conv2",), ("conv1", "fc1")),         # x.view(-1, 16 * 2 * 2) after conv2
    "channel_shuffle_net": (("grouped",), ("stem",)),            # the shuffled channels
    "mixer_net_square": (("patch",), ("blocks.0.token_up", "blocks.0.channel_up", "blocks.1.token_up",
                                      "blocks.1.channel_up")),   # tokens == channels: a transpose ties them
}


def _geo(name: str) -> TaskGeometry:
    return TaskGeometry(f"tests.user_nets:{name}", 10, 1, 8)


# --- the breaking group kept whole, the others compressed ---


@pytest.mark.parametrize("name", list(KEPT))
def test_the_breaking_group_is_kept_whole_and_the_others_compressed(name):
    geo = _geo(name)
    whole, compressed = KEPT[name]
    assert tuple(k.layer for k in kept_whole(geo)) == whole
    layout = network_layout(geo)
    assert tuple(g.root for g in layout.groups) == compressed
    check_variants(geo, layout, (0.0, 0.5, 0.75))  # raises when a variant is not the silenced network
    sizes = [layout.size_bytes(c) for c in (0.0, 0.5, 0.75)]
    assert sizes[0] > sizes[1] > sizes[2]
    for compression in (0.5, 0.75):
        shapes = layout.sub_shapes(compression)
        assert all(shapes[f"{layer}.weight"][0] == layout.shapes[f"{layer}.weight"][0] for layer in whole)
        small = build_skeleton(geo, compression)
        assert {k: tuple(v.shape) for k, v in small.state_dict().items()} == shapes


def test_the_quickstart_variant_is_the_silenced_network_and_scatters_back_exactly():
    geo = _geo("quickstart_net_8")
    layout = network_layout(geo)
    full = get_state(full_network(geo, seed=3))
    x = example_batch((1, 8, 8), batch=4)
    for compression in (0.5, 0.75):
        structure = layout.structure(full, compression)
        sub = extract(full, structure)
        assert sub["conv2.weight"].shape[0] == 16 and sub["conv1.weight"].shape[0] < 6
        back = scatter(full, sub, structure)
        assert all(np.array_equal(back[k], full[k]) for k in full)
        small = build_skeleton(geo, compression)
        set_state(small, sub)
        big = full_network(geo)
        set_state(big, silence(full, layout, structure))
        with torch.no_grad():
            torch.testing.assert_close(small.eval()(x), big.eval()(x), rtol=1e-4, atol=1e-5)


def test_the_hard_coded_quickstart_net_at_32x32_compresses_around_its_flatten():
    geo = TaskGeometry("tests.user_nets:quickstart_net", 10, 3, 32)
    assert [k.layer for k in kept_whole(geo)] == ["conv2"]
    layout = network_layout(geo)
    assert tuple(g.root for g in layout.groups) == ("conv1", "fc1", "fc2")
    check_variants(geo, layout, (0.0, 0.5))
    assert layout.size_bytes(0.5) < 0.75 * layout.size_bytes(0.0)


# --- one warning line per job ---


def test_one_warning_line_names_the_layer_kept_whole_why_and_what_to_change():
    from tests.user_nets import QuickstartNet8

    net = UserNetwork(QuickstartNet8, (1, 8, 8), "warned_quickstart")
    handler, logger = LogLines(), logging.getLogger("depl_fl.subnets")
    logger.addHandler(handler)
    try:
        check_variants(net, network_layout(net), (0.0,))  # the full network alone: nothing to say
        assert handler.lines == []
        check_variants(net, network_layout(net), (0.0, 0.5))
        check_variants(net, network_layout(net), (0.0, 0.75))
    finally:
        logger.removeHandler(handler)
    assert len(handler.lines) == 1 and "\n" not in handler.lines[0]
    line = handler.lines[0]
    assert line.startswith("model warned_quickstart: layer 'conv2' kept whole: the forward breaks once it "
                           "loses output channels (RuntimeError: shape '[-1, 64]' is invalid")
    assert "torch.flatten(x, 1)" in line and line.endswith("to compress it")


def test_a_channel_shuffle_is_reported_as_another_function():
    from tests.user_nets import ChannelShuffleNet

    net = UserNetwork(ChannelShuffleNet, (1, 8, 8), "warned_shuffle")
    handler, logger = LogLines(), logging.getLogger("depl_fl.subnets")
    logger.addHandler(handler)
    try:
        check_variants(net, network_layout(net), (0.0, 0.5))
    finally:
        logger.removeHandler(handler)
    assert handler.lines == ["model warned_shuffle: layer 'grouped' kept whole: the forward computes another "
                             "function once it loses output channels (it reorders channels outside its "
                             "layers); a forward that reorders channels outside its layers (e.g. a channel "
                             "shuffle) cannot lose channels"]


# --- refused only when no group is left ---


@pytest.mark.parametrize(("name", "layers"), [
    ("transpose_tied_net", ("enc", "mid")),        # both groups break
    ("spatial_layer_norm_net", ("conv",)),         # the only group breaks
    ("non_persistent_buffer_net", ("conv1",)),
])
def test_a_network_whose_every_group_breaks_is_refused_in_one_line(name, layers):
    geo = _geo(name)
    assert tuple(k.layer for k in kept_whole(geo)) == layers
    layout = network_layout(geo)
    assert layout.groups == ()
    check_variants(geo, layout, (0.0,))  # the full network alone trains
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, layout, (0.0, 0.5))
    message = str(err.value)
    assert "\n" not in message and "cannot be pruned structurally" in message
    assert f"the forward breaks once layer {layers[0]!r} loses output channels" in message
    assert all(repr(layer) in message for layer in layers) and "model.compressions=[0]" in message


# --- the same kept-whole set and index sets in every process ---

_DIGEST = """
import json, numpy as np
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.models import get_state
from depl_fl.task.subnets import full_network, kept_whole, network_layout
geo = TaskGeometry("tests.user_nets:{name}", 10, 1, 8)
layout = network_layout(geo)
full = get_state(full_network(geo, seed=3))
index = layout.structure(full, 0.75).index
index = {{k: [None if i is None else i.tolist() for i in v] for k, v in index.items()}}
print(json.dumps({{"kept": [k.layer for k in kept_whole(geo)], "groups": [g.root for g in layout.groups],
                   "index": index}}))
"""


def _digest(name: str) -> dict:
    layout, geo = network_layout(_geo(name)), _geo(name)
    index = layout.structure(get_state(full_network(geo, seed=3)), 0.75).index
    return {"kept": [k.layer for k in kept_whole(geo)], "groups": [g.root for g in layout.groups],
            "index": {k: [None if i is None else i.tolist() for i in v] for k, v in index.items()}}


@pytest.mark.parametrize("name", ["quickstart_net_8", "channel_shuffle_net"])
def test_a_fresh_process_keeps_the_same_groups_whole_with_the_same_index_sets(name):
    proc = subprocess.run([sys.executable, "-c", _DIGEST.format(name=name)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == _digest(name)
