"""A third zoo of networks users bring (``tests/user_nets_extra.py``): what a forward returns, more layers.

Grouped by what they protect: the logits DepL reads from a forward that
returns a tuple, a dict or an output object (:mod:`depl_fl.task.network_outputs`);
the derivation and the Check on networks with auxiliary outputs (the layers
feeding them lose their channels with the layers they read, in the training
mode an auxiliary head runs in; one that reads a hard-coded width in training
keeps its channels whole); DepL rounds in process with bytes as modelled
(``nn.Bilinear``, a bidirectional LSTM and an einsum on a bare weight among
them, :mod:`depl_fl.task.extra_pruners`); and the network refused in one line
with exit status 2 (a pruned forward that breaks inside a layer names it:
``tests/test_extra_pruners.py``).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.local_update import local_update
from depl_fl.task.models import get_state
from depl_fl.task.network_outputs import logits_of, output_tensors
from depl_fl.task.slicing import extract
from depl_fl.task.subnets import build_skeleton, check_variants, full_network, network_layout
from tests.refused_job import refused_job
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)
from tests.zoo_checks import check_compressed_and_full_round, check_derived_variants

MODULE = "tests.user_nets_extra"

#: Working networks: the roots of their compressed groups (what is kept whole, see each comment).
WORKING = {
    "dict_output_net": ("features.conv1", "features.conv2"),
    "hf_output_net": ("embed", "hidden"),
    "tuple_always_net": ("features.conv1", "features.conv2", "proj"),
    "googlenet_aux_net": ("conv1", "conv2", "conv3", "aux.1", "aux.4"),   # the aux logits' layer whole
    "domain_adversarial_net": ("features.conv1", "features.conv2", "domain.0"),
    "hard_coded_aux_net": ("conv1", "conv3"),        # conv2 whole: the aux head views it at a fixed width
    "encoder_decoder_net": ("enc1.0", "enc2.0", "dec1", "deconv", "head.0"),
    "temperature_scale_net": ("conv1", "conv2"),
    "concat_pool_net": ("conv1",),                   # conv2 whole: torch-pruning mis-maps its two pools
    "normalized_input_net": ("conv1", "conv2"),
    "checkpointed_net": ("conv1", "block.0", "block.2"),
    "layer_norm_mlp": ("inp", "fc1"),
    "ordered_dict_net": ("conv1", "conv2"),
    "dilated_pad_net": ("conv1", "conv2", "conv3"),   # per-channel PReLU sliced
    "regularized_net": ("conv1", "conv2", "fc1"),
    "unflatten_net": ("conv",),                      # stem.1 whole: nn.Unflatten views it as 16 maps
    "row_conv1d_net": ("conv1", "conv2"),
    "gray_to_rgb_net": ("conv1", "conv2"),
    "shared_block_net": ("stem", "conv"),            # the block applied twice shares the stem's channels
    "unfold_net": ("conv",),                         # patch whole: reshaped to a fixed 16-channel map
    "param_dict_scale_net": ("conv1", "conv2"),      # the ParameterDict/ParameterList vectors sliced
    "upsampled_input_net": ("conv1", "conv2"),
    "bilinear_net": ("conv", "mlp"),                 # each branch feeds one input of nn.Bilinear
    "bilstm_net": ("conv", "lstm"),                  # the LSTM's input columns follow; its hidden units too
    "einsum_net": ("conv1",),                        # the einsum's weight follows on the index it sums over
}
#: Refused networks: what the one-line refusal says.
REFUSED = {
    "rgb_only_net": "its forward fails on an input of shape (1, 8, 8) in evaluation mode (RuntimeError: "
                    "Given groups=1, weight of size [16, 3, 3, 3], expected input[1, 1, 8, 8]",
}


def _geo(name: str) -> TaskGeometry:
    return TaskGeometry(f"{MODULE}:{name}", 10, 1, 8)


# --- the logits in what a forward returns ---


def test_the_logits_are_read_from_a_tuple_a_dict_and_an_output_object():
    from tests.user_nets_extra import ClassifierOutput

    logits, other = torch.ones(2, 3), torch.zeros(2, 4)
    pair = namedtuple("Pair", ["logits", "aux"])
    for output in (logits, (logits, other), [logits, other], pair(logits, other), {"features": other,
                   "logits": logits}, ClassifierOutput(logits, other)):
        assert logits_of(output) is logits
    for unknown in ({"scores": logits}, (), (None, logits), "logits"):  # nothing DepL recognises
        assert logits_of(unknown) is unknown


def test_every_returned_tensor_is_listed_for_tracing():
    from tests.user_nets_extra import ClassifierOutput

    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    listed = output_tensors({"x": (a, [b, None]), "y": ClassifierOutput(c, None)})
    assert len(listed) == 3 and all(t is u for t, u in zip(listed, (a, b, c), strict=True))


@pytest.mark.parametrize("name", ["dict_output_net", "hf_output_net", "tuple_always_net",
                                  "googlenet_aux_net"])
def test_the_networks_a_job_builds_return_their_logits_in_both_modes(name):
    net = full_network(_geo(name), seed=0)
    for mode in (True, False):
        out = net.train(mode)(torch.rand(2, 1, 8, 8))
        assert isinstance(out, torch.Tensor) and out.shape == (2, 10)
    assert isinstance(build_skeleton(_geo(name), 0.5).train()(torch.rand(2, 1, 8, 8)), torch.Tensor)


def test_a_users_own_train_and_test_functions_get_the_outputs_their_network_returns():
    """A Flower app's train/test read ``net(x)["logits"]``: DepL's logits hook is not on their network."""
    from depl_fl.task.subnets import UserNetwork
    from depl_fl.task.user_update import user_evaluate, user_local_update
    from tests.user_nets_extra import DictOutputNet

    net = UserNetwork(DictOutputNet, (1, 8, 8), "DictOutputNet")
    rng = np.random.default_rng(0)
    loader = [(torch.tensor(rng.random((8, 1, 8, 8), dtype=np.float32)), torch.tensor(rng.integers(0, 10, 8)))
              for _ in range(2)]

    def train(model: torch.nn.Module, batches: list, epochs: int, device: str) -> float:
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(model(x)["logits"], y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float(loss)

    def test(model: torch.nn.Module, batches: list, device: str) -> tuple[float, float]:
        with torch.no_grad():
            out = model(batches[0][0])
        return float(torch.nn.functional.cross_entropy(out["logits"], batches[0][1])), 0.0

    full = get_state(full_network(net, seed=0))
    sub = extract(full, network_layout(net).structure(full, 0.5))
    result = user_local_update(net, sub, 0.5, train, loader, 1)
    assert np.isfinite(result.train_loss) and result.kept_state.keys() == sub.keys()
    assert np.isfinite(user_evaluate(net, full, 0.5, test, loader)[0])


# --- derivation and the Check ---


@pytest.mark.parametrize("name", list(WORKING))
def test_variants_are_derived_and_pass_the_check(name):
    check_derived_variants(_geo(name), WORKING[name])


def test_every_output_layer_keeps_its_width_and_an_aux_head_reads_the_pruned_channels():
    """The aux logits keep num_classes; the aux conv reads conv2's kept channels (traced in training mode)."""
    shapes = network_layout(_geo("googlenet_aux_net")).sub_shapes(0.5)
    assert shapes["aux.7.weight"] == (10, 16) and shapes["fc.weight"] == (10, 16)
    assert shapes["aux.1.weight"] == (8, 16, 1, 1) and shapes["conv2.weight"] == (16, 8, 3, 3)
    assert network_layout(_geo("domain_adversarial_net")).sub_shapes(0.5)["domain.2.weight"] == (2, 8)


@pytest.mark.parametrize("name", ["googlenet_aux_net", "domain_adversarial_net", "hard_coded_aux_net"])
def test_a_p50_local_update_trains_a_network_with_a_training_only_head(name):
    geo = _geo(name)
    layout = network_layout(geo)
    full = get_state(full_network(geo, seed=0))
    sub = extract(full, layout.structure(full, 0.5))
    rng = np.random.default_rng(0)
    x, y = rng.random((24, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, 24)
    result = local_update(sub, geo, 0.5, x, y, epochs=1, lr=0.05, batch_size=8, seed=0)
    assert np.isfinite(result.train_loss)
    assert {k: v.shape for k, v in result.kept_state.items()} == {k: v.shape for k, v in sub.items()}
    assert not np.array_equal(result.kept_state["fc.weight"], sub["fc.weight"])


def test_a_group_an_aux_head_reads_at_a_hard_coded_width_is_kept_whole():
    """Without the training-mode forward in the Check, conv2 would be compressed and every client fail."""
    layout = network_layout(_geo("hard_coded_aux_net"))
    assert layout.kept == ("conv2",)
    assert layout.sub_shapes(0.5)["aux.weight"] == (10, 512)


def test_per_channel_vectors_are_sliced_and_a_scalar_parameter_travels_whole():
    """A ``[C]`` scale indexed to broadcast, ParameterDict/List entries and a per-channel PReLU follow the
    channels; a scalar temperature and the input normalisation buffers stay as they are."""
    shapes = network_layout(_geo("temperature_scale_net")).sub_shapes(0.5)
    assert shapes["scale"] == (8,) and shapes["temperature"] == ()
    shapes = network_layout(_geo("param_dict_scale_net")).sub_shapes(0.5)
    assert shapes["scales.s1"] == shapes["shifts.0"] == (8,)
    assert shapes["scales.s2"] == shapes["shifts.1"] == (16,)
    assert network_layout(_geo("dilated_pad_net")).sub_shapes(0.5)["prelu2.weight"] == (16,)
    shapes = network_layout(_geo("normalized_input_net")).sub_shapes(0.5)
    assert shapes["mean"] == shapes["std"] == (1, 1, 1, 1) and shapes["channel_gain"] == (1, 8, 1, 1)


# --- DepL rounds in process: a compressed and a full round, bytes as modelled ---


@pytest.mark.parametrize("name", ["dict_output_net", "hf_output_net", "googlenet_aux_net",
                                  "domain_adversarial_net", "temperature_scale_net", "bilinear_net",
                                  "bilstm_net", "einsum_net"])
def test_a_compressed_and_a_full_round_train_with_bytes_as_modelled(name):
    check_compressed_and_full_round(f"{MODULE}:{name}")


# --- refused in one line, naming the layer, exit status 2 ---


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_network_fails_the_check_in_one_line(name):
    geo = _geo(name)
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, network_layout(geo), (0.0, 0.5))
    assert "\n" not in str(err.value) and REFUSED[name] in str(err.value)


@pytest.mark.parametrize("name", ["rgb_only_net"])
def test_a_refused_network_exits_2_before_the_first_round(name, tmp_path):
    lines, _ = refused_job(f"{MODULE}:{name}", [], tmp_path)
    assert len(lines) == 1 and REFUSED[name] in lines[0]
