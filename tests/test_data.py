"""Dataset loading (offline digits, local-folder cifar10/gtsrb) and partitions."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import DeplError
from depl_fl.task.data import DataError, load_dataset, partition_indices


def _check_partition(parts, n):
    assert all(p.size > 0 for p in parts)
    joined = np.concatenate(parts)
    assert joined.size == n  # disjoint ...
    np.testing.assert_array_equal(np.sort(joined), np.arange(n))  # ... and covering


def _max_label_share(labels, parts):
    return float(np.mean([np.bincount(labels[p]).max() / p.size for p in parts]))


def test_digits_loads_offline_with_expected_shapes():
    d = load_dataset("digits")
    assert d.x_train.shape == (1437, 1, 8, 8) and d.x_test.shape == (360, 1, 8, 8)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert d.x_train.min() == 0.0 and d.x_train.max() == 1.0
    assert (d.num_classes, d.in_channels, d.image_size) == (10, 1, 8)
    assert set(np.unique(d.y_test)) == set(range(10))
    again = load_dataset("digits")
    np.testing.assert_array_equal(d.x_test, again.x_test)
    np.testing.assert_array_equal(d.y_train, again.y_train)


def test_digits_arrays_have_standard_strides_so_a_hard_coded_view_works_on_them():
    import torch

    from tests.user_nets import quickstart_net_8

    d = load_dataset("digits")
    for x in (d.x_train, d.x_test):
        assert torch.as_tensor(x).stride() == (64, 64, 8, 1)  # not read as channels-last
    with torch.no_grad():  # Flower quickstart's `x.view(-1, 16 * 2 * 2)` on the raw held-out pool
        assert quickstart_net_8(10, 1).eval()(torch.as_tensor(d.x_test)).shape == (360, 10)


def test_iid_partitions_deterministic_disjoint_covering():
    labels = np.repeat(np.arange(10), 30)  # sorted labels: IID must still mix them
    a = partition_indices(labels, 7, None, seed=1)
    b = partition_indices(labels, 7, None, seed=1)
    c = partition_indices(labels, 7, None, seed=2)
    _check_partition(a, labels.size)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert any(not np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    sizes = [p.size for p in a]
    assert max(sizes) - min(sizes) <= 1
    assert _max_label_share(labels, a) < 0.35


def test_dirichlet_small_alpha_is_label_skewed():
    labels = np.random.default_rng(0).integers(0, 10, 1000)
    skewed = partition_indices(labels, 10, alpha=0.1, seed=0)
    again = partition_indices(labels, 10, alpha=0.1, seed=0)
    iid = partition_indices(labels, 10, None, seed=0)
    _check_partition(skewed, labels.size)
    assert all(np.array_equal(x, y) for x, y in zip(skewed, again, strict=True))
    assert _max_label_share(labels, skewed) > 0.5
    assert _max_label_share(labels, iid) < 0.3


def test_partition_errors_are_clear():
    labels = np.arange(5) % 2
    with pytest.raises(DataError, match="cannot split 5 samples into 6"):
        partition_indices(labels, 6, None, seed=0)
    with pytest.raises(DataError, match="alpha must be > 0"):
        partition_indices(labels, 2, alpha=0.0, seed=0)


def test_missing_or_unknown_data_is_a_one_line_error(tmp_path):
    with pytest.raises(DeplError) as err:
        load_dataset("cifar10")
    assert "data_dir" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(DataError, match="is not a folder"):
        load_dataset("gtsrb", data_dir=tmp_path / "nope")
    with pytest.raises(DataError, match="unknown dataset 'mnist'"):
        load_dataset("mnist")


def _png_folder(root, sizes_by_split):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, per_class in sizes_by_split.items():
        for label, sizes in per_class.items():
            folder = root / split / label
            folder.mkdir(parents=True)
            for i, (h, w) in enumerate(sizes):
                pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


def test_gtsrb_imagefolder_variable_sizes_resized(tmp_path):
    root = tmp_path / "gtsrb"
    _png_folder(root, {
        "train": {"00000": [(29, 30), (45, 41), (32, 32)], "00001": [(60, 55), (25, 27)]},
        "test": {"00000": [(33, 35)], "00001": [(40, 38), (26, 26)]},
    })
    d = load_dataset("gtsrb", data_dir=root, cache_dir=tmp_path / "cache")
    assert d.x_train.shape == (5, 3, 32, 32) and d.x_test.shape == (3, 3, 32, 32)
    assert sorted(d.y_train.tolist()) == [0, 0, 0, 1, 1]
    assert sorted(d.y_test.tolist()) == [0, 1, 1]
    assert (d.num_classes, d.in_channels, d.image_size) == (2, 3, 32)
    np.testing.assert_allclose(d.x_train.mean(axis=(0, 2, 3)), 0.0, atol=1e-4)
    np.testing.assert_allclose(d.x_train.std(axis=(0, 2, 3)), 1.0, atol=1e-3)


def test_cifar10_saved_hf_dataset(tmp_path):
    import datasets
    from PIL import Image

    rng = np.random.default_rng(1)
    n = 10
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)]
    labels = [i % 10 for i in range(n)]
    features = datasets.Features({"img": datasets.Image(),
                                  "label": datasets.ClassLabel(num_classes=10)})
    ds = datasets.Dataset.from_dict({"img": images, "label": labels}, features=features)
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "cifar"))
    d = load_dataset("cifar10", data_dir=tmp_path / "cifar")
    # no test split: a seeded 20% is held out
    assert d.x_train.shape == (8, 3, 32, 32) and d.x_test.shape == (2, 3, 32, 32)
    assert d.num_classes == 10 and d.x_train.dtype == np.float32
    assert sorted(d.y_train.tolist() + d.y_test.tolist()) == labels
    # pixel values survive the round trip (before standardisation) up to an affine map
    raw = np.stack([np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255 for im in images])
    first = d.x_train[0]
    match = [i for i in range(n) if np.corrcoef(raw[i].ravel(), first.ravel())[0, 1] > 0.999]
    assert len(match) == 1
