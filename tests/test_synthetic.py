"""Synthetic(alpha, beta): seeded draws, heterogeneity as defined, power-law sizes, the job's data path."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.runs.runconfig import compose_config, to_plain, validate
from depl_fl.task import synthetic
from depl_fl.task.synthetic import SyntheticSpec, device_data, held_out, sample_counts

DEVICES = 40


def _label_hists(spec: SyntheticSpec, n: int = DEVICES) -> np.ndarray:
    rows = []
    for k in range(n):
        _, y = device_data(spec, k, n)
        rows.append(np.bincount(y, minlength=spec.num_classes) / y.size)
    return np.array(rows)


def _label_spread(spec: SyntheticSpec) -> float:
    """Mean total-variation distance of the devices' label distributions from their mean."""
    hists = _label_hists(spec)
    return float(0.5 * np.abs(hists - hists.mean(axis=0)).sum(axis=1).mean())


def _feature_mean_spread(spec: SyntheticSpec) -> float:
    """Standard deviation over devices of each device's mean feature value."""
    means = [device_data(spec, k, DEVICES)[0].mean() for k in range(DEVICES)]
    return float(np.std(means))


def _log_spread(counts: np.ndarray, floor: int) -> float:
    """Robust lognormal sigma of ``counts - floor``: half the 16-84 % range of the logs."""
    excess = counts[counts > floor] - floor
    lo, hi = np.quantile(np.log(excess), [0.16, 0.84])
    return float((hi - lo) / 2)


def _top_decile_share(counts: np.ndarray) -> float:
    ordered = np.sort(counts)[::-1]
    return float(ordered[: max(1, counts.size // 10)].sum() / counts.sum())


def test_same_seed_same_data_other_seed_other_data():
    a = device_data(SyntheticSpec(seed=3), 5, 10)
    b = device_data(SyntheticSpec(seed=3), 5, 10)
    c = device_data(SyntheticSpec(seed=4), 5, 10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0].shape[0] != c[0].shape[0] or not np.array_equal(a[0], c[0])


def test_device_data_does_not_depend_on_the_number_of_devices():
    small = device_data(SyntheticSpec(seed=1), 2, 3)
    large = device_data(SyntheticSpec(seed=1), 2, 1000)
    np.testing.assert_array_equal(small[0], large[0])
    np.testing.assert_array_equal(sample_counts(SyntheticSpec(seed=1), 3),
                                  sample_counts(SyntheticSpec(seed=1), 1000)[:3])


def test_shapes_and_covariance_of_the_paper():
    x, y = device_data(SyntheticSpec(seed=0, iid=True), 0, 1)
    assert x.shape[1] == 60 and x.dtype == np.float32 and y.dtype == np.int64
    assert y.min() >= 0 and y.max() < 10
    big = synthetic.draw(synthetic.device_model(SyntheticSpec(seed=0, iid=True), 0), 20000,
                         np.random.default_rng(0))[0]
    want = np.arange(1, 61, dtype=np.float64) ** -1.2
    np.testing.assert_allclose(big.var(axis=0), want, rtol=0.06)
    np.testing.assert_allclose(big.mean(axis=0), 0.0, atol=0.03)  # iid: v = 0


def test_beta_spreads_feature_means_and_labels():
    spreads = [_feature_mean_spread(SyntheticSpec(alpha=0.0, beta=b, seed=2)) for b in (0.0, 1.0, 3.0)]
    assert spreads[0] < 0.5 < spreads[1] < spreads[2]
    assert spreads[2] > 2 * spreads[1]
    labels = [_label_spread(SyntheticSpec(alpha=0.0, beta=b, seed=2)) for b in (0.0, 3.0)]
    assert labels[1] > labels[0]


def test_non_iid_devices_have_far_more_label_spread_than_iid():
    iid = _label_spread(SyntheticSpec(seed=2, iid=True))
    non_iid = _label_spread(SyntheticSpec(alpha=0.0, beta=0.0, seed=2))
    assert iid < 0.2 and non_iid > 0.5


def test_alpha_shifts_the_local_models_but_not_the_labels():
    """As defined, u_k adds the same amount to every class's logit: argmax, hence y, ignores it."""
    low, high = SyntheticSpec(alpha=0.0, beta=1.0, seed=2), SyntheticSpec(alpha=5.0, beta=1.0, seed=2)
    shifts = [synthetic.device_model(high, k).weight.mean() for k in range(DEVICES)]
    assert np.std(shifts) > 2.0  # the local models spread with alpha ...
    np.testing.assert_array_equal(_label_hists(low), _label_hists(high))  # ... the labels do not


def test_sample_counts_are_heavy_tailed_lognormal():
    counts = sample_counts(SyntheticSpec(seed=0), 2000)
    assert counts.min() >= 50
    assert 1.6 < _log_spread(counts, 50) < 2.4  # lognormal(4, 2) + 50
    assert _top_decile_share(counts) > 0.5
    uniform = np.random.default_rng(0).integers(50, 1000, 2000)
    assert _log_spread(uniform, 50) < 1.2 and _top_decile_share(uniform) < 0.25


def test_held_out_splits_are_fresh_draws_of_every_device():
    spec = SyntheticSpec(seed=5)
    (xv, yv), (xt, yt) = held_out(spec, 8)
    counts = synthetic.held_out_counts(spec, 8)
    assert xv.shape[0] + xt.shape[0] == counts.sum() and abs(xv.shape[0] - xt.shape[0]) <= 8
    train = np.concatenate([device_data(spec, k, 8)[0] for k in range(8)])
    rows = {r.tobytes() for r in train}
    assert not any(r.tobytes() in rows for r in np.concatenate([xv, xt]))


def test_job_config_gives_client_and_server_data():
    from depl_fl.task.partitions import client_partition, geometry, test_split, validation_split

    cfg = to_plain(compose_config(["dataset=synthetic", "model=synthetic_mlp", "num_clients=12",
                                   "dataset.seed=7", "seed=1"]))
    validate(cfg)
    geo = geometry(cfg)
    assert (geo.arch, geo.num_classes, geo.in_channels, geo.image_size) == ("synthetic_mlp", 10, 60, 1)
    x, y = client_partition(cfg, 4, 12)
    want = device_data(SyntheticSpec(seed=7), 4, 12)
    assert x.shape == (want[0].shape[0], 60, 1, 1)
    np.testing.assert_array_equal(y, want[1])
    val, test = validation_split(cfg), test_split(cfg)
    assert val[0].shape[1:] == (60, 1, 1) and test[0].shape[0] > 0


@pytest.mark.parametrize("override, message", [
    (["dataset.beta=-1"], "dataset.beta: must be >= 0"),
    (["dataset.held_out_fraction=0"], "dataset.held_out_fraction"),
    ([], "use model=synthetic_mlp"),
])
def test_bad_synthetic_config_is_one_line(override, message):
    model = [] if message.startswith("use model") else ["model=synthetic_mlp"]
    with pytest.raises(ScenarioError, match=message):
        validate(to_plain(compose_config(["dataset=synthetic", *model, *override])))


def test_mlp_variants_are_really_smaller():
    from depl_fl.task.variants import measure_variant

    full = measure_variant("synthetic_mlp", 0.0, 10, 60, 1)
    half = measure_variant("synthetic_mlp", 0.5, 10, 60, 1)
    assert full.params == 60 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
    assert half.params == 60 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10
    assert half.train_flops_per_sample < 0.5 * full.train_flops_per_sample


def test_mlp_prunes_through_the_variant_path():
    import torch

    from depl_fl.task.geometry import TaskGeometry
    from depl_fl.task.models import build_model, get_state
    from depl_fl.task.pruning import aggregate_pruned, compute_structure, extract
    from depl_fl.task.subnets import build_skeleton, network_layout

    geo = TaskGeometry("synthetic_mlp", 10, 60, 1)
    full = get_state(build_model("synthetic_mlp", 10, 60, 1, seed=0))
    structure = compute_structure(network_layout(geo), full, 0.5)
    kept = extract(full, structure)
    assert kept["fc1.weight"].shape == (32, 60) and kept["fc2.weight"].shape == (16, 32)
    model = build_skeleton(geo, 0.5)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in kept.items()})
    x, _ = device_data(SyntheticSpec(seed=0), 0, 1)
    assert model(torch.as_tensor(x).reshape(-1, 60, 1, 1)).shape == (x.shape[0], 10)
    moved = {k: v + 1.0 for k, v in kept.items()}
    merged = aggregate_pruned(full, [(moved, 1.0)], structure)
    changed = np.flatnonzero(np.any(merged["fc1.weight"] != full["fc1.weight"], axis=1))
    assert len(changed) == 32
    np.testing.assert_allclose(merged["fc1.weight"][changed], moved["fc1.weight"])
