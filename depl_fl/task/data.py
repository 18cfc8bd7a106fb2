"""Datasets as normalised float32 NCHW arrays, and client partitions.

* ``digits``: scikit-learn's bundled 8x8 digits (offline), pixels scaled to
  [0, 1], fixed stratified 80/20 train/test split (seed 0).
* ``cifar10`` and ``gtsrb``: read from a local folder only (nothing is ever
  downloaded): either a Hugging Face dataset saved with ``save_to_disk``
  (a ``DatasetDict`` with ``train``/``test`` splits, or a single ``Dataset``)
  or an ``imagefolder`` layout ``DIR/train/<class>/*.png`` and
  ``DIR/test/<class>/*.png``. Images are converted to RGB, resized to 32x32
  (GTSRB images have variable sizes), scaled to [0, 1] and standardised per
  channel with the training-set mean and std. Without a test split, a seeded
  20 % of the training split is held out.

Partitions use Flower Datasets' ``IidPartitioner`` (on a seeded shuffle) or
``DirichletPartitioner`` over the labels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from depl_fl.errors import DeplError

IMAGE_DATASETS = {"cifar10": 10, "gtsrb": 43}
"""Folder-loaded datasets and their default number of classes."""
DATASETS = ("digits", *IMAGE_DATASETS)
IMAGE_SIZE = 32
TEST_FRACTION = 0.2
SPLIT_SEED = 0


class DataError(DeplError):
    """A dataset cannot be loaded or partitioned as asked (one-line message)."""


@dataclass(frozen=True)
class DatasetArrays:
    """Train/test arrays of one dataset (images float32 NCHW, labels int64)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    in_channels: int
    image_size: int
    #: Per-channel mean and std the images were standardised with (folder datasets only).
    norm_mean: np.ndarray | None = None
    norm_std: np.ndarray | None = None


def load_dataset(name: str, data_dir: str | os.PathLike | None = None,
                 cache_dir: str | os.PathLike | None = None) -> DatasetArrays:
    """Load a dataset as normalised arrays.

    Parameters
    ----------
    name : str
        ``digits``, ``cifar10`` or ``gtsrb``.
    data_dir : path, optional
        Local folder of ``cifar10``/``gtsrb`` (saved HF dataset or imagefolder);
        ignored for ``digits``.
    cache_dir : path, optional
        Hugging Face cache for the ``imagefolder`` builder (default: HF's own).

    Returns
    -------
    DatasetArrays

    Raises
    ------
    DataError
        Unknown name, or missing/unreadable ``data_dir``.
    """
    if name == "digits":
        return _load_digits()
    if name not in IMAGE_DATASETS:
        raise DataError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if data_dir is None or not os.path.isdir(data_dir):
        where = ("no data_dir given" if data_dir is None
                 else f"data_dir {os.fspath(data_dir)!r} is not a folder")
        raise DataError(
            f"{name}: {where}; nothing is downloaded - pass data_dir pointing to a Hugging Face dataset "
            f"saved with save_to_disk (train/test splits) or an imagefolder (train/<class>/*.png, "
            f"test/<class>/*.png)"
        )
    return _load_folder(name, os.fspath(data_dir), cache_dir)


def _load_digits() -> DatasetArrays:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    # Standard strides: the split keeps the added channel axis's odd stride, which torch reads as
    # channels-last, and a network's `x.view(...)` then fails on the raw held-out pool.
    x_tr, x_te = np.array(x_tr, order="C", copy=True), np.array(x_te, order="C", copy=True)
    return DatasetArrays(x_tr, y_tr, x_te, y_te, num_classes=10, in_channels=1, image_size=8)


def _load_folder(name: str, data_dir: str, cache_dir) -> DatasetArrays:
    import datasets

    is_saved = any(os.path.exists(os.path.join(data_dir, f))
                   for f in ("dataset_dict.json", "dataset_info.json", "state.json"))
    try:
        if is_saved:
            loaded = datasets.load_from_disk(data_dir)
        else:
            loaded = datasets.load_dataset(
                "imagefolder", data_dir=data_dir,
                cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            )
    except Exception as exc:  # datasets raises many types; the user needs one line
        raise DataError(f"{name}: cannot read {data_dir!r} as a saved HF dataset or imagefolder: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    if "train" not in loaded:
        raise DataError(f"{name}: {data_dir!r} has no 'train' split (found {sorted(loaded)})")
    train = loaded["train"]
    test = loaded["test"] if "test" in loaded else None
    if test is None:
        parts = train.train_test_split(test_size=TEST_FRACTION, seed=SPLIT_SEED)
        train, test = parts["train"], parts["test"]
    image_col, label_col = _columns(train, name)
    x_tr, y_tr = _to_arrays(train, image_col, label_col)
    x_te, y_te = _to_arrays(test, image_col, label_col)
    label_feature = train.features[label_col]
    if isinstance(label_feature, datasets.ClassLabel):
        num_classes = label_feature.num_classes
    else:
        num_classes = max(IMAGE_DATASETS[name], int(max(y_tr.max(), y_te.max())) + 1)
    mean = x_tr.mean(axis=(0, 2, 3), keepdims=True)
    std = x_tr.std(axis=(0, 2, 3), keepdims=True) + 1e-6
    x_tr = ((x_tr - mean) / std).astype(np.float32)
    x_te = ((x_te - mean) / std).astype(np.float32)
    return DatasetArrays(x_tr, y_tr, x_te, y_te, num_classes=num_classes, in_channels=3,
                         image_size=IMAGE_SIZE, norm_mean=mean, norm_std=std)


def load_held_out_images(name: str, folder: str | os.PathLike, like: DatasetArrays,
                         field: str = "dataset.val_dir") -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of one extra held-out folder, standardised like ``like``'s training split.

    ``folder`` is a saved HF dataset (its ``validation``, ``test`` or only
    split) or an imagefolder (``<class>/*.png``). Raises :class:`DataError`
    naming ``field`` when the dataset has no folder form or the folder is unreadable.
    """
    import datasets

    if like.norm_mean is None or like.norm_std is None:
        raise DataError(f"{field}: dataset {name!r} is not read from a folder; leave {field} unset")
    if not os.path.isdir(folder):
        raise DataError(f"{field}: {os.fspath(folder)!r} is not a folder")
    try:
        loaded = (datasets.load_from_disk(os.fspath(folder))
                  if any(os.path.exists(os.path.join(folder, f))
                         for f in ("dataset_dict.json", "dataset_info.json", "state.json"))
                  else datasets.load_dataset("imagefolder", data_dir=os.fspath(folder)))
    except Exception as exc:  # datasets raises many types; the user needs one line
        raise DataError(f"{field}: cannot read {os.fspath(folder)!r}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if isinstance(loaded, datasets.DatasetDict):
        key = next((k for k in ("validation", "test") if k in loaded), next(iter(loaded)))
        loaded = loaded[key]
    x, y = _to_arrays(loaded, *_columns(loaded, name))
    return ((x - like.norm_mean) / like.norm_std).astype(np.float32), y


def split_held_out(labels: np.ndarray, first_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split held-out sample indices in two disjoint parts, stratified by label where possible.

    Returns the sorted indices of the first part (``first_fraction`` of the
    samples) and of the rest; equal seeds give equal splits. Classes too rare
    to stratify fall back to a plain seeded split.
    """
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels).ravel()
    idx = np.arange(labels.size)
    if labels.size < 2:
        raise DataError(f"cannot split {labels.size} held-out samples into validation and test")
    _, counts = np.unique(labels, return_counts=True)
    stratify = labels if counts.min() >= 2 else None
    first, rest = train_test_split(idx, train_size=float(first_fraction), random_state=int(seed),
                                   stratify=stratify)
    return np.sort(first), np.sort(rest)


def _columns(ds, name: str) -> tuple[str, str]:
    import datasets

    images = [c for c, f in ds.features.items() if isinstance(f, datasets.Image)]
    image_col = images[0] if images else next((c for c in ("img", "image") if c in ds.column_names), None)
    label_col = next((c for c in ("label", "labels", "fine_label", "ClassId")
                      if c in ds.column_names), None)
    if label_col is None:
        label_col = next((c for c, f in ds.features.items() if isinstance(f, datasets.ClassLabel)), None)
    if image_col is None or label_col is None:
        raise DataError(f"{name}: need an image column and a label column, found {ds.column_names}")
    return image_col, label_col


def _to_arrays(ds, image_col: str, label_col: str) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    images = np.empty((len(ds), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    for i, img in enumerate(ds[image_col]):
        if not isinstance(img, Image.Image):
            img = Image.fromarray(np.asarray(img, dtype=np.uint8))
        img = img.convert("RGB")
        if img.size != (IMAGE_SIZE, IMAGE_SIZE):
            img = img.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR)
        images[i] = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
    labels = np.asarray(ds[label_col], dtype=np.int64)
    return images, labels


def partition_indices(
    labels: np.ndarray,
    num_partitions: int,
    alpha: float | None,
    seed: int,
    min_partition_size: int | None = None,
) -> list[np.ndarray]:
    """Split sample indices among clients with Flower Datasets partitioners.

    Parameters
    ----------
    labels : array, shape (n,)
        Labels of the samples to split.
    num_partitions : int
        Number of clients (1 <= num_partitions <= n).
    alpha : float or None
        ``None`` = IID (``IidPartitioner`` on a seeded shuffle); otherwise the
        Dirichlet concentration of ``DirichletPartitioner(partition_by="label")``
        (small alpha = strong label skew).
    seed : int
        Seed; equal seeds give equal partitions.
    min_partition_size : int, optional
        Dirichlet only: smallest accepted partition (default
        ``min(10, n // (2 * num_partitions))``, at least 1).

    Returns
    -------
    list of numpy.ndarray
        Sorted, disjoint, non-empty index arrays covering ``range(n)``.

    Raises
    ------
    DataError
        Impossible request (too many partitions, bad alpha, or the Dirichlet
        draw cannot give every partition ``min_partition_size`` samples).
    """
    import datasets
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    labels = np.asarray(labels).astype(np.int64).ravel()
    n = labels.size
    if num_partitions < 1 or num_partitions > n:
        raise DataError(f"cannot split {n} samples into {num_partitions} non-empty partitions")
    if alpha is not None and not alpha > 0:
        raise DataError(f"Dirichlet alpha must be > 0, got {alpha}")
    ds = datasets.Dataset.from_dict({"label": labels, "idx": np.arange(n)})
    if alpha is None:
        ds = ds.shuffle(seed=seed)
        partitioner = IidPartitioner(num_partitions=num_partitions)
    else:
        if min_partition_size is None:
            min_partition_size = max(1, min(10, n // (2 * num_partitions)))
        partitioner = DirichletPartitioner(
            num_partitions=num_partitions, partition_by="label", alpha=float(alpha),
            min_partition_size=int(min_partition_size), self_balancing=True,
            shuffle=True, seed=seed,
        )
    partitioner.dataset = ds
    try:
        parts = [np.sort(np.asarray(partitioner.load_partition(i)["idx"], dtype=np.int64))
                 for i in range(num_partitions)]
    except ValueError as exc:
        raise DataError(f"partitioning {n} samples into {num_partitions} failed: "
                        f"{str(exc).splitlines()[0]}") from None
    if any(p.size == 0 for p in parts):
        raise DataError(f"partitioning {n} samples into {num_partitions} left a partition empty; "
                        f"use fewer partitions or a larger alpha")
    return parts
