"""A second zoo of networks users bring (``tests/user_nets_more.py``): derived, sliced, trained, or refused.

Grouped by what they protect: the derivation (deterministic, checked), the
slicing (extract then scatter is exact), the client's local update (a p50 and
a full one), the rules for layers torch-pruning mis-handles (a PReLU of one
parameter, a depthwise convolution with a channel multiplier, frozen layers,
reparametrized weights), the factory signatures DepL accepts, and the jobs
that refuse in one line with exit status 2 before the first round.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.factory import build_network
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.local_update import local_update
from depl_fl.task.models import get_state
from depl_fl.task.slicing import extract, scatter
from depl_fl.task.subnets import (
    build_skeleton,
    check_variants,
    derive_layout,
    example_batch,
    full_network,
    network_layout,
)
from tests.refused_job import refused_job
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)
from tests.zoo_checks import check_rounds_as_modelled

MODULE = "tests.user_nets_more"

#: Working networks: the roots of their compressed groups (what is kept whole, see each comment).
WORKING = {
    "vgg_net": ("features.0", "features.3", "features.7", "features.10", "classifier.2", "classifier.5"),
    "densenet_tiny": ("stem", "block1.0.conv1", "block1.0.conv2", "block1.1.conv1", "block1.1.conv2",
                      "block1.2.conv1", "block1.2.conv2", "trans.2", "block2.0.conv1", "block2.0.conv2",
                      "block2.1.conv1", "block2.1.conv2"),
    "squeezenet_tiny": ("features.0", "features.2.squeeze", "features.2.expand1x1", "features.2.expand3x3",
                        "features.3.squeeze", "features.3.expand1x1", "features.3.expand3x3",
                        "features.5.squeeze", "features.5.expand1x1", "features.5.expand3x3"),
    "inception_net": ("stem.0", "inc1.b1.0", "inc1.b2.0.0", "inc1.b2.1.0", "inc1.b3.0.0", "inc1.b3.1.0",
                      "inc1.b3.2.0", "inc1.b4.1.0", "inc2.b1.0", "inc2.b2.0.0", "inc2.b2.1.0", "inc2.b3.0.0",
                      "inc2.b3.1.0", "inc2.b3.2.0", "inc2.b4.1.0"),
    "activation_mix_net": ("c1", "c2", "c3", "c4", "fc1", "fc2"),
    "padding_net": ("c1", "c2", "c3", "c4"),
    "instance_norm_net": ("c1", "c2"),
    "fpn_net": ("c1", "c2", "c3", "lat1", "smooth"),
    "pixel_conv1d_net": ("c1", "c2"),
    "module_dict_net": ("blocks.stem.0", "blocks.body.0", "blocks.neck.0"),
    "frozen_stem_net": ("c2",),                       # the frozen stem whole (not even traced)
    "frozen_middle_net": ("c3",),                     # the frozen layer's inputs and outputs whole
    "bottleneck_net": ("stem.0", "layer1.conv1", "layer1.conv2", "layer1.conv3", "layer2.conv1",
                       "layer2.conv2", "layer2.conv3"),
    "batch_norm_variants_net": ("c1", "c2", "fc"),
    "depth_multiplier_net": ("pw",),                  # the multiplier conv's inputs and outputs whole
    "pixel_shuffle_net": ("c1", "c3"),                # the conv before the PixelShuffle whole
    "log_softmax_net": ("c1", "c2"),
    "actnorm_net": ("c1", "c2"),                      # ActNorm's [1, C, 1, 1] shift and scale sliced
    "sequential_cnn": ("0", "3", "6"),
    "partial_weight_norm_net": ("c2", "c3"),          # the weight-normed stem's inputs and outputs whole
    "partial_spectral_norm_net": ("c1",),             # the spectral-normed conv's inputs and outputs whole
}
#: The per-sample loss a network is trained with (cross-entropy when absent).
LOSSES = {"log_softmax_net": f"{MODULE}:nll_loss"}
#: Networks whose every group meets a reparametrized weight: trained whole, refused when compressed.
REPARAMETRIZED = {"weight_norm_net": "c1", "spectral_norm_net": "c2", "legacy_weight_norm_net": "c2"}
#: Networks with a reparametrized layer beside others: that layer's channels whole, the rest compressed.
PARTLY_REPARAMETRIZED = {"partial_weight_norm_net": "c1", "partial_spectral_norm_net": "c3"}


def _geo(name: str) -> TaskGeometry:
    return TaskGeometry(f"{MODULE}:{name}", 10, 1, 8)


def _state(geo: TaskGeometry, seed: int) -> dict[str, np.ndarray]:
    """A full state whose per-channel vectors and BatchNorm statistics are not their initial constants."""
    rng = np.random.default_rng(seed)
    state = get_state(full_network(geo, seed=seed))
    for name, arr in state.items():
        if name.endswith("running_var"):
            state[name] = rng.uniform(0.5, 2.0, size=arr.shape).astype(arr.dtype)
        elif name.endswith("num_batches_tracked"):
            state[name] = np.array(7, dtype=arr.dtype)
        elif arr.dtype.kind == "f" and arr.ndim == 1:
            state[name] = rng.normal(size=arr.shape).astype(arr.dtype)
    return state


# --- derivation: deterministic, and every variant is the silenced network ---


@pytest.mark.parametrize("name", list(WORKING))
def test_variants_are_derived_deterministically_and_pass_the_check(name):
    geo = _geo(name)
    layout = network_layout(geo)
    assert tuple(g.root for g in layout.groups) == WORKING[name]
    check_variants(geo, layout, (0.0, 0.3, 0.5, 0.75, 0.9))  # raises unless each is the silenced network
    again = derive_layout(full_network(geo, seed=3), example_batch((1, 8, 8)))  # another build, other weights
    assert again.groups == layout.groups and again.shapes == layout.shapes
    assert [(a.entry, a.dim) for a in again.axes] == [(a.entry, a.dim) for a in layout.axes]
    for a, b in zip(again.axes, layout.axes, strict=True):
        np.testing.assert_array_equal(a.owner, b.owner)
    state = _state(geo, seed=1)
    for a, b in zip(layout.keep_sets(state, 0.5), layout.keep_sets(dict(state), 0.5), strict=True):
        np.testing.assert_array_equal(a, b)
    sizes = [layout.size_bytes(c) for c in (0.0, 0.5, 0.75)]
    assert sizes[0] > sizes[1] > sizes[2]
    for compression in (0.5, 0.75):
        got = {k: tuple(v.shape) for k, v in build_skeleton(geo, compression).state_dict().items()}
        assert got == layout.sub_shapes(compression)


# --- slicing: extract then scatter is exact ---


@pytest.mark.parametrize("name", list(WORKING))
def test_extract_then_scatter_restores_the_state_exactly(name):
    geo = _geo(name)
    layout = network_layout(geo)
    full = _state(geo, seed=2)
    structure = layout.structure(full, 0.5)
    sub = extract(full, structure)
    assert {k: v.shape for k, v in sub.items()} == layout.sub_shapes(0.5)
    restored = scatter(full, sub, structure)
    for key, arr in full.items():
        assert restored[key].dtype == arr.dtype
        np.testing.assert_array_equal(restored[key], arr)
    onto_zeros = scatter({k: np.zeros_like(v) for k, v in full.items()}, sub, structure)
    assert any(not np.array_equal(onto_zeros[k], full[k]) for k in full)  # the dropped coordinates stay 0


# --- the client's local update: a p50 and a full one ---


@pytest.mark.parametrize("name", list(WORKING))
def test_a_p50_and_a_full_local_update_train_the_variants_entries(name):
    geo = _geo(name)
    layout = network_layout(geo)
    full = _state(geo, seed=4)
    rng = np.random.default_rng(0)
    x, y = rng.random((24, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 24)
    frozen = {k for k, p in full_network(geo).named_parameters() if not p.requires_grad}
    for compression in (0.5, 0.0):
        sub = extract(full, layout.structure(full, compression))
        result = local_update(sub, geo, compression, x, y, epochs=1, lr=0.05, batch_size=8, seed=0,
                              loss=LOSSES.get(name))
        assert {k: v.shape for k, v in result.kept_state.items()} == {k: v.shape for k, v in sub.items()}
        assert np.isfinite(result.train_loss)
        trained = [k for k in sub if sub[k].dtype.kind == "f" and k not in frozen]
        assert any(not np.array_equal(result.kept_state[k], sub[k]) for k in trained)
        for key in frozen:  # a frozen parameter never trains, in any variant
            np.testing.assert_array_equal(result.kept_state[key], sub[key])


# --- layers torch-pruning mis-handles ---


def test_a_prelu_of_one_parameter_does_not_hide_a_per_channel_one():
    """One probe per layer kind: a shared PReLU (1 parameter) and a per-unit PReLU are probed apart."""
    shapes = network_layout(_geo("activation_mix_net")).sub_shapes(0.5)
    assert shapes["a1.weight"] == (1,)
    assert shapes["a5.weight"] == shapes["fc1.bias"] == (16,)


def test_a_depth_multiplier_conv_keeps_its_channels_whole():
    full = network_layout(_geo("depth_multiplier_net")).shapes
    shapes = network_layout(_geo("depth_multiplier_net")).sub_shapes(0.5)
    for key in ("stem.weight", "dw.weight", "dw.bias"):
        assert shapes[key] == full[key]
    assert shapes["pw.weight"] == (16, 24, 1, 1)


def test_a_frozen_layer_keeps_its_channels_and_stays_frozen():
    geo = _geo("frozen_middle_net")
    layout = network_layout(geo)
    shapes = layout.sub_shapes(0.75)
    for key in ("c1.weight", "frozen.weight", "frozen.bias"):
        assert shapes[key] == layout.shapes[key]
    flags = {k: p.requires_grad for k, p in build_skeleton(geo, 0.75).named_parameters()}
    assert flags == {k: p.requires_grad for k, p in full_network(geo).named_parameters()}
    assert not flags["frozen.weight"] and flags["c3.weight"]


@pytest.mark.parametrize("name", list(PARTLY_REPARAMETRIZED))
def test_a_reparametrized_layer_keeps_its_channels_whole_and_the_others_compress(name):
    geo = _geo(name)
    layer = PARTLY_REPARAMETRIZED[name]
    layout = network_layout(geo)
    check_variants(geo, layout, (0.0, 0.5, 0.75))  # raises when a variant is not the silenced network
    assert layout.size_bytes(0.75) < layout.size_bytes(0.5) < layout.size_bytes(0.0)
    own = [k for k in layout.shapes if k.startswith(f"{layer}.")]
    assert len(own) >= 2 and all(layout.sub_shapes(0.75)[k] == layout.shapes[k] for k in own)
    full = _state(geo, seed=5)
    structure = layout.structure(full, 0.5)
    sub = extract(full, structure)
    rng = np.random.default_rng(1)
    x, y = rng.random((16, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 16)
    result = local_update(sub, geo, 0.5, x, y, epochs=1, lr=0.05, batch_size=8, seed=0)
    assert np.isfinite(result.train_loss)
    trained = result.kept_state
    assert {k: v.shape for k, v in trained.items()} == {k: v.shape for k, v in sub.items()}
    assert any(not np.array_equal(trained[k], sub[k]) for k in own if sub[k].dtype.kind == "f")


@pytest.mark.parametrize("name", list(REPARAMETRIZED))
def test_a_reparametrized_weight_every_group_meets_trains_whole_and_is_refused_compressed(name):
    geo = _geo(name)
    layout = network_layout(geo)
    assert layout.groups == ()
    check_variants(geo, layout, (0.0,))  # the full network alone is fine
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, layout, (0.0, 0.5))
    assert "\n" not in str(err.value)
    assert f"layer {REPARAMETRIZED[name]!r} has a reparametrized weight" in str(err.value)
    full = _state(geo, seed=5)
    rng = np.random.default_rng(1)
    x, y = rng.random((16, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 16)
    result = local_update(full, geo, 0.0, x, y, epochs=1, lr=0.05, batch_size=8, seed=0)
    assert set(result.kept_state) == set(full) and np.isfinite(result.train_loss)


def test_batch_norm_without_running_statistics_or_affine_is_sliced():
    layout = network_layout(_geo("batch_norm_variants_net"))
    shapes = layout.sub_shapes(0.5)
    assert shapes["bn1.weight"] == (8,) and "bn1.running_mean" not in shapes  # no statistics
    assert shapes["bn2.running_mean"] == (12,) and "bn2.weight" not in shapes
    assert shapes["bn3.running_var"] == shapes["bn3.weight"] == (16,)


def test_a_bool_flag_buffer_comes_back_as_bool_and_a_counter_as_an_integer():
    from depl_fl.orchestration.reply_checks import check_update

    kinds = {"n1.initialized": "bool", "n1.steps": "int64"}
    shapes = {"n1.initialized": (), "n1.steps": ()}
    ok = {"n1.initialized": np.array(True), "n1.steps": np.array(3, dtype=np.int64)}
    assert check_update(ok, {"num-examples": 4}, shapes, kinds) == []
    swapped = {"n1.initialized": np.array(1, dtype=np.int64), "n1.steps": np.array(True)}
    problems = check_update(swapped, {"num-examples": 4}, shapes, kinds)
    assert problems == ["n1.initialized has dtype int64, expected a bool buffer",
                        "n1.steps has dtype bool, expected an integer buffer"]


def test_a_negative_log_likelihood_is_checked_on_the_networks_own_log_probabilities():
    from depl_fl.task.losses import PROBE_SAMPLES, check_loss
    from depl_fl.task.subnets import probe_outputs

    outputs = probe_outputs(_geo("log_softmax_net"), PROBE_SAMPLES)
    assert outputs.shape == (PROBE_SAMPLES, 10) and bool((outputs <= 0).all())
    check_loss(LOSSES["log_softmax_net"], 10, _geo("log_softmax_net"))  # >= 0 on log-probabilities
    with pytest.raises(ScenarioError, match="negative or non-finite"):  # not on arbitrary numbers
        check_loss(LOSSES["log_softmax_net"], 10)


def test_a_dropout_network_trains_reproducibly_from_the_updates_seed():
    """Dropout draws from torch's global generator: seeded per update, restored after it."""
    from depl_fl.task.training import train_local

    rng = np.random.default_rng(0)
    x, y = rng.random((24, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 24)
    runs = []
    for draws in (0, 5):  # another history of the global generator before the update
        torch.manual_seed(123)
        torch.rand(draws)
        net = full_network(_geo("vgg_net"), seed=0)
        loss, _ = train_local(net, x, y, epochs=1, lr=0.05, batch_size=8, seed=7)
        runs.append((loss, get_state(net)))
        assert torch.rand(1).item() == (torch.manual_seed(123), torch.rand(draws + 1))[1][-1].item()
    assert runs[0][0] == runs[1][0]
    for key, arr in runs[0][1].items():
        np.testing.assert_array_equal(arr, runs[1][1][key])


# --- DepL rounds in process: a compressed and a full round, bytes as modelled ---


@pytest.mark.parametrize("name", ["actnorm_net", "frozen_middle_net", "log_softmax_net"])
def test_a_compressed_and_a_full_round_train_with_bytes_as_modelled(name):
    from strategies.depl_strategy import arrays_to_state
    from tests.test_byom_rounds import N, _run

    loss = [f"model.loss={LOSSES[name]}"] if name in LOSSES else []
    _, _, docs, strategy, _, init, result = _run(
        name, model=["model=custom", f"model.factory={MODULE}:{name}", *loss])
    records = strategy.controller.records
    assert [r["model"] for r in records] == ["p50", "full"]
    assert all(r["replied"] == ["c0", "c1", "c2"] and not r["rejected"] for r in records)
    check_rounds_as_modelled(records, docs, N)
    final = arrays_to_state(result.arrays)
    assert set(final) == set(init)
    if name == "actnorm_net":  # the flags and counters come back and are merged, never averaged
        assert final["n1.initialized"].dtype == np.bool_ and bool(final["n1.initialized"])
        assert final["n1.steps"].dtype == np.int64 and int(final["n1.steps"]) > 0
    if name == "frozen_middle_net":
        np.testing.assert_array_equal(final["frozen.weight"], init["frozen.weight"])


# --- factory signatures ---

#: Accepted: the factory gets the arguments its signature names.
ACCEPTED = {"classes_only": "VGGNet", "keyword_factory": "ModuleDictNet", "with_extra_defaults": "Sequential",
            "other_names": "VGGNet", "VGGNet": "VGGNet", "sequential_cnn": "Sequential",
            "positional_only": "VGGNet"}
#: Refused in one line: what the line says.
REFUSED_FACTORIES = {
    "needs_width": "its parameter 'width' has no default, but DepL passes only num_classes=10, in_channels=1",
    "positional_other_name": "its positional-only parameter 'classes' has no default and is not one of "
                             "num_classes, in_channels",
    "raising_factory": "failed: RuntimeError: weights file not found",
    "not_a_module": "returned dict, not a torch nn.Module",
    "module_instance": "is an nn.Module instance (VGGNet), not a factory",
    "NOT_CALLABLE": "NOT_CALLABLE is not callable",
    "missing_attr": "has no attribute missing_attr",
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_a_factory_gets_the_arguments_its_signature_names(name):
    net = build_network(f"{MODULE}:{name}", 10, 1, 8, seed=0)
    assert type(net).__name__ == ACCEPTED[name]
    assert net(example_batch((1, 8, 8), batch=2)).shape == (2, 10)


def test_positional_only_parameters_get_their_arguments_by_position():
    net = build_network(f"{MODULE}:positional_only", 7, 3, 8, seed=0)  # def f(num_classes, in_channels, /)
    assert net(example_batch((3, 8, 8), batch=2)).shape == (2, 7)


@pytest.mark.parametrize("name", list(REFUSED_FACTORIES))
def test_a_bad_factory_is_refused_in_one_line(name):
    with pytest.raises(ScenarioError) as err:
        build_network(f"{MODULE}:{name}", 10, 1, 8, seed=0)
    assert "\n" not in str(err.value) and REFUSED_FACTORIES[name] in str(err.value)


def test_a_module_that_does_not_import_is_refused_in_one_line():
    with pytest.raises(ScenarioError, match=r"cannot import tests\.no_such_module \(ModuleNotFoundError"):
        build_network("tests.no_such_module:net", 10, 1, 8)


# --- jobs: refused before the first round, one line, exit 2 ---


@pytest.mark.parametrize("name, overrides, message", [
    ("needs_width", [], "its parameter 'width' has no default"),
    ("spectral_norm_net", [], "layer 'c2' has a reparametrized weight"),
    ("vgg_net", ["model.compressions=[0,1.5]"], "model.compressions"),
])
def test_a_refused_job_exits_2_in_one_line_before_the_first_round(name, overrides, message, tmp_path):
    lines, stderr = refused_job(f"{MODULE}:{name}", overrides, tmp_path)
    assert len(lines) == 1 and message in lines[0], stderr[-2000:]


# --- the Python API: the same networks as a user's own Flower app gives them ---


@pytest.mark.parametrize("cls, roots", [("DepthMultiplierNet", ("pw",)), ("FrozenMiddleNet", ("c3",)),
                                        ("DenseNetTiny", WORKING["densenet_tiny"])])
def test_a_user_network_class_derives_the_same_variants(cls, roots):
    import tests.user_nets_more as nets
    from depl_fl.task.subnets import UserNetwork

    net = UserNetwork(getattr(nets, cls), (1, 8, 8), cls)
    layout = network_layout(net)
    assert tuple(g.root for g in layout.groups) == roots
    check_variants(net, layout, (0.0, 0.5, 0.75))


def test_a_reparametrized_user_network_is_refused_compressed_in_one_line():
    import tests.user_nets_more as nets
    from depl_fl.task.subnets import UserNetwork

    net = UserNetwork(nets.SpectralNormNet, (1, 8, 8), "SpectralNormNet")
    with pytest.raises(ScenarioError, match="layer 'c2' has a reparametrized weight") as err:
        check_variants(net, network_layout(net), (0.0, 0.5))
    assert "\n" not in str(err.value)
