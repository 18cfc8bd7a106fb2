"""One client's local update: prune from the global weights, fine-tune, return kept weights.

Pure torch + numpy (no flwr): the ClientApp's train handler and the in-process
pilot federations of :mod:`depl_fl.orchestration.profiling` both call :func:`local_update`,
so the loss profile is measured with exactly the client training code.
torch is imported on first use, so that :class:`TaskGeometry` is cheap to import
(a ClientApp process answering a query never loads torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from depl_fl.task.pruning import build_pruned_model, compute_structure, extract


@dataclass(frozen=True)
class TaskGeometry:
    """Architecture and input/output geometry of the global model."""

    arch: str
    num_classes: int
    in_channels: int
    image_size: int


@dataclass(frozen=True)
class LocalResult:
    """What a client sends back after a local update."""

    kept_state: dict[str, np.ndarray]
    num_examples: int
    train_loss: float
    train_time_s: float


def local_update(
    global_state: Mapping[str, np.ndarray],
    geometry: TaskGeometry,
    compression: float,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
) -> LocalResult:
    """Prune the global model, fine-tune the sub-network locally, return its weights.

    Parameters
    ----------
    global_state : mapping of str to array
        Full global weights received from the server.
    geometry : TaskGeometry
        Architecture and task geometry.
    compression : float
        Fraction of channels removed per group (0 = full model, no pruning).
    x, y : numpy.ndarray
        The client's training partition.
    epochs, lr, batch_size : int, float, int
        Local SGD settings.
    seed : int
        Seed of the mini-batch order.

    Returns
    -------
    LocalResult
        Kept weights only, named as in the full model (the structure is a
        deterministic function of ``global_state`` and ``compression``, so the
        server recomputes it instead of receiving it).
    """
    from depl_fl.task.models import get_state, set_state
    from depl_fl.task.training import train_local

    structure = compute_structure(geometry.arch, global_state, compression)
    model = build_pruned_model(geometry.arch, structure, geometry.num_classes,
                               geometry.in_channels, geometry.image_size)
    set_state(model, extract(global_state, structure))
    loss, seconds = train_local(model, x, y, epochs, lr, batch_size, seed)
    return LocalResult(get_state(model), int(len(y)), float(loss), float(seconds))


def evaluate_state(state: Mapping[str, np.ndarray], geometry: TaskGeometry,
                   x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Cross-entropy loss and accuracy of the full model with weights ``state`` on ``(x, y)``."""
    from depl_fl.task.models import build_model, set_state
    from depl_fl.task.training import evaluate_model

    model = build_model(geometry.arch, geometry.num_classes, geometry.in_channels,
                        geometry.image_size)
    set_state(model, state)
    return evaluate_model(model, x, y)


def initial_state(geometry: TaskGeometry, seed: int) -> dict[str, np.ndarray]:
    """Seeded initial weights of the full global model."""
    from depl_fl.task.models import build_model, get_state

    return get_state(build_model(geometry.arch, geometry.num_classes, geometry.in_channels,
                                 geometry.image_size, seed=seed))


def evaluate_variant(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float,
                     x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Loss and accuracy of the model variant ``compression`` pruned from ``state``.

    This is the loss DepL tracks: the loss of the model being trained (the
    full model when ``compression`` is 0). Switching models changes it by a
    jump, which is what the contract's ``loss.switch`` profiles describe.
    """
    from depl_fl.task.training import evaluate_model

    return evaluate_model(variant_model(state, geometry, compression), x, y)


def variant_model(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float) -> Any:
    """The network of variant ``compression`` with its weights pruned from ``state``."""
    from depl_fl.task.models import build_model, set_state

    if compression == 0.0:
        model = build_model(geometry.arch, geometry.num_classes, geometry.in_channels, geometry.image_size)
        set_state(model, state)
        return model
    structure = compute_structure(geometry.arch, state, compression)
    model = build_pruned_model(geometry.arch, structure, geometry.num_classes,
                               geometry.in_channels, geometry.image_size)
    set_state(model, extract(state, structure))
    return model


def loss_spread(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float,
                x: np.ndarray, y: np.ndarray) -> float:
    """Standard deviation of the per-sample cross-entropy of variant ``compression`` on ``(x, y)``.

    ``loss_spread / sqrt(n)`` is the standard error of the mean loss on ``n``
    samples drawn like ``(x, y)``: how far a split's loss may lie from another's.
    """
    from depl_fl.task.training import per_sample_losses

    return float(np.std(per_sample_losses(variant_model(state, geometry, compression), x, y), ddof=1))
