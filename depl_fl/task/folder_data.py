"""Node-local image folders: ``DIR/<class name>/<file>.png`` (imagefolder layout).

A SuperNode's training data is the folder given by its node config
``data-dir``; the server's held-out test set for central evaluation is
``dataset.test_dir`` (same layout). Classes are the sub-folders sorted by
name (an empty sub-folder still names a class, so a node that holds no sample
of a class keeps the federation's class list; ``dataset.classes`` can also
fix the list explicitly). Image size and channels are read from the files:
grayscale images (PIL mode ``L``/``1``/``I;16``) give one channel, everything
else is converted to RGB. Pixels are scaled to [0, 1]; images of other sizes
are resized to the first image's size. A Hugging Face ``save_to_disk``
folder (a ``Dataset`` with an image and a label column, or a ``DatasetDict``
whose ``train`` split is used) is accepted too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from depl_fl.task.data import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".webp")
_GRAY_MODES = ("L", "1", "I;16", "I", "F", "LA")


@dataclass(frozen=True)
class FolderData:
    """One folder's samples (float32 NCHW in [0, 1], int64 labels) and its class list."""

    x: np.ndarray
    y: np.ndarray
    classes: tuple[str, ...]
    in_channels: int
    image_size: int

    @property
    def num_classes(self) -> int:
        """Number of classes (sub-folders, or the explicit class list)."""
        return len(self.classes)

    def label_counts(self) -> list[int]:
        """Samples per class, in class order."""
        return [int(v) for v in np.bincount(self.y, minlength=self.num_classes)]


def _is_saved_hf(path: Path) -> bool:
    return any((path / f).exists() for f in ("dataset_dict.json", "dataset_info.json", "state.json"))


def read_folder(path: str | os.PathLike, classes: Sequence[str] | None = None,
                field: str = "data-dir") -> FolderData:
    """Read an imagefolder (or a saved HF dataset) into arrays.

    Parameters
    ----------
    path : path
        ``PATH/<class>/<file>.png``.
    classes : sequence of str, optional
        The class list (label ``i`` = ``classes[i]``); default: the sub-folders sorted by name.
    field : str
        Name of the setting that gave ``path`` (for the error message).

    Raises
    ------
    DataError
        Missing folder, no class folder, no image, or an image of an unknown class.
    """
    return _read_cached(os.path.abspath(os.fspath(path)), tuple(classes) if classes else None, field)


@lru_cache(maxsize=8)
def _read_cached(path: str, classes: tuple[str, ...] | None, field: str) -> FolderData:
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{field}: {path!r} is not a folder (expected {field}/<class>/<image>.png)")
    if _is_saved_hf(root):
        return _read_saved(root, classes, field)
    found = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    names = tuple(classes) if classes else tuple(found)
    if not names:
        raise DataError(f"{field}: {path!r} has no class sub-folders (expected {field}/<class>/<image>.png)")
    unknown = sorted(set(found) - set(names))
    if unknown:
        raise DataError(f"{field}: {path!r} has folders of unknown classes {unknown} (dataset.classes)")
    files = [(f, i) for i, name in enumerate(names) if (root / name).is_dir()
             for f in sorted((root / name).iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise DataError(f"{field}: {path!r} holds no image ({', '.join(IMAGE_SUFFIXES)}) "
                        f"in its class folders")
    return _to_folder_data([f for f, _ in files], [i for _, i in files], names)


def _to_folder_data(images: Sequence[object], labels: Sequence[int], names: tuple[str, ...]) -> FolderData:
    from PIL import Image

    first = images[0] if isinstance(images[0], Image.Image) else Image.open(images[0])
    gray = first.mode in _GRAY_MODES
    size = first.size
    out = []
    for item in images:
        img = item if isinstance(item, Image.Image) else Image.open(item)
        img = img.convert("L" if gray else "RGB")
        if img.size != size:
            img = img.resize(size, Image.BILINEAR)
        arr = np.asarray(img, dtype=np.float32) / 255.0
        out.append(arr[None, :, :] if gray else arr.transpose(2, 0, 1))
    x = np.stack(out).astype(np.float32)
    return FolderData(x, np.asarray(labels, dtype=np.int64), names, int(x.shape[1]), int(size[0]))


def _read_saved(root: Path, classes: tuple[str, ...] | None, field: str) -> FolderData:
    import datasets

    from depl_fl.task.data import _columns

    loaded = datasets.load_from_disk(str(root))
    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
    image_col, label_col = _columns(loaded, field)
    feature = loaded.features[label_col]
    if classes:
        names = tuple(classes)
    elif isinstance(feature, datasets.ClassLabel):
        names = tuple(feature.names)
    else:
        names = tuple(str(v) for v in range(int(max(loaded[label_col])) + 1))
    images = [img if hasattr(img, "convert") else _from_array(img) for img in loaded[image_col]]
    return _to_folder_data(images, [int(v) for v in loaded[label_col]], names)


def _from_array(img: object) -> object:
    from PIL import Image

    return Image.fromarray(np.asarray(img, dtype=np.uint8))


def write_folder(path: str | os.PathLike, x: np.ndarray, y: np.ndarray, classes: Sequence[str]) -> int:
    """Write float images in [0, 1] (NCHW) as PNGs ``path/<class>/<index>.png``; returns the count.

    Every class gets its folder, empty or not, so readers infer the same class list.
    """
    from PIL import Image

    root = Path(path)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
    pixels = np.clip(np.rint(np.asarray(x, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)
    width = len(str(max(len(y) - 1, 0)))
    for i, (img, label) in enumerate(zip(pixels, y, strict=True)):
        arr = img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0)
        Image.fromarray(arr, mode="L" if img.shape[0] == 1 else "RGB").save(
            root / classes[int(label)] / f"{i:0{width}d}.png")
    return int(len(y))


def folder_classes(cfg: dict) -> tuple[str, ...] | None:
    """``dataset.classes`` when set (an explicit class list), else ``None`` (infer from the folder)."""
    classes = (cfg.get("dataset") or {}).get("classes")
    return tuple(str(c) for c in classes) if classes else None


def test_folder(cfg: dict) -> FolderData:
    """The server's held-out test set ``dataset.test_dir`` of ``dataset=folder``."""
    test_dir = (cfg.get("dataset") or {}).get("test_dir")
    if not test_dir:
        raise DataError("dataset.test_dir: dataset=folder needs the server's held-out test folder "
                        "(dataset.test_dir=PATH, layout PATH/<class>/<image>.png)")
    return read_folder(test_dir, folder_classes(cfg), field="dataset.test_dir")


def geometry_of(arch: str, data: FolderData):
    """The task geometry of ``arch`` on a folder's images."""
    from depl_fl.task.local_update import TaskGeometry

    return TaskGeometry(str(arch), data.num_classes, data.in_channels, data.image_size)
