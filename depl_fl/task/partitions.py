"""Per-process cached access to the dataset, the client partitions and the held-out splits.

Both the ClientApp (one Ray actor = one process, many partitions) and the
server (validation and test splits for central evaluation) go through here,
so the dataset is loaded and partitioned once per process. Decisions read the
validation split only; the test split is only reported.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from depl_fl.task.data import load_dataset, load_held_out_images, partition_indices, split_held_out
from depl_fl.task.local_update import TaskGeometry


def _key(cfg: Mapping[str, Any]) -> tuple[str, str | None]:
    ds = cfg["dataset"]
    return str(ds["name"]), ds.get("data_dir")


@lru_cache(maxsize=4)
def _dataset(name: str, data_dir: str | None) -> Any:
    return load_dataset(name, data_dir=data_dir)


@lru_cache(maxsize=16)
def _partitions(name: str, data_dir: str | None, num_partitions: int,
                alpha: float | None, seed: int) -> tuple[np.ndarray, ...]:
    data = _dataset(name, data_dir)
    return tuple(partition_indices(np.asarray(data.y_train), num_partitions, alpha, seed))


def dataset(cfg: Mapping[str, Any]) -> Any:
    """The configured dataset (``DatasetArrays``), loaded once per process."""
    return _dataset(*_key(cfg))


def is_folder(cfg: Mapping[str, Any]) -> bool:
    """``dataset=folder``: node-local folders, the server holds only ``dataset.test_dir``."""
    return str(cfg["dataset"]["name"]) == "folder"


def geometry(cfg: Mapping[str, Any]) -> TaskGeometry:
    """Architecture and task geometry of the configured model on the configured dataset.

    For ``dataset=folder`` it is read from the server's test folder (a client
    uses its own folder, :func:`depl_fl.task.folder_data.geometry_of`).
    """
    if is_folder(cfg):
        from depl_fl.task.folder_data import geometry_of, test_folder

        return geometry_of(str(cfg["model"]["arch"]), test_folder(cfg))
    data = dataset(cfg)
    return TaskGeometry(str(cfg["model"]["arch"]), int(data.num_classes),
                        int(data.in_channels), int(data.image_size))


def client_partition(cfg: Mapping[str, Any], partition_id: int, num_partitions: int,
                     seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Training data ``(x, y)`` of one partition (seeded, equal on every process)."""
    alpha = cfg["partition"]["alpha"]
    seed = int(cfg["seed"]) if seed is None else int(seed)
    parts = _partitions(*_key(cfg), int(num_partitions),
                        None if alpha is None else float(alpha), seed)
    idx = parts[int(partition_id)]
    data = dataset(cfg)
    return np.asarray(data.x_train)[idx], np.asarray(data.y_train)[idx]


@lru_cache(maxsize=4)
def _held_out_folder(name: str, data_dir: str | None, folder: str, field: str
                     ) -> tuple[np.ndarray, np.ndarray]:
    return load_held_out_images(name, folder, _dataset(name, data_dir), field=field)


def load_held_out_folder(cfg: Mapping[str, Any], key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(x, y)`` of the folder ``dataset.<key>`` (loaded once per process), or None when unset."""
    folder = (cfg["dataset"] or {}).get(key)
    if not folder:
        return None
    return _held_out_folder(*_key(cfg), str(folder), f"dataset.{key}")


#: Share of the server's held-out data that becomes the validation split (the rest: test).
VALIDATION_FRACTION = 0.5


@lru_cache(maxsize=4)  # each entry copies the held-out images (CIFAR-10: ~120 MB)
def _held_out_halves(name: str, data_dir: str | None, seed: int
                     ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    data = _dataset(name, data_dir)
    val_idx, test_idx = split_held_out(np.asarray(data.y_test), VALIDATION_FRACTION, seed)
    x, y = np.asarray(data.x_test), np.asarray(data.y_test)
    return (x[val_idx], y[val_idx]), (x[test_idx], y[test_idx])


def _split_seed(cfg: Mapping[str, Any], seed: int | None) -> int:
    return int(cfg["seed"]) if seed is None else int(seed)


def validation_split(cfg: Mapping[str, Any], seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The server's validation split ``(x, y)``: the loss every decision reads.

    Tracking, stopping, re-planning and the profile pilots evaluate here. It is
    the ``dataset.val_dir`` folder when one is configured, else a stratified
    half of the held-out data drawn with ``seed`` (default: the run seed).
    """
    if is_folder(cfg):
        return _folder_halves(cfg, _split_seed(cfg, seed))[0]
    own = load_held_out_folder(cfg, "val_dir")
    if own is not None:
        return own
    return _held_out_halves(*_key(cfg), _split_seed(cfg, seed))[0]


def test_split(cfg: Mapping[str, Any], seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The server's test split ``(x, y)``: only reported, never read by a decision.

    With ``dataset.val_dir`` configured, the whole held-out (test) data of the
    dataset; else the other half of the split of :func:`validation_split`.
    For ``dataset=folder`` the same holds for ``dataset.test_dir``.
    """
    if is_folder(cfg):
        return _folder_halves(cfg, _split_seed(cfg, seed))[1]
    data = dataset(cfg)
    if (cfg["dataset"] or {}).get("val_dir"):
        return np.asarray(data.x_test), np.asarray(data.y_test)
    return _held_out_halves(*_key(cfg), _split_seed(cfg, seed))[1]


def _folder_halves(cfg: Mapping[str, Any], seed: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``dataset=folder``: (validation, test) from ``dataset.val_dir`` and ``dataset.test_dir``,
    or the two halves of ``dataset.test_dir`` when no ``val_dir`` is given."""
    from depl_fl.task.folder_data import folder_classes, read_folder, test_folder

    test = test_folder(cfg)
    val_dir = (cfg["dataset"] or {}).get("val_dir")
    if val_dir:
        val = read_folder(val_dir, folder_classes(cfg) or test.classes, field="dataset.val_dir")
        return (val.x, val.y), (test.x, test.y)
    val_idx, test_idx = split_held_out(test.y, VALIDATION_FRACTION, seed)
    return (test.x[val_idx], test.y[val_idx]), (test.x[test_idx], test.y[test_idx])
