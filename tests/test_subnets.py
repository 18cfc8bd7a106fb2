"""Variants of any network: slicing and scattering are exact, sub-networks are the silenced network.

Networks a user brings (tests/user_nets.py: ResNet- and MobileNetV2-style with
BatchNorm and residual adds, a concatenation, a plain MLP) and the built-in ones
go through torch-pruning's dependency graph (depl_fl.task.subnets).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.models import get_state, set_state
from depl_fl.task.slicing import aggregate, extract, kept_width, npy_bytes, scatter, silence
from depl_fl.task.subnets import (
    UserNetwork,
    build_skeleton,
    check_variants,
    derive_layout,
    example_batch,
    full_network,
    network_layout,
    without_channel_statistics,
)
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)

ROOT = Path(__file__).resolve().parent.parent
NETS = {
    "resnet": TaskGeometry("tests.user_nets:resnet_tiny", 10, 3, 16),
    "mobilenet_v2": TaskGeometry("tests.user_nets:mobilenet_v2_tiny", 10, 3, 16),
    "mlp": TaskGeometry("tests.user_nets:mlp", 10, 1, 8),
    "concat": TaskGeometry("tests.user_nets:concat_net", 10, 1, 8),
    "group_norm": TaskGeometry("tests.user_nets:group_norm_net", 10, 1, 8),
    "channels_last": TaskGeometry("tests.user_nets:channels_last_net", 10, 1, 8),
    "lazy_mlp": TaskGeometry("tests.user_nets:lazy_mlp", 10, 1, 8),
    "per_channel": TaskGeometry("tests.user_nets:per_channel_net", 10, 1, 8),
    "resnext": TaskGeometry("tests.user_nets:resnext_net", 10, 1, 8),
    "vit": TaskGeometry("tests.user_nets:vit_net", 10, 1, 8),
    "vit_seq_first": TaskGeometry("tests.user_nets:vit_net_seq_first", 10, 1, 8),
    "hand_attention": TaskGeometry("tests.user_nets:hand_attention_net", 10, 1, 8),
    "sdpa_attention": TaskGeometry("tests.user_nets:sdpa_attention_net", 10, 1, 8),
    "digits_cnn": TaskGeometry("digits_cnn", 10, 1, 8),
    "mobilenet_like": TaskGeometry("mobilenet_like", 10, 3, 32),
}


def _trained_like(geo: TaskGeometry, seed: int) -> dict[str, np.ndarray]:
    """A full state with non-trivial BatchNorm statistics (as after training)."""
    net = full_network(geo, seed=seed)
    rng = np.random.default_rng(seed)
    state = get_state(net)
    for name, arr in state.items():
        if name.endswith("running_mean"):
            state[name] = rng.normal(size=arr.shape).astype(arr.dtype)
        elif name.endswith("running_var"):
            state[name] = rng.uniform(0.5, 2.0, size=arr.shape).astype(arr.dtype)
        elif name.endswith("num_batches_tracked"):
            state[name] = np.array(7, dtype=arr.dtype)
        elif name.endswith(".bias") or (name.endswith(".weight") and arr.ndim == 1):
            state[name] = rng.normal(size=arr.shape).astype(arr.dtype)
    return state


@pytest.mark.parametrize("net", list(NETS))
@pytest.mark.parametrize("compression", [0.0, 0.5, 0.75])
def test_extract_then_scatter_restores_the_full_state_exactly(net, compression):
    geo = NETS[net]
    full = _trained_like(geo, seed=1)
    structure = network_layout(geo).structure(full, compression)
    sub = extract(full, structure)
    assert {k: v.shape for k, v in sub.items()} == structure.sub_shapes()
    back = scatter({k: np.zeros_like(v) for k, v in full.items()}, sub, structure)
    restored = scatter(full, sub, structure)
    for name, arr in full.items():
        assert restored[name].dtype == arr.dtype
        np.testing.assert_array_equal(restored[name], arr)
    if compression > 0:
        assert sum(v.size for v in sub.values()) < sum(v.size for v in full.values())
        assert any(not np.array_equal(back[k], full[k]) for k in full)  # dropped coordinates stay 0


@pytest.mark.parametrize("net", list(NETS))
@pytest.mark.parametrize("compression", [0.5, 0.75])
def test_subnetwork_computes_the_full_network_with_dropped_channels_silenced(net, compression):
    geo = NETS[net]
    full = _trained_like(geo, seed=2)
    layout = network_layout(geo)
    structure = layout.structure(full, compression)
    small = build_skeleton(geo, compression)
    set_state(small, extract(full, structure))
    big = full_network(geo)
    set_state(big, silence(full, layout, structure))
    plain = full_network(geo)
    set_state(plain, full)
    x = example_batch((geo.in_channels, geo.image_size, geo.image_size), batch=4)
    # GroupNorm and LayerNorm statistics count silenced channels as zeros: compare their affine parts.
    sliced = layout.sliced_layers
    small = without_channel_statistics(small.eval(), sliced)
    big = without_channel_statistics(big.eval(), sliced)
    with torch.no_grad():
        torch.testing.assert_close(small(x), big(x), rtol=1e-4, atol=1e-5)
        assert not torch.allclose(without_channel_statistics(plain.eval(), sliced)(x), small(x), atol=1e-4)
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in plain.parameters())


@pytest.mark.parametrize("net", ["resnet", "mobilenet_v2", "concat", "vit", "hand_attention"])
def test_index_sets_are_deterministic_and_follow_the_global_weights(net):
    geo = NETS[net]
    layout = network_layout(geo)
    full = _trained_like(geo, seed=3)
    shuffled = {k: full[k].copy() for k in reversed(list(full))}
    a, b = layout.structure(full, 0.5), layout.structure(shuffled, 0.5)
    for name in a.index:
        for x, y in zip(a.index[name], b.index[name], strict=True):
            assert (x is None and y is None) or np.array_equal(x, y)
    other = layout.structure(_trained_like(geo, seed=4), 0.5)
    assert any(not np.array_equal(x, y) for x, y in zip(a.keep, other.keep, strict=True))
    # A fresh derivation (another network instance) gives the same owners.
    shape = (geo.in_channels, geo.image_size, geo.image_size)
    again = derive_layout(full_network(geo, seed=9), example_batch(shape))
    assert [(ax.entry, ax.dim) for ax in again.axes] == [(ax.entry, ax.dim) for ax in layout.axes]
    assert all(np.array_equal(p.owner, q.owner) for p, q in zip(again.axes, layout.axes, strict=True))


def test_residual_adds_tie_the_stream_channels_together():
    layout = network_layout(NETS["resnet"])
    by_entry = {(ax.entry, ax.dim): ax.owner for ax in layout.axes}
    # The stage-1 stream: the stem's output, block 0's second conv and their BatchNorms share channels.
    for name in ("bn1.weight", "layers.0.conv2.weight", "layers.0.bn2.running_mean", "layers.1.conv1.weight"):
        dim = 1 if name == "layers.1.conv1.weight" else 0
        np.testing.assert_array_equal(by_entry[(name, dim)], by_entry[("conv1.weight", 0)])
    assert ("fc.weight", 0) not in by_entry  # the output layer stays whole
    assert not any(ax.entry.endswith("num_batches_tracked") for ax in layout.axes)


def test_batchnorm_statistics_are_sliced_and_averaged_with_integer_counters_kept_integer():
    geo = NETS["resnet"]
    layout = network_layout(geo)
    full = _trained_like(geo, seed=5)
    structure = layout.structure(full, 0.5)
    sub = extract(full, structure)
    a = {k: (v + 1 if v.dtype.kind == "f" else np.array(10, v.dtype)) for k, v in sub.items()}
    b = {k: (v + 3 if v.dtype.kind == "f" else np.array(40, v.dtype)) for k, v in sub.items()}
    c = {k: (v + 5 if v.dtype.kind == "f" else np.array(99, v.dtype)) for k, v in sub.items()}
    out = aggregate(full, [(a, 1.0), (b, 1.0), (c, 2.0)], structure)
    kept = extract(out, structure)
    np.testing.assert_allclose(kept["bn1.running_mean"], sub["bn1.running_mean"] + 3.5, rtol=1e-6)
    assert out["bn1.num_batches_tracked"].dtype == np.int64
    assert int(out["bn1.num_batches_tracked"]) == 40  # lower median, never a float mean


def test_size_bytes_is_what_flower_puts_on_the_wire():
    from flwr.app import Array

    geo = NETS["resnet"]
    layout = network_layout(geo)
    full = _trained_like(geo, seed=6)
    for compression in (0.0, 0.5, 0.75):
        sub = extract(full, layout.structure(full, compression))
        wire = sum(len(Array(np.require(v, requirements="C")).data) for v in sub.values())
        assert wire == layout.size_bytes(compression) == sum(npy_bytes(v.shape, str(v.dtype))
                                                              for v in sub.values())


def test_a_hard_coded_flatten_keeps_its_layer_whole_and_compresses_the_rest():
    geo = TaskGeometry("tests.user_nets:quickstart_net", 10, 3, 32)
    layout = network_layout(geo)
    assert "conv2" not in {g.root for g in layout.groups} and "conv1" in {g.root for g in layout.groups}
    check_variants(geo, layout, (0.5,))
    assert layout.sub_shapes(0.5)["conv2.weight"][0] == 16 and layout.size_bytes(0.5) < layout.size_bytes(0.0)


def test_a_hard_coded_flatten_job_trains_compressed_with_one_warning_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "depl_fl.main", "model=custom",
         "model.factory=tests.user_nets:quickstart_net_8", "model.compressions=[0.0,0.5]",
         "num_clients=2", "simulation=inprocess", "profile.explore.rounds=2", "profile.explore.max_rounds=2",
         "profile.explore.switch_rounds=[1]", "target.max_rounds=3", "tracking.enabled=false",
         "output.plot=false", f"hydra.run.dir={tmp_path}", f"profile.cache_dir={tmp_path / 'cache'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 3), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    warned = [line for line in (proc.stdout + proc.stderr).splitlines() if "kept whole" in line]
    assert len(warned) == 1 and "layer 'conv2' kept whole" in warned[0], warned
    doc = json.loads((tmp_path / "results.json").read_text())
    sizes = {m["id"]: int(m["size_bytes"]) for m in doc["scenario"]["models"]}
    assert sizes["p50"] < sizes["full"]
    rounds = [r for r in doc["rounds"] if "bytes_down" in r]
    assert rounds and any("p50" in r["model"].split("+") for r in rounds)  # exploration: full+p50
    for r in rounds:
        assert r["bytes_down"] == r["modelled_bytes_down"] and r["bytes_up"] == r["modelled_bytes_up"]


def test_a_bad_factory_is_a_one_line_error():
    from depl_fl.task.factory import build_network

    with pytest.raises(ScenarioError, match="cannot import no_such_pkg"):
        build_network("no_such_pkg.mod:Net", 10, 1, 8)
    with pytest.raises(ScenarioError, match="has no attribute Nope"):
        build_network("tests.user_nets:Nope", 10, 1, 8)
    with pytest.raises(ScenarioError, match="expected PKG.MODULE:NAME"):
        build_network("tests.user_nets:", 10, 1, 8)
    with pytest.raises(ScenarioError, match="model=custom needs model.factory"):
        build_network("None", 10, 1, 8)  # model=custom without a factory


@pytest.mark.parametrize("backend", ["ray", "inprocess"])
@pytest.mark.parametrize("factory, message", [
    ("no_such_pkg.mod:Net", "cannot import no_such_pkg"),
    ("tests.user_nets:Nope", "has no attribute Nope"),
])
def test_a_bad_factory_is_refused_before_the_simulation_starts(monkeypatch, tmp_path, backend, factory,
                                                                message):
    import depl_fl.main as main
    import strategies.inprocess_grid as inprocess_grid
    from depl_fl.runs.runconfig import compose_config

    def started(*args, **kwargs):
        raise AssertionError("the simulation started")

    monkeypatch.setattr(main, "_start_ray", started)
    monkeypatch.setattr(inprocess_grid, "InProcessGrid", started)
    cfg = compose_config(["model=custom", f"model.factory={factory}", "num_clients=2",
                          f"simulation={backend}", f"profile.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(ScenarioError, match=message):
        main.run_job(cfg, tmp_path / "out")


def test_a_user_network_without_geometry_arguments_goes_through_the_same_path():
    from tests.user_nets import MobileNetV2Tiny

    net = UserNetwork(MobileNetV2Tiny, (3, 16, 16), "MobileNetV2Tiny")
    layout = network_layout(net)
    check_variants(net, layout, (0.5,))
    full = get_state(full_network(net, seed=0))
    sub = extract(full, layout.structure(full, 0.5))
    small = build_skeleton(net, 0.5)
    set_state(small, sub)
    assert layout.size_bytes(0.5) < layout.size_bytes(0.0)


def test_compressions_choose_the_variants():
    from depl_fl.runs.runconfig import compose_config, variant_list

    cfg = compose_config(["model=custom", "model.factory=tests.user_nets:mlp",
                          "model.compressions=[0,0.5,0.9]"])
    assert variant_list(cfg) == [("full", 0.0), ("p50", 0.5), ("p90", 0.9)]
    assert cfg["model"]["arch"] == "tests.user_nets:mlp"
    with pytest.raises(ScenarioError, match=r"model.compressions\[1\]"):
        variant_list({"model": {"compressions": [0.0, 1.0]}})


@pytest.mark.parametrize(("compression", "expected"), [(0.0, "full"), (0.25, "p25"), (0.5, "p50"),
                                                       (0.75, "p75"), (0.9, "p90"), (0.125, "p12"),
                                                       (0.333, "p33"), (0.995, "p100")])
def test_one_model_id_names_a_compression_in_the_scenario_and_the_configured_variants(compression, expected):
    from depl_fl.runs.runconfig import variant_list
    from depl_fl.task.geometry import model_id

    assert model_id(compression) == expected
    assert variant_list({"model": {"compressions": [compression]}}) == [(expected, compression)]


# ---- canaries on the torch-pruning API the derivation relies on


def test_torch_pruning_canary_groups_items_and_pruning():
    from importlib.metadata import version

    import torch_pruning as tp

    assert version("torch-pruning") == "1.6.1"  # the pin in pyproject's fl extra
    from tests.user_nets import resnet_tiny

    model = resnet_tiny(10, 3)
    x = torch.zeros(1, 3, 16, 16)
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=x, verbose=False)
    groups = list(dg.get_all_groups(ignored_layers=[model.fc],
                                    root_module_types=(torch.nn.modules.conv._ConvNd, torch.nn.Linear)))
    assert len(groups) == 4
    item = groups[0].items[0]
    assert hasattr(item, "dep") and hasattr(item, "idxs") and hasattr(item, "root_idxs")
    assert dg.is_out_channel_pruning_fn(item.dep.handler) or dg.is_in_channel_pruning_fn(item.dep.handler)
    stream = next(g for g in groups if any(it.dep.target.module is model.conv1 for it in g.items))
    handler = next(it.dep.handler for it in stream.items if it.dep.target.module is model.conv1)
    dg.get_pruning_group(model.conv1, handler, [0, 1]).prune()
    assert model.conv1.out_channels == 6 and model.bn1.num_features == 6
    assert model.layers[0].conv2.out_channels == 6 and model.layers[1].conv1.in_channels == 6
    assert model(x).shape == (1, 10)


def test_torch_pruning_canary_depthwise_and_flatten_index_mapping():
    import torch_pruning as tp

    from tests.user_nets import QuickstartNet

    model = QuickstartNet(10, 3)
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=torch.zeros(1, 3, 32, 32), verbose=False)
    group = dg.get_pruning_group(model.conv2, tp.prune_conv_out_channels, [1])
    fc1 = next(it for it in group.items if it.dep.target.module is model.fc1)
    assert list(fc1.idxs) == list(range(25, 50)) and set(fc1.root_idxs) == {1}  # channel 1 -> 25 columns
    dw = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.Conv2d(8, 8, 3, groups=8),
                             torch.nn.Conv2d(8, 4, 1))
    dg = tp.DependencyGraph().build_dependency(dw, example_inputs=torch.zeros(1, 3, 8, 8), verbose=False)
    dg.get_pruning_group(dw[0], tp.prune_conv_out_channels, [0, 5]).prune()
    assert dw[1].groups == 6 and dw[1].weight.shape == (6, 1, 3, 3) and dw[2].in_channels == 6


def test_torch_pruning_canary_attention_in_the_groups():
    """The attention rule reads the MHA module and the products' autograd nodes from the groups."""
    import torch_pruning as tp

    from tests.user_nets import hand_attention_net, vit_net

    roots = (torch.nn.modules.conv._ConvNd, torch.nn.Linear)
    model = vit_net()
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=torch.zeros(1, 1, 8, 8), verbose=False)
    groups = list(dg.get_all_groups(ignored_layers=[model.head], root_module_types=roots))
    mha = model.encoder.layers[0].self_attn
    stream = [g for g in groups if any(it.dep.target.module is mha for it in g.items)]
    assert len(stream) == 1 and any(it.dep.target.module is model.patch for it in stream[0].items)
    model = hand_attention_net()
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=torch.zeros(1, 1, 8, 8), verbose=False)
    groups = list(dg.get_all_groups(ignored_layers=[model.head], root_module_types=roots))
    qkv = next(g for g in groups if g[0].dep.target.module is model.attention.qkv)
    names = {it.dep.target.grad_fn.name() for it in qkv.items if it.dep.target.grad_fn is not None}
    assert "BmmBackward0" in names


def test_kept_widths_are_multiples_of_a_group_norms_groups():
    assert [kept_width(24, c) for c in (0.0, 0.5, 0.75)] == [24, 12, 6]
    assert [kept_width(24, c, 8) for c in (0.0, 0.5, 0.75, 0.9)] == [24, 16, 8, 8]
    assert kept_width(6, 0.5, 3) == 3 and kept_width(6, 0.4, 2) == 4


@pytest.mark.parametrize("compression", [0.5, 0.75])
def test_group_norm_variants_keep_whole_groups_and_check(compression):
    geo = NETS["group_norm"]
    layout = network_layout(geo)
    stem = next(g for g in layout.groups if g.root == "stem")
    assert stem.width == 24 and stem.multiple == 4
    small = build_skeleton(geo, compression)
    assert small.norm.num_channels == kept_width(24, compression, 4) and small.norm.num_groups == 4
    assert small.norm.num_channels == {0.5: 12, 0.75: 8}[compression]
    check_variants(geo, layout, (0.0, compression))  # raises when a variant is not the silenced network


def test_group_norm_statistics_make_the_plain_comparison_differ():
    """Without the affine reduction the silenced full network is not the sub-network (statistics)."""
    geo = NETS["group_norm"]
    full = _trained_like(geo, seed=2)
    layout = network_layout(geo)
    structure = layout.structure(full, 0.5)
    small = build_skeleton(geo, 0.5)
    set_state(small, extract(full, structure))
    big = full_network(geo)
    set_state(big, silence(full, layout, structure))
    x = example_batch((1, 8, 8), batch=4)
    with torch.no_grad():
        assert not torch.allclose(small.eval()(x), big.eval()(x), atol=1e-4)


def test_lazy_layers_are_materialised_from_the_seed():
    geo = NETS["lazy_mlp"]
    a, b, c = (get_state(full_network(geo, seed=s)) for s in (3, 3, 4))
    assert a["1.weight"].shape == (48, 64)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["1.weight"], c["1.weight"])


@pytest.mark.parametrize(("factory", "names"), [
    ("spatial_layer_norm_net", "'conv'"),        # a LayerNorm over channels and space hard-codes the count
])
def test_a_network_whose_variants_are_not_its_sub_networks_is_refused_in_one_line(factory, names):
    """Its only group breaks the forward: nothing left to compress (a channel shuffle keeps its group whole,
    see ``tests/test_kept_whole.py``)."""
    geo = TaskGeometry(f"tests.user_nets:{factory}", 10, 1, 8)
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, network_layout(geo), (0.0, 0.5))
    message = str(err.value)
    assert "\n" not in message and "cannot be pruned structurally" in message and names in message


#: Per attention network: its feed-forward layers (the only prunable groups) and entries an attention
#: reads or writes (the embedding stream), which every variant keeps whole.
ATTENTION = {
    "vit": (("encoder.layers.0.linear1", "encoder.layers.1.linear1"),
            ("patch.weight", "position", "encoder.layers.0.self_attn.in_proj_weight",
             "encoder.layers.0.self_attn.out_proj.weight", "encoder.layers.1.norm1.weight",
             "encoder.layers.1.linear2.bias", "norm.weight", "head.weight")),
    "vit_seq_first": (("encoder.layers.0.linear1", "encoder.layers.1.linear1"),
                      ("patch.weight", "encoder.layers.1.self_attn.in_proj_bias", "norm.bias")),
    "hand_attention": (("up",), ("patch.weight", "position", "norm1.weight", "attention.qkv.weight",
                                 "attention.qkv.bias", "attention.proj.weight", "down.bias", "head.weight")),
    "sdpa_attention": (("up",), ("patch.weight", "attention.qkv.weight", "attention.proj.weight")),
}


@pytest.mark.parametrize("net", list(ATTENTION))
def test_attention_keeps_the_embedding_whole_and_compresses_the_feed_forward_width(net):
    geo = NETS[net]
    ffn, whole = ATTENTION[net]
    layout = network_layout(geo)
    assert tuple(g.root for g in layout.groups) == ffn and all(g.width == 64 for g in layout.groups)
    full_shapes = layout.shapes
    sizes = [layout.size_bytes(c) for c in (0.0, 0.5, 0.75)]
    assert sizes[0] > sizes[1] > sizes[2]
    for compression, kept in ((0.5, 32), (0.75, 16)):
        shapes = layout.sub_shapes(compression)
        assert all(shapes[name] == full_shapes[name] for name in whole)
        assert all(shapes[f"{root}.weight"] == (kept, 32) for root in ffn)
        small = build_skeleton(geo, compression)
        assert all(small.get_submodule(root).out_features == kept for root in ffn)
    check_variants(geo, layout, (0.0, 0.5, 0.75))  # raises when a variant is not the silenced network


def test_a_transformer_layers_fast_path_computes_the_sub_network(monkeypatch):
    """In evaluation without gradients ``nn.TransformerEncoderLayer`` runs one fused kernel on its weights."""
    geo = NETS["vit"]
    layout = network_layout(geo)
    full = _trained_like(geo, seed=7)
    structure = layout.structure(full, 0.75)
    small = build_skeleton(geo, 0.75)
    set_state(small, extract(full, structure))
    big = full_network(geo)
    set_state(big, silence(full, layout, structure))
    fused, calls = torch._transformer_encoder_layer_fwd, []
    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd",
                        lambda *args, **kwargs: calls.append(1) or fused(*args, **kwargs))
    x = example_batch((1, 8, 8), batch=4)
    with torch.no_grad():
        fast = small.eval()(x)
    assert len(calls) == 2  # one fused kernel per encoder layer
    slow = small(x)         # gradients enabled: the layer's modules one by one
    assert len(calls) == 2
    with torch.no_grad():
        want = big.eval()(x)
    torch.testing.assert_close(fast, slow.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compression", [0.5, 0.75])
def test_a_grouped_convolution_keeps_equal_blocks_and_whole_group_norm_groups(compression):
    geo = NETS["resnext"]
    layout = network_layout(geo)
    into = next(g for g in layout.groups if g.root == "reduce.0")   # read by the grouped conv
    out = next(g for g in layout.groups if g.root == "grouped")     # written by it, through GroupNorm(8)
    assert (into.width, into.blocks, into.multiple) == (8, 4, 1)
    assert (out.width, out.blocks, out.multiple) == (8, 4, 2)
    small = build_skeleton(geo, compression)
    kept = {0.5: 16, 0.75: 8}[compression]
    assert small.grouped.groups == 4 and small.grouped.in_channels == small.reduce[0].out_channels == kept
    assert small.grouped.out_channels == small.norm.num_channels == kept and small.norm.num_groups == 8
    structure = layout.structure(_trained_like(geo, seed=1), compression)
    rows = structure.index["reduce.0.weight"][0]      # the reduce conv's kept output channels
    blocks = rows.reshape(4, -1) - 8 * np.arange(4)[:, None]
    assert np.all(blocks == blocks[0])                # the same positions in every block of 8
    check_variants(geo, layout, (0.0, compression))   # raises when a variant is not the silenced network


def test_a_network_without_prunable_channels_is_refused_in_one_line():
    geo = TaskGeometry("tests.user_nets:row_projected_lstm", 10, 1, 8)
    layout = network_layout(geo)
    assert layout.groups == ()
    check_variants(geo, layout, (0.0,))               # the full network alone is fine
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, layout, (0.0, 0.5))
    assert "\n" not in str(err.value) and "model.compressions=[0]" in str(err.value)


def test_a_network_that_cannot_take_the_datasets_input_is_refused_in_one_line():
    def too_deep() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 4, 3),
                                   torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 4, 3), torch.nn.Flatten(),
                                   torch.nn.Linear(4, 10))

    with pytest.raises(ScenarioError) as err:
        network_layout(UserNetwork(too_deep, (1, 8, 8), "too_deep"))
    message = str(err.value)
    assert "\n" not in message and "forward fails on an input of shape (1, 8, 8)" in message


def test_a_network_returning_no_logits_depl_can_read_is_refused_in_one_line():
    """A tuple's first item, a dict's "logits" or an object's .logits are read; anything else is refused."""
    class FeaturesFirst(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.head = torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.Linear(8, 10)

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            features = torch.relu(self.conv(x)).mean((2, 3))
            return {"scores": self.head(features), "features": features}

    with pytest.raises(ScenarioError) as err:
        network_layout(UserNetwork(FeaturesFirst, (1, 8, 8), "features_first"))
    message = str(err.value)
    assert "\n" not in message and "got dict" in message
    assert "the first item of a tuple or list, a dict's 'logits' or an object's .logits" in message
