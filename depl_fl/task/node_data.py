"""One node's training partition and task geometry, cached on the node's disk.

A Flower deployment handles every message in a fresh process; loading the
dataset (scikit-learn, Hugging Face datasets) and splitting it (Flower
Datasets) on every message costs seconds, while the result is a small,
deterministic array pair. :func:`cached_node_data` keeps it in the node cache
(:mod:`depl_fl.diskcache`) under a hash of everything it depends on, and in
memory for later messages of the same process. numpy only.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from depl_fl.diskcache import atomic_write, content_key
from depl_fl.task.local_update import TaskGeometry

FORMAT = 1
"""Version of the cached file layout (part of the key)."""


@dataclass(frozen=True)
class NodeData:
    """A node's training partition ``(x, y)`` and the geometry of the task."""

    x: np.ndarray
    y: np.ndarray
    geometry: TaskGeometry


_MEMORY: dict[str, NodeData] = {}
#: Entries kept in memory: a long-lived process (a node's warm worker) serves many runs.
MEMORY_ENTRIES = 4


def _read(path: Path) -> NodeData | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            geo = TaskGeometry(str(npz["arch"]), int(npz["num_classes"]), int(npz["in_channels"]),
                               int(npz["image_size"]))
            return NodeData(npz["x"], npz["y"], geo)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None


def _write(path: Path, data: NodeData) -> None:
    buf = io.BytesIO()
    geo = data.geometry
    np.savez(buf, x=data.x, y=data.y, arch=np.str_(geo.arch), num_classes=geo.num_classes,
             in_channels=geo.in_channels, image_size=geo.image_size)
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))


def cached_node_data(cache_dir: Path | None, key: Any, compute: Callable[[], NodeData]) -> NodeData:
    """``compute()``, cached on disk under ``cache_dir`` and in memory by ``key``.

    Parameters
    ----------
    cache_dir : Path or None
        The node cache folder; ``None`` caches in memory only.
    key : JSON-serialisable
        Everything the result depends on (dataset config, partitioning, seed,
        partition id, local data paths with their modification times).
    compute : callable
        Builds the data on a miss.
    """
    name = content_key({"node-data": FORMAT, "key": key})
    if name in _MEMORY:
        return _MEMORY[name]
    path = None if cache_dir is None else Path(cache_dir) / "partitions" / f"{name}.npz"
    data = _read(path) if path is not None and path.is_file() else None
    if data is None:
        data = compute()
        if path is not None:
            _write(path, data)
    while len(_MEMORY) >= MEMORY_ENTRIES:
        _MEMORY.pop(next(iter(_MEMORY)))  # the oldest entry
    _MEMORY[name] = data
    return data
