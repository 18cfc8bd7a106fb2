"""``depl-fl split``: write a dataset's client partitions as per-node image folders.

``depl-fl split --dataset digits --num-clients 3 [--alpha 0.5] [--seed S]
[--data-dir DIR] --out OUT`` writes ``OUT/node-<i>/<class>/<n>.png`` (the
training samples of partition ``i``, the same partitioners as the simulation)
and ``OUT/test/<class>/<n>.png`` (the held-out test split), plus
``OUT/split.json`` (the command's settings and per-node counts). Every class
folder exists in every node folder, empty or not, so all nodes and the
server infer the same class list. These are the folders of ``dataset=folder``
(SuperNode node config ``data-dir``, server ``dataset.test_dir``).

``digits`` is written exactly (8x8 grayscale, the bundled pixels scaled to
[0, 1] and stored as 8-bit PNGs). The folder-loaded datasets (``cifar10``,
``gtsrb``) are loaded standardised; each channel is mapped back to [0, 1]
by its training-set minimum and maximum (an affine map, so nothing but the
per-channel offset/scale is lost) before writing 32x32 RGB PNGs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from depl_fl.errors import ScenarioError


def class_names(num_classes: int) -> list[str]:
    """Zero-padded class folder names, so that sorting by name keeps the label order."""
    width = len(str(num_classes - 1))
    return [f"{i:0{width}d}" for i in range(num_classes)]


def _to_unit(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low = x_train.min(axis=(0, 2, 3), keepdims=True)
    high = x_train.max(axis=(0, 2, 3), keepdims=True)
    scale = np.where(high > low, high - low, 1.0)
    return (x_train - low) / scale, (x_test - low) / scale


def split_dataset(dataset: str, num_clients: int, out: str | Path, *, alpha: float | None = None,
                  seed: int = 0, data_dir: str | None = None) -> dict:
    """Write the per-node folders and the test folder; returns the ``split.json`` document.

    Raises
    ------
    ScenarioError
        When ``out`` already holds files (nothing is overwritten).
    depl_fl.task.data.DataError
        Unknown dataset or impossible partitioning.
    """
    from depl_fl.task.data import load_dataset, partition_indices
    from depl_fl.task.folder_data import write_folder

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ScenarioError(f"--out: {str(out)!r} is not empty; nothing is overwritten")
    data = load_dataset(dataset, data_dir=data_dir)
    x_train, x_test = np.asarray(data.x_train), np.asarray(data.x_test)
    if dataset != "digits":
        x_train, x_test = _to_unit(x_train, x_test)
    parts = partition_indices(np.asarray(data.y_train), int(num_clients), alpha, int(seed))
    names = class_names(int(data.num_classes))
    nodes = []
    for i, idx in enumerate(parts):
        folder = out / f"node-{i}"
        write_folder(folder, x_train[idx], np.asarray(data.y_train)[idx], names)
        nodes.append({"partition-id": i, "data-dir": str(folder.resolve()), "num-samples": int(len(idx))})
    write_folder(out / "test", x_test, np.asarray(data.y_test), names)
    doc = {"dataset": dataset, "num_clients": int(num_clients), "alpha": alpha, "seed": int(seed),
           "classes": names, "test_dir": str((out / "test").resolve()), "test_samples": int(len(data.y_test)),
           "nodes": nodes}
    (out / "split.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line on stderr, exit status 2
        self.exit(2, f"{self.prog}: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _alpha(text: str) -> float | None:
    if text.lower() in ("none", "null", "iid"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'iid', got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``depl-fl split --dataset NAME --num-clients N [--alpha A] [--seed S] --out DIR``."""
    from depl_fl.task.data import DATASETS, IMAGE_DATASETS

    parser = _OneLineParser(
        prog="depl-fl split",
        description="Write a dataset's client partitions as per-node image folders "
                    "(OUT/node-<i>/<class>/*.png) plus the test folder (OUT/test) for dataset=folder.")
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--num-clients", required=True, type=_positive_int)
    parser.add_argument("--alpha", type=_alpha, default=None,
                        help="Dirichlet concentration of the label skew (default: IID)")
    parser.add_argument("--seed", type=int, default=0, help="partition seed (default 0)")
    parser.add_argument("--data-dir", default=None, help="local folder of cifar10/gtsrb")
    parser.add_argument("--out", required=True, help="empty or new output folder")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.data_dir is not None and args.dataset not in IMAGE_DATASETS:  # as dataset.data_dir in a job
        parser.error(f"--data-dir: not read with --dataset {args.dataset} (embedded; read only with "
                     f"--dataset {'|'.join(IMAGE_DATASETS)}); drop it")
    doc = split_dataset(args.dataset, args.num_clients, args.out, alpha=args.alpha, seed=args.seed,
                        data_dir=args.data_dir)
    for node in doc["nodes"]:
        print(f"node {node['partition-id']}: {node['num-samples']} samples in {node['data-dir']}")
    print(f"test: {doc['test_samples']} samples in {doc['test_dir']}")
    return 0
