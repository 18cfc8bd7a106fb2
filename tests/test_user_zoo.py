"""A zoo of networks users bring: each trains DepL rounds or is refused before training in one line.

Every network (``tests/user_nets.py``, 8x8 digits, one channel) goes through the
derivation and the Check step; one that works (some with a group kept whole
because the forward breaks once it loses channels) trains a compressed and a
full round in process with measured bytes equal to the modelled ones; one
that is refused exits 2 with one line naming the layer or the reason.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.subnets import build_skeleton, check_variants, network_layout
from tests.refused_job import refused_job
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)
from tests.zoo_checks import check_derived_variants

#: Working networks: the roots of their compressed groups (the rest is kept whole, see each comment).
WORKING = {
    "convnext_net": ("stem", "blocks.0.up", "blocks.1.up"),                 # layer scale sliced with stem
    "mobilenet_v3_tiny": ("stem.0", "blocks.0.expand.0", "blocks.0.se.reduce", "blocks.1.expand.0",
                          "blocks.1.se.reduce", "blocks.1.project.0", "head.0"),
    "efficientnet_tiny": ("stem.0", "blocks.0.expand.0", "blocks.0.se_reduce", "blocks.1.expand.0",
                          "blocks.1.se_reduce", "head.0"),
    "cls_token_vit": ("encoder.layers.0.linear1", "encoder.layers.1.linear1"),   # embedding whole
    "separate_qkv_vit": ("mlp.0.0", "mlp.1.0"),                                  # embedding, q/k/v whole
    "mixer_net": ("blocks.0.token_up", "blocks.0.channel_up", "blocks.1.token_up",
                  "blocks.1.channel_up"),                                        # token axis, stream whole
    "unet_tiny": ("enc1.0", "enc2.0", "up", "dec.0"),
    "spatial_attention_net": ("conv2",),             # conv1 whole: its 1-channel attention map is coupled
    "token_linear_net": ("conv", "token_mlp"),
    "loop_tied_net": ("inp", "blocks.0.0", "blocks.1.0", "blocks.2.0"),          # the tied layer: stream
    "channel_buffer_net": ("conv1", "conv2"),                                    # the buffer sliced
    "conv_lstm_net": ("conv", "lstm"),                        # the LSTM's input columns and hidden size
    "row_lstm": ("rnn",),                                     # the hidden size alone: the rows are pixels
    "row_gru": ("rnn",),
    "detach_net": ("conv1", "conv2"),
    "detached_layer_net": ("conv2",),                # conv1's output leaves the graph: conv1 whole
    "no_grad_layer_net": ("conv2",),                 # the frozen no_grad layer and the one before whole
    "inplace_net": ("features.0", "features.4", "classifier.2"),
    "shaped_scale_net": ("conv1", "conv2"),                                      # [1, C, 1, 1], [C, 1, 1]
    "gated_net": ("conv2",),                         # the conv split by chunk (GLU) whole
    "split_net": ("branch.0",),                      # the stem split in halves whole
    "tracked_instance_norm_net": ("conv", "conv2"),  # the running statistics follow the channels
    "counting_net": ("conv",),                       # a buffer updated in place, traced as a constant
    "quickstart_net_8": ("conv1", "fc1"),            # conv2 whole: x.view(-1, 16 * 2 * 2) after it
    "channel_shuffle_net": ("stem",),                # the shuffled channels whole
    "mixer_net_square": ("blocks.0.token_up", "blocks.0.channel_up", "blocks.1.token_up",
                         "blocks.1.channel_up"),     # the patch width whole: it equals the token count
    "aux_head_net": ("conv",),                       # (logits, aux_logits) in training: both heads whole
    "parameter_matmul_net": ("inp",),                # the bare weight's rows follow (`@` on a bare parameter)
}


def _geo(name: str) -> TaskGeometry:
    return TaskGeometry(f"tests.user_nets:{name}", 10, 1, 8)


@pytest.mark.parametrize("name", list(WORKING))
def test_variants_are_derived_and_pass_the_check(name):
    check_derived_variants(_geo(name), WORKING[name])


def test_a_layer_scale_is_sliced_with_its_channels():
    layout = network_layout(_geo("convnext_net"))
    shapes = layout.sub_shapes(0.5)
    assert shapes["blocks.0.gamma"] == shapes["blocks.1.gamma"] == (8,) == shapes["stem.bias"]
    owners = {(ax.entry, ax.dim): ax.owner for ax in layout.axes}
    np.testing.assert_array_equal(owners[("blocks.0.gamma", 0)], owners[("stem.weight", 0)])


def test_instance_norm_running_statistics_follow_the_channels():
    geo = _geo("tracked_instance_norm_net")
    shapes = network_layout(geo).sub_shapes(0.5)
    assert shapes["norm.running_mean"] == shapes["norm.running_var"] == shapes["norm.weight"] == (8,)
    small = build_skeleton(geo, 0.5)
    assert small.norm.running_mean.shape == (8,) and small.norm.num_features == 8


def test_broadcast_shaped_per_channel_parameters_are_sliced():
    shapes = network_layout(_geo("shaped_scale_net")).sub_shapes(0.5)
    assert shapes["gamma"] == (1, 8, 1, 1) and shapes["beta"] == (8, 1, 1)


def test_a_per_channel_buffer_is_sliced_and_stays_a_buffer():
    geo = _geo("channel_buffer_net")
    layout = network_layout(geo)
    assert layout.sub_shapes(0.5)["scale"] == (8,)
    owners = {(ax.entry, ax.dim): ax.owner for ax in layout.axes}
    np.testing.assert_array_equal(owners[("scale", 0)], owners[("conv1.weight", 0)])
    small = build_skeleton(geo, 0.5)
    assert "scale" in dict(small.named_buffers()) and "scale" not in dict(small.named_parameters())
    assert list(small.state_dict()) == list(network_layout(geo).shapes)  # entry order unchanged


def test_the_token_axis_is_not_taken_for_the_channels():
    """An MLP-Mixer's token mixing reads the patches: the token width is compressed, never the token count."""
    layout = network_layout(_geo("mixer_net"))
    full, half = layout.shapes, layout.sub_shapes(0.5)
    assert half["blocks.0.token_up.weight"] == (16, 16) and half["blocks.0.token_down.weight"] == (16, 16)
    assert half["patch.weight"] == full["patch.weight"] and half["norm.weight"] == (24,)
    assert half["blocks.1.channel_up.weight"] == (24, 24)


def test_what_stays_whole_in_attention_networks():
    for name, whole in (("cls_token_vit", ("cls", "position", "patch.weight")),
                        ("separate_qkv_vit", ("attention.0.q.weight", "attention.1.k.weight",
                                              "attention.0.v.weight", "attention.1.out.weight"))):
        layout = network_layout(_geo(name))
        assert all(layout.sub_shapes(0.75)[k] == layout.shapes[k] for k in whole)


def test_pruned_readers_of_unusual_layers():
    """A ConvTranspose2d, an LSTM's input columns and hidden units, a layer applied twice, a bare `@` weight
    lose channels."""
    assert network_layout(_geo("unet_tiny")).sub_shapes(0.5)["up.weight"] == (12, 6, 2, 2)
    assert network_layout(_geo("conv_lstm_net")).sub_shapes(0.5)["lstm.weight_ih_l0"] == (48, 32)
    assert network_layout(_geo("conv_lstm_net")).sub_shapes(0.5)["lstm.weight_hh_l0"] == (48, 12)
    assert network_layout(_geo("row_lstm")).sub_shapes(0.5)["head.weight"] == (10, 12)
    assert network_layout(_geo("loop_tied_net")).sub_shapes(0.5)["tied.weight"] == (16, 16)
    assert network_layout(_geo("token_linear_net")).sub_shapes(0.5)["token_mlp.weight"] == (16, 8)
    assert network_layout(_geo("parameter_matmul_net")).sub_shapes(0.5)["weight"] == (16, 24)


@pytest.mark.parametrize("name", list(WORKING))
def test_a_compressed_and_a_full_round_train_with_bytes_as_modelled(name):
    from tests.test_byom_rounds import N, _run

    _, _, docs, strategy, _, init, result = _run(
        name, model=["model=custom", f"model.factory=tests.user_nets:{name}"])
    from strategies.depl_strategy import arrays_to_state

    records = strategy.controller.records
    assert [r["model"] for r in records] == ["p50", "full"]
    assert all(r["replied"] == ["c0", "c1", "c2"] and not r["rejected"] for r in records)
    assert all(np.isfinite(r["loss"]) for r in records)
    sizes = {d["id"]: int(d["size_bytes"]) for d in docs}
    assert sizes["p50"] < sizes["full"]
    for rec in records:
        assert rec["bytes_down"] == rec["modelled_bytes_down"] == sizes[rec["model"]] * N
        assert rec["bytes_up"] == rec["modelled_bytes_up"] == sizes[rec["model"]] * N
    final = arrays_to_state(result.arrays)
    assert set(final) == set(init)
    assert any(not np.array_equal(final[k], init[k]) for k in init if init[k].dtype.kind == "f")
    if name == "channel_buffer_net":  # a fixed buffer is carried, never trained
        np.testing.assert_array_equal(final["scale"], init["scale"])


#: Refused networks: the reason each one-line refusal names.
REFUSED = {
    "row_projected_lstm": "no layer's output channels can be pruned",  # a projected hidden size: whole
    "non_persistent_buffer_net": "the forward breaks once layer 'conv1' loses output channels",
    "transpose_tied_net": "the forward breaks once layer 'enc' loses output channels",
    "shared_weight_net": "model tests.user_nets:shared_weight_net: a.weight and b.weight are one parameter",
    "fixed_width_net": "logits of shape (batch, 10) for the dataset's 10 classes, got (1, 3)",
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_network_fails_the_check_in_one_line(name):
    geo = _geo(name)
    with pytest.raises(ScenarioError) as err:  # the layout itself refuses some (a wrong output, a tie)
        check_variants(geo, network_layout(geo), (0.0, 0.5))
    assert "\n" not in str(err.value) and REFUSED[name] in str(err.value)


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_network_exits_2_before_the_first_round(name, tmp_path):
    lines, _ = refused_job(f"tests.user_nets:{name}", [], tmp_path)
    assert len(lines) == 1 and REFUSED[name] in lines[0]


def test_batch_norm_never_trains_on_a_single_sample_batch():
    """A BatchNorm1d network trains on ``k * batch_size + 1`` samples (the last one folded in)."""
    from depl_fl.task.training import batch_starts, train_local
    from tests.user_nets import inplace_net

    assert batch_starts(33, 32, fold_single=True) == [(0, 33)]
    assert batch_starts(33, 32, fold_single=False) == [(0, 32), (32, 33)]
    assert batch_starts(66, 32, fold_single=True) == [(0, 32), (32, 64), (64, 66)]
    rng = np.random.default_rng(0)
    x, y = rng.random((33, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 33)
    loss, _ = train_local(inplace_net(), x, y, epochs=1, lr=0.05, batch_size=32, seed=0)
    assert np.isfinite(loss)
    with pytest.raises(ValueError, match="more than 1 value per channel"):  # what the folding avoids
        net = inplace_net().train()
        net(torch.as_tensor(x[:1]))


def test_a_batch_norm_over_feature_maps_keeps_its_batches():
    """Only a BatchNorm that sees one value per channel folds the last sample in; others train as before."""
    from depl_fl.task.training import one_sample_breaks_batch_norm, train_local
    from tests.user_nets import inplace_net

    x = torch.as_tensor(np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32))
    over_maps = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 10))
    assert one_sample_breaks_batch_norm(inplace_net(), x)
    assert not one_sample_breaks_batch_norm(over_maps, x)
    before = over_maps[1].running_mean.clone()
    one_sample_breaks_batch_norm(over_maps.train(), x)
    assert torch.equal(over_maps[1].running_mean, before) and over_maps.training
    rng = np.random.default_rng(1)
    xs, ys = rng.random((33, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 33)
    for net, expected in ((over_maps, [32, 1]), (inplace_net(), [33])):  # training steps, not the probe
        sizes: list[int] = []
        first = next(m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
        hook = first.register_forward_pre_hook(
            lambda _m, inp, seen=sizes: seen.append(len(inp[0])) if torch.is_grad_enabled() else None)
        train_local(net, xs, ys, epochs=1, lr=0.05, batch_size=32, seed=0)
        hook.remove()
        assert sizes == expected
