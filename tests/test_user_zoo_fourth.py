"""A fourth zoo of user networks (``tests/user_nets_fourth.py``): common code patterns, compiled networks.

Grouped by what they protect: the derivation and the Check on networks the
other zoos lack (GroupNorm and pre-activation ResNets, RepVGG, GhostNet,
CBAM, selective kernels, ShuffleNetV2, Inception-ResNet, ...), with what
each keeps whole; a ``torch.compile``-wrapped network traced, sliced and
trained as its eager module (:mod:`depl_fl.task.compiled_modules`); a layer
under ``torch.nn.utils.prune``'s mask kept whole like a reparametrized one;
DepL rounds in process with bytes as modelled; and the networks refused in one
line with exit status 2 (a TorchScript module, channels mixed along another
axis or split in halves, a network of bare parameters only).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.subnets import check_variants, full_network, network_layout
from tests.refused_job import refused_job
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)
from tests.zoo_checks import check_compressed_and_full_round, check_derived_variants

MODULE = "tests.user_nets_fourth"

#: Working networks: the roots of their compressed groups (what is kept whole, see each comment).
WORKING = {
    "pytorch_mnist_net": ("conv1", "conv2", "fc1"),
    "group_norm_resnet": ("conv1", "layer1.conv1", "layer2.conv1", "layer2.conv2"),
    "preact_resnet": ("conv1", "layer1.conv1", "layer2.conv1", "layer2.conv2"),
    "wide_resnet": ("conv1", "layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1", "layer2.0.conv1",
                    "layer2.0.conv2"),
    "repvgg_net": ("stage0.dense.0", "stage1.0.dense.0"),
    "ghost_net": ("stem.0", "ghost1.primary_conv.0"),       # ghost2 whole: `[:, :31]` cuts its concat
    "cbam_net": ("conv1", "cbam.mlp.0"),                    # conv2 whole: a channel mean reads it
    "selective_kernel_net": ("stem", "sk.branches.0.0", "sk.fc.0"),
    "shufflenet_v2_net": ("units.0.branch.0", "units.1.branch.0", "conv5.0"),  # the chunked stem whole
    "pixel_unshuffle_net": ("conv1", "conv3"),              # conv2 whole: PixelUnshuffle spreads it 4x
    "conv3d_net": ("conv3d", "conv2d"),
    "pixel_embedding_net": ("fc1",),
    "unpool_net": ("dec",),                                 # enc, mid whole: MaxUnpool2d's indices
    "add_module_loop_net": ("conv0", "conv1", "conv2"),
    "embedding_head_net": ("conv1", "conv2", "neck"),
    "coord_conv_net": ("conv1", "conv2"),
    "inception_resnet_net": ("stem.0", *(f"blocks.{i}.{layer}" for i in (0, 1) for layer in (
        "b0", "b1.0", "b1.2", "b2.0", "b2.2", "b2.4"))),
    "compiled_net": ("conv1", "conv2", "fc1"),              # the eager module torch.compile wraps
    "mask_pruned_net": ("conv2", "conv3"),                  # conv1 whole: its prune mask
}
#: Refused networks: what the one-line refusal says.
REFUSED = {
    "scripted_block_net": "layer 'block' is compiled by torch.jit (RecursiveScriptModule), whose layers DepL "
                          "can neither trace nor slice; give DepL the eager module",
    "scripted_net": "the network is compiled by torch.jit (RecursiveScriptModule)",
    # ECA's Conv1d mixes neighbouring channels: a sub-network is not the network with channels silenced
    "eca_net": "no layer's output channels can be pruned (the output channels of layer 'conv1' stay whole: "
               "torch-pruning ties its 16 channels to the 1 of layer 'eca1.conv' (Conv1d): its one channel "
               "broadcast over them (a spatial gate), or they reach it mixed along another axis or moved by "
               "a transpose, and so do those of 1 other layer), so "
               "every compressed variant would be the full network; use model.compressions=[0]",
    # F.glu halves the channels: torch-pruning 1.6.1 maps the 2C outputs straight onto the C inputs after it
    "glu_net": "no layer's output channels can be pruned (the output channels of layer 'conv1' stay whole: "
               "layer 'conv2' (Conv2d) has 16 where they are 32: they reach it split (a GLU), mixed along "
               "another axis (a Conv1d over the channels) or moved by a transpose, and so do those of 2 "
               "other layers), so every compressed variant would be the full network; use "
               "model.compressions=[0]",
    "functional_conv_net": "no layer's output channels can be pruned (it has no convolution or linear layer: "
                           "DepL compresses the channels such layers make, and a bare parameter used through "
                           "torch.nn.functional only follows them)",
}


def _geo(name: str) -> TaskGeometry:
    return TaskGeometry(f"{MODULE}:{name}", 10, 1, 8)


# --- derivation and the Check ---


@pytest.mark.parametrize("name", list(WORKING))
def test_variants_are_derived_and_pass_the_check(name):
    check_derived_variants(_geo(name), WORKING[name])


def test_group_norm_channels_stay_a_multiple_of_the_groups():
    shapes = network_layout(_geo("group_norm_resnet")).sub_shapes(0.75)
    assert all(shape[0] % 2 == 0 for key, shape in shapes.items() if ".gn" in key or "shortcut.1" in key)


def test_a_torch_compile_wrapper_is_unwrapped_to_the_eager_module():
    """The network DepL builds is the module torch.compile wraps: entries without ``_orig_mod.``."""
    net = full_network(_geo("compiled_net"), seed=0)
    assert type(net).__name__ == "PyTorchMNISTNet"
    assert not any("_orig_mod" in key for key in net.state_dict())
    assert net(torch.rand(2, 1, 8, 8)).shape == (2, 10)


def test_a_compiled_submodule_is_replaced_by_its_module():
    from depl_fl.task.compiled_modules import eager

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.compile(torch.nn.Conv2d(4, 4, 3)))
    assert list(eager(net).state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_a_prune_masked_layer_keeps_its_entries_whole():
    """``weight_orig`` and ``weight_mask`` travel whole, the layer's output channels too: conv2 reads all."""
    shapes = network_layout(_geo("mask_pruned_net")).sub_shapes(0.5)
    assert shapes["conv1.weight_orig"] == shapes["conv1.weight_mask"] == (16, 1, 3, 3)
    assert shapes["conv2.weight"] == (12, 16, 3, 3)


# --- DepL rounds in process: a compressed and a full round, bytes as modelled ---


@pytest.mark.parametrize("name", ["pytorch_mnist_net", "group_norm_resnet", "compiled_net",
                                  "mask_pruned_net"])
def test_a_compressed_and_a_full_round_train_with_bytes_as_modelled(name):
    check_compressed_and_full_round(f"{MODULE}:{name}")


@pytest.mark.parametrize("name", ["functional_conv_net", "glu_net"])
def test_a_network_refused_compressed_trains_whole(name):
    """``model.compressions=[0]``: the full variant passes the Check, a local update trains every weight."""
    from depl_fl.task.local_update import local_update
    from depl_fl.task.models import get_state

    geo = _geo(name)
    check_variants(geo, network_layout(geo), (0.0,))
    full = get_state(full_network(geo, seed=0))
    rng = np.random.default_rng(0)
    x, y = rng.random((24, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 24)
    result = local_update(full, geo, 0.0, x, y, epochs=1, lr=0.05, batch_size=8, seed=0)
    assert np.isfinite(result.train_loss) and result.kept_state.keys() == full.keys()
    assert all(not np.array_equal(result.kept_state[k], full[k]) for k in full)


# --- refused in one line, exit status 2 ---


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_network_fails_in_one_line(name):
    geo = _geo(name)
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, network_layout(geo), (0.0, 0.5))
    assert "\n" not in str(err.value) and REFUSED[name] in str(err.value)


def test_a_prune_mask_on_every_group_names_its_remedy():
    """A network whose only prunable channels meet a prune mask is refused with prune.remove as the remedy."""
    from torch import nn
    from torch.nn.utils import prune

    from depl_fl.task.subnets import UserNetwork

    def build() -> nn.Module:
        net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(8, 10))
        prune.random_unstructured(net[0], name="weight", amount=0.5)
        return net

    net = UserNetwork(build, (1, 8, 8), "masked")
    with pytest.raises(ScenarioError, match=r"layer '0' has a torch.nn.utils.prune mask .*"
                                            r"torch.nn.utils.prune.remove\(module, 'weight'\)"):
        check_variants(net, network_layout(net), (0.0, 0.5))


@pytest.mark.parametrize("name", ["scripted_block_net", "scripted_net", "eca_net"])
def test_a_refused_network_exits_2_before_the_first_round(name, tmp_path):
    lines, _ = refused_job(f"{MODULE}:{name}", [], tmp_path)
    assert len(lines) == 1 and REFUSED[name] in lines[0]
