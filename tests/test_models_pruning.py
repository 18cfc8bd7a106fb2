"""Model zoo, structured pruning, variant costs and local training."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.models import build_model, get_state, set_state
from depl_fl.task.pruning import (
    PruneError,
    aggregate_pruned,
    compute_structure,
    extract,
    kept_width,
    scatter,
    silence_to_variant,
)
from depl_fl.task.slicing import npy_bytes, silence
from depl_fl.task.subnets import build_skeleton, derive_layout, example_input, network_layout
from depl_fl.task.training import MOMENTUM, evaluate_model, sgd_momentum_step, train_local
from depl_fl.task.variants import measure_variant

GEOMETRY = {"digits_cnn": (1, 8), "alexnet_like": (3, 32), "mobilenet_like": (3, 32)}
COMPRESSIONS = (0.0, 0.5, 0.75, 0.9)


def _full(arch: str, seed: int = 0, widths=None) -> dict[str, np.ndarray]:
    c, s = GEOMETRY[arch]
    return get_state(build_model(arch, 10, c, s, widths=widths, seed=seed))


def _geo(arch: str) -> TaskGeometry:
    c, s = GEOMETRY[arch]
    return TaskGeometry(arch, 10, c, s)


def _layout(arch: str):
    return network_layout(_geo(arch))


def build_pruned_model(arch, structure, *_args, **_kwargs):
    """The variant's sub-network (the skeleton torch-pruning makes; weights arbitrary)."""
    return build_skeleton(_geo(arch), structure.compression)


def _keep(structure) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(i) for i in k) for k in structure.keep)


def silence_dropped(full_state, structure, arch="digits_cnn"):
    return silence(full_state, _layout(arch), structure)


def _kept_mask(full_state, structure) -> dict[str, np.ndarray]:
    zeros = {k: np.zeros_like(v) for k, v in full_state.items()}
    ones = {k: np.ones_like(v) for k, v in extract(full_state, structure).items()}
    return {k: v.astype(bool) for k, v in scatter(zeros, ones, structure).items()}


def test_kept_width_rounds_and_keeps_one():
    assert [kept_width(32, c) for c in COMPRESSIONS] == [32, 16, 8, 3]
    assert kept_width(2, 0.9) == 1
    with pytest.raises(ScenarioError, match="compression"):
        kept_width(32, 1.0)


@pytest.mark.parametrize("arch", list(GEOMETRY))
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_pruned_model_smaller_and_shapes_match_extract(arch, compression):
    c, s = GEOMETRY[arch]
    full = _full(arch)
    structure = compute_structure(_layout(arch), full, compression)
    pruned = extract(full, structure)
    model = build_pruned_model(arch, structure, 10, c, s)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == \
        {k: v.shape for k, v in pruned.items()}
    assert list(pruned) == list(full)  # same names, same order
    n_full = sum(v.size for v in full.values())
    n_pruned = sum(p.numel() for p in model.parameters())
    if compression == 0:
        assert n_pruned == n_full
        assert all(np.array_equal(pruned[k], full[k]) for k in full)
    else:
        assert n_pruned < n_full * (1 - compression) + 1e-9


@pytest.mark.parametrize("arch", list(GEOMETRY))
def test_pruned_model_computes_the_full_model_with_dropped_channels_zeroed(arch):
    # Checks every index mapping, including the flatten expansion and the
    # depthwise layers: dropped channels of a ReLU network contribute nothing.
    c, s = GEOMETRY[arch]
    full = _full(arch, seed=3)
    structure = compute_structure(_layout(arch), full, 0.5)
    pruned = extract(full, structure)
    zeroed = scatter({k: np.zeros_like(v) for k, v in full.items()}, pruned, structure)
    big = build_model(arch, 10, c, s)
    set_state(big, zeroed)
    small = build_pruned_model(arch, structure, 10, c, s)
    set_state(small, pruned)
    x = torch.randn(3, c, s, s, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(small(x), big(x), rtol=1e-4, atol=1e-5)


def test_structure_keeps_largest_l1_channels_with_index_ties():
    full = _full("digits_cnn")
    full["conv1.weight"] = np.ones_like(full["conv1.weight"])  # all 16 tie
    scale = np.arange(32, dtype=np.float32)[::-1].copy()
    scale[[5, 20]] = 100.0
    full["conv2.weight"] = np.ones_like(full["conv2.weight"]) * scale[:, None, None, None]
    structure = compute_structure(_layout("digits_cnn"), full, 0.75)
    assert _keep(structure)[0] == (0, 1, 2, 3)          # ties -> lowest indices
    assert _keep(structure)[1] == (0, 1, 2, 3, 4, 5, 6, 20)  # 5 and 20 largest, then 0..
    assert tuple(len(k) for k in structure.keep) == (4, 8, 16)


@pytest.mark.parametrize("arch", ["digits_cnn", "mobilenet_like"])
def test_structure_is_deterministic_across_calls(arch):
    c, s = GEOMETRY[arch]
    full = _full(arch, seed=7)
    copy = {k: v.copy() for k, v in full.items()}
    a = compute_structure(_layout(arch), full, 0.75)
    b = compute_structure(_layout(arch), copy, 0.75)
    assert _keep(a) == _keep(b)
    assert _keep(a) != _keep(compute_structure(_layout(arch), _full(arch, seed=8), 0.75))
    x = torch.randn(2, c, s, s, generator=torch.Generator().manual_seed(1))
    outs = []
    for st in (a, b):
        m = build_pruned_model(arch, st, 10, c, s, seed=99)
        set_state(m, extract(full, st))
        with torch.no_grad():
            outs.append(m(x))
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("arch", list(GEOMETRY))
@pytest.mark.parametrize("compression", [0.5, 0.75])
def test_silenced_full_model_computes_the_compressed_variant(arch, compression):
    # The function-preserving switch: the full model of a silenced state is the compressed
    # model, with the stale dropped channels still holding their own (nonzero) weights.
    c, s = GEOMETRY[arch]
    full = _full(arch, seed=5)
    structure = compute_structure(_layout(arch), full, compression)
    silenced = silence_dropped(full, structure, arch)
    for name, kept in extract(full, structure).items():
        np.testing.assert_array_equal(extract(silenced, structure)[name], kept)
    assert any(not np.array_equal(silenced[k], full[k]) for k in full)
    big = build_model(arch, 10, c, s)
    set_state(big, silenced)
    small = build_pruned_model(arch, structure, 10, c, s)
    set_state(small, extract(full, structure))
    x = torch.randn(3, c, s, s, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(big(x), small(x), rtol=1e-4, atol=1e-5)
        assert not torch.allclose(build_and_run(arch, full, x), small(x), atol=1e-3)


def build_and_run(arch, state, x):
    c, s = GEOMETRY[arch]
    model = build_model(arch, 10, c, s)
    set_state(model, state)
    return model(x)


@pytest.mark.parametrize("arch", list(GEOMETRY))
def test_silenced_channels_rank_last_so_the_kept_set_survives_training(arch):
    # Without silencing, a dropped channel whose norm overtakes a kept one swaps in (stale).
    full = _full(arch, seed=11)
    structure = compute_structure(_layout(arch), full, 0.5)
    silenced = silence_dropped(full, structure, arch)
    assert _keep(compute_structure(_layout(arch), silenced, 0.5)) == _keep(structure)
    grown = {k: v.copy() for k, v in silenced.items()}
    widths = [g.width for g in _layout(arch).groups]
    for g, keep in enumerate(structure.keep):  # every dropped producer row now outweighs the kept
        producer = next(layer.name for layer in _spec(arch).layers
                        if layer.out_group == g and layer.kind != "dwconv")
        dropped = np.setdiff1d(np.arange(widths[g]), keep)
        grown[f"{producer}.weight"][dropped] *= 1000.0
    assert _keep(compute_structure(_layout(arch), grown, 0.5)) == _keep(structure)
    unsilenced = {k: grown[k] if k.split(".")[0] in _producers(arch) else full[k] for k in full}
    assert _keep(compute_structure(_layout(arch), unsilenced, 0.5)) != _keep(structure)
    # More channels (0.5 -> 0.25) keep the 0.5 set and add silenced ones by norm.
    wider = compute_structure(_layout(arch), silenced, 0.25)
    assert all(set(k) <= set(w) for k, w in zip(structure.keep, wider.keep, strict=True))


def _spec(arch):
    from depl_fl.task.archs import arch_spec
    return arch_spec(arch)


def _producers(arch):
    return {layer.name for layer in _spec(arch).layers
            if layer.kind != "dwconv" and layer.out_group is not None}


def test_silencing_full_compression_is_a_no_op_and_does_not_touch_its_input():
    full = _full("digits_cnn", seed=1)
    before = {k: v.copy() for k, v in full.items()}
    same = silence_to_variant(_layout("digits_cnn"), full, 0.0)
    for k in full:
        np.testing.assert_array_equal(same[k], before[k])
    silence_to_variant(_layout("digits_cnn"), full, 0.5)
    for k in full:
        np.testing.assert_array_equal(full[k], before[k])


def test_prune_train_scatter_round_trip(one_thread):
    full = _full("digits_cnn")
    structure = compute_structure(_layout("digits_cnn"), full, 0.5)
    model = build_pruned_model("digits_cnn", structure, 10, 1, 8)
    set_state(model, extract(full, structure))
    rng = np.random.default_rng(0)
    x = rng.random((64, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, 10, 64)
    train_local(model, x, y, epochs=1, lr=0.05, batch_size=16, seed=0)
    trained = get_state(model)
    back = scatter(full, trained, structure)
    mask = _kept_mask(full, structure)
    for name in full:
        assert back[name].shape == full[name].shape
        np.testing.assert_array_equal(back[name][~mask[name]], full[name][~mask[name]])
        assert mask[name].sum() == trained[name].size
    re_extracted = extract(back, structure)
    for name in trained:
        np.testing.assert_array_equal(re_extracted[name], trained[name])
    assert not np.array_equal(back["conv2.weight"], full["conv2.weight"])  # training moved it


def test_aggregate_weighted_mean_hand_example():
    small = build_model("digits_cnn", 10, 1, 8, widths=(4, 2, 2), seed=0)
    full = get_state(small)
    structure = compute_structure(derive_layout(small, example_input(1, 8)), full, 0.5)
    assert tuple(len(k) for k in structure.keep) == (2, 1, 1)
    shapes = structure.sub_shapes()
    a = {k: np.full(v, 1.0, dtype=np.float32) for k, v in shapes.items()}
    b = {k: np.full(v, 4.0, dtype=np.float32) for k, v in shapes.items()}
    out = aggregate_pruned(full, [(a, 10), (b, 30)], structure)
    mask = _kept_mask(full, structure)
    for name in full:
        np.testing.assert_allclose(out[name][mask[name]], 3.25)  # (1*10 + 4*30) / 40
        np.testing.assert_array_equal(out[name][~mask[name]], full[name][~mask[name]])
        assert out[name].dtype == np.float32
    # conv1 keeps 2 of 4 output rows: the other two rows are untouched
    dropped = sorted(set(range(4)) - set(_keep(structure)[0]))
    np.testing.assert_array_equal(out["conv1.weight"][dropped], full["conv1.weight"][dropped])
    np.testing.assert_allclose(out["conv1.bias"][list(_keep(structure)[0])], 3.25)


def test_compression_zero_aggregation_is_plain_fedavg():
    full = _full("digits_cnn")
    structure = compute_structure(_layout("digits_cnn"), full, 0.0)
    s1, s2 = _full("digits_cnn", seed=1), _full("digits_cnn", seed=2)
    out = aggregate_pruned(full, [(s1, 1), (s2, 3)], structure)
    for k in full:
        np.testing.assert_allclose(out[k], 0.25 * s1[k] + 0.75 * s2[k], rtol=1e-6, atol=1e-7)


def test_bad_replies_are_rejected_with_clear_errors():
    full = _full("digits_cnn")
    structure = compute_structure(_layout("digits_cnn"), full, 0.75)
    good = extract(full, structure)
    wrong_shape = dict(good, **{"fc1.weight": np.zeros((16, 999), np.float32)})
    with pytest.raises(PruneError, match=r"fc1\.weight has shape \(16, 999\)"):
        aggregate_pruned(full, [(good, 1), (wrong_shape, 1)], structure)
    with pytest.raises(ValueError, match="missing"):
        scatter(full, {k: v for k, v in good.items() if k != "conv1.bias"}, structure)
    with pytest.raises(ValueError, match="unexpected"):
        scatter(full, dict(good, extra=np.zeros(1)), structure)
    nan = dict(good, **{"fc2.bias": np.full_like(good["fc2.bias"], np.nan)})
    with pytest.raises(PruneError, match="non-finite"):
        scatter(full, nan, structure)
    with pytest.raises(PruneError, match="weights"):
        aggregate_pruned(full, [(good, 0)], structure)
    with pytest.raises(PruneError, match="no replies"):
        aggregate_pruned(full, [], structure)
    with pytest.raises(PruneError, match="full state"):
        compute_structure(_layout("alexnet_like"), full, 0.5)


def test_unknown_arch_and_bad_widths_are_one_line_errors():
    with pytest.raises(ScenarioError, match="unknown architecture 'resnet'"):
        build_model("resnet", 10, 3, 32)
    with pytest.raises(ScenarioError, match="needs 3 positive widths"):
        build_model("digits_cnn", 10, 1, 8, widths=(4, 4))


@pytest.mark.parametrize("arch", list(GEOMETRY))
def test_flops_and_size_shrink_monotonically(arch):
    c, s = GEOMETRY[arch]
    costs = [measure_variant(arch, comp, 10, c, s) for comp in COMPRESSIONS]
    flops = [v.train_flops_per_sample for v in costs]
    sizes = [v.size_bytes for v in costs]
    assert all(a > b for a, b in zip(flops, flops[1:], strict=False))
    assert all(a > b for a, b in zip(sizes, sizes[1:], strict=False))
    assert costs[0].size_bytes == sum(npy_bytes(v.shape, str(v.dtype)) for v in _full(arch).values())
    assert flops[2] < flops[0] / 8  # 0.75 removes 75% of channels: ~1/16 on conv-conv


def test_digits_flops_match_hand_count():
    macs = (8 * 8 * 16 * 1 * 9      # conv1 3x3, 8x8 output
            + 8 * 8 * 32 * 16 * 9   # conv2
            + 32 * 4 * 4 * 64       # fc1 after 2x2 pool
            + 64 * 10)              # fc2
    assert measure_variant("digits_cnn", 0.0, 10, 1, 8).train_flops_per_sample == 3 * 2 * macs


def _vit_macs(ffn: int) -> int:
    """Hand count of ``tests.user_nets:vit_net`` (16 tokens of 32, 2 layers) with an FFN width ``ffn``."""
    tokens, embed = 16, 32
    layer = (tokens * embed * 3 * embed     # q, k, v projections (in_proj)
             + 2 * tokens * tokens * embed  # Q K^T and A V over all heads
             + tokens * embed * embed       # out_proj
             + 2 * tokens * embed * ffn)    # linear1 and linear2, once per token
    return tokens * embed * 1 * 2 * 2 + 2 * layer + embed * 10  # patch conv, layers, head


@pytest.mark.parametrize(("compression", "ffn"), [(0.0, 64), (0.5, 32), (0.75, 16)])
def test_transformer_flops_count_every_token_and_the_attention_products(compression, ffn):
    """Token-wise linears count per token; the attention's products count even inside fused kernels."""
    cost = measure_variant("tests.user_nets:vit_net", compression, 10, 1, 8)
    assert cost.train_flops_per_sample == 3 * 2 * _vit_macs(ffn)
    hand = measure_variant("tests.user_nets:hand_attention_net", compression, 10, 1, 8)
    tokens, embed = 16, 32
    macs = (tokens * embed * 4 + tokens * embed * 3 * embed + 2 * tokens * tokens * embed
            + tokens * embed * embed + 2 * tokens * embed * ffn + embed * 10)
    assert hand.train_flops_per_sample == 3 * 2 * macs
    fused = measure_variant("tests.user_nets:sdpa_attention_net", compression, 10, 1, 8)
    assert fused.train_flops_per_sample == hand.train_flops_per_sample  # the fused kernel's products count


@pytest.fixture
def one_thread():
    """Single-threaded torch, as a Flower client runs it (much faster on a busy box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_train_local_is_deterministic_and_learns_digits(one_thread):
    from depl_fl.task.data import load_dataset

    d = load_dataset("digits")
    x, y = d.x_train[:300], d.y_train[:300]
    states, losses = [], []
    for _ in range(2):
        model = build_model("digits_cnn", 10, 1, 8, seed=0)
        loss0, _ = evaluate_model(model, x, y)
        mean_loss, seconds = train_local(model, x, y, epochs=3, lr=0.05, batch_size=32, seed=5)
        assert seconds > 0 and np.isfinite(mean_loss)
        states.append(get_state(model))
        losses.append(evaluate_model(model, d.x_test, d.y_test))
    for k in states[0]:
        np.testing.assert_array_equal(states[0][k], states[1][k])
    test_loss, acc = losses[0]
    assert test_loss < 0.6 * loss0 and acc > 0.6


def test_evaluate_model_hand_example():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.eye(2))
    x = np.array([[[[3.0, 0.0]]], [[[0.0, 3.0]]], [[[3.0, 0.0]]]], dtype=np.float32)
    y = np.array([0, 1, 1])
    loss, acc = evaluate_model(model, x, y, batch_size=2)
    ce_right = np.log1p(np.exp(-3.0))
    ce_wrong = np.log1p(np.exp(3.0))
    assert acc == pytest.approx(2 / 3)
    assert loss == pytest.approx((2 * ce_right + ce_wrong) / 3, rel=1e-5)


def test_pruning_module_does_not_import_torch():
    code = ("import sys, depl_fl.task.pruning as p; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def _train_with_torch_sgd(model, x, y, epochs, lr, batch_size, seed):
    """Reference: the same loop as ``train_local`` with ``torch.optim.SGD``."""
    xt, yt = torch.as_tensor(x), torch.as_tensor(y).long()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), batch_size):
            idx = order[i:i + batch_size]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()


@pytest.mark.parametrize("arch", list(GEOMETRY))
def test_train_local_matches_torch_optim_sgd(arch):
    """The hand-written momentum step is torch.optim.SGD's update, to the last bit."""
    c, s = GEOMETRY[arch]
    rng = np.random.default_rng(1)
    x = rng.random((40, c, s, s), dtype=np.float32)
    y = rng.integers(0, 10, 40)
    torch.set_num_threads(1)
    ours = build_model(arch, 10, c, s, seed=2)
    ref = build_model(arch, 10, c, s, seed=2)
    train_local(ours, x, y, epochs=2, lr=0.05, batch_size=16, seed=3)
    _train_with_torch_sgd(ref, x, y, epochs=2, lr=0.05, batch_size=16, seed=3)
    got, want = get_state(ours), get_state(ref)
    start = get_state(build_model(arch, 10, c, s, seed=2))
    assert all(not np.array_equal(got[name], start[name]) for name in start)  # every layer trained
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_sgd_momentum_step_skips_parameters_without_gradient():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    buffers = [None, None]
    a.grad = torch.full((3,), 2.0)
    sgd_momentum_step([a, b], buffers, lr=0.5)
    assert torch.equal(a.detach(), torch.zeros(3)) and torch.equal(b.detach(), torch.ones(2))
    assert buffers[1] is None and torch.equal(buffers[0], torch.full((3,), 2.0))
    sgd_momentum_step([a, b], buffers, lr=0.5)  # buf = 0.9 * 2 + 2 = 3.8
    assert torch.allclose(a.detach(), torch.full((3,), -1.9))


def test_per_sample_losses_hand_example_and_their_spread(one_thread):
    from depl_fl.task.local_update import (
        TaskGeometry,
        evaluate_variant,
        initial_state,
        loss_spread,
        variant_model,
    )
    from depl_fl.task.training import per_sample_losses

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.eye(2))
    x = np.array([[[[3.0, 0.0]]], [[[0.0, 3.0]]], [[[3.0, 0.0]]]], dtype=np.float32)
    losses = per_sample_losses(model, x, np.array([0, 1, 1]), batch_size=2)
    assert losses == pytest.approx([np.log1p(np.exp(-3.0))] * 2 + [np.log1p(np.exp(3.0))], rel=1e-5)
    # On a real variant: the mean of the per-sample losses is the evaluated loss, their std the spread.
    geo = TaskGeometry("digits_cnn", 10, 1, 8)
    state = initial_state(geo, 0)
    rng = np.random.default_rng(0)
    xs, ys = rng.normal(size=(40, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 40)
    per = per_sample_losses(variant_model(state, geo, 0.5), xs, ys)
    assert per.mean() == pytest.approx(evaluate_variant(state, geo, 0.5, xs, ys)[0], rel=1e-5)
    assert loss_spread(state, geo, 0.5, xs, ys) == pytest.approx(per.std(ddof=1), rel=1e-9)
    assert loss_spread(state, geo, 0.5, xs, ys) > 0


def test_a_variant_loaded_into_the_cached_network_evaluates_as_a_fresh_copy(one_thread):
    from depl_fl.task.local_update import initial_state, loaded_variant, local_update, variant_model

    geo = TaskGeometry("digits_cnn", 10, 1, 8)
    rng = np.random.default_rng(3)
    xs, ys = rng.normal(size=(60, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 60)
    first, second = initial_state(geo, 0), initial_state(geo, 1)
    for compression in (0.0, 0.5):
        loaded_variant(first, geo, compression)
        # a client's local update in this process trains the same cached network in between
        sub = get_state(variant_model(first, geo, compression))
        local_update(sub, geo, compression, xs, ys, epochs=1, lr=0.1, batch_size=16, seed=0)
        got = evaluate_model(loaded_variant(second, geo, compression), xs, ys)
        want = evaluate_model(variant_model(second, geo, compression), xs, ys)
        assert got == want and got != evaluate_model(variant_model(first, geo, compression), xs, ys)
