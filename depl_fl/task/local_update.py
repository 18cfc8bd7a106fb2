"""One client's local update: rebuild the sub-network, load what the server sent, fine-tune it.

Pure torch + numpy (no flwr): the ClientApp's train handler and the in-process
pilot federations of :mod:`depl_fl.orchestration.profiling` both call :func:`local_update`,
so the loss profile is measured with exactly the client training code.
``loss`` is the job's ``model.loss`` spec (``None``: cross-entropy,
:mod:`depl_fl.task.losses`), used by every training and evaluation here.
torch is imported on first use, so that :class:`TaskGeometry` is cheap to import
(a ClientApp process answering a query never loads torch). ``device`` is a
resolved torch device (:func:`depl_fl.task.devices.resolve_device`): the
network trains or is evaluated there, and every state that comes back is numpy
in host memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from depl_fl.task.geometry import TaskGeometry

__all__ = ["LocalResult", "TaskGeometry", "evaluate_state", "evaluate_variant", "initial_state",
           "local_update", "loss_spread", "variant_model"]


@dataclass(frozen=True)
class LocalResult:
    """What a client sends back after a local update."""

    kept_state: dict[str, np.ndarray]
    num_examples: int
    #: Mean train loss; None when a user's ``train`` reported none (see depl_fl.task.user_update).
    train_loss: float | None
    train_time_s: float


def local_update(
    sub_state: Mapping[str, np.ndarray],
    geometry: TaskGeometry,
    compression: float,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    loss: str | None = None,
    device: str = "cpu",
) -> LocalResult:
    """Load the sub-network the server sent, fine-tune it locally, return its entries.

    Parameters
    ----------
    sub_state : mapping of str to array
        The variant's entries sliced from the global state by the server
        (named as in the full network; the full state when ``compression`` is 0).
    geometry : TaskGeometry
        Architecture and task geometry.
    compression : float
        Fraction of channels removed per group (0 = full model, no pruning);
        with ``geometry`` it fixes the sub-network's shapes
        (:func:`depl_fl.task.subnets.cached_skeleton`).
    x, y : numpy.ndarray
        The client's training partition.
    epochs, lr, batch_size : int, float, int
        Local SGD settings.
    seed : int
        Seed of the mini-batch order.
    loss : str, optional
        The user's per-sample loss ``PKG.MODULE:NAME``; cross-entropy when ``None``.
    device : str
        Resolved torch device of the training (``cpu``, ``cuda``, ``cuda:N``).

    Returns
    -------
    LocalResult
        The trained sub-network's entries, same names and shapes as
        ``sub_state`` (the server knows which coordinates it sent).

    Raises
    ------
    ValueError
        When ``sub_state`` does not fit the variant's sub-network.
    """
    from depl_fl.task.losses import load_loss
    from depl_fl.task.models import get_state, set_state
    from depl_fl.task.subnets import cached_skeleton
    from depl_fl.task.training import train_local

    # The process's cached sub-network: set_state overwrites every entry, train_local clears the
    # gradients and get_state copies, so nothing of one update reaches the next (clients of a
    # process run one after another), and no copy of the network is made per message.
    model = cached_skeleton(geometry, compression, device)
    set_state(model, sub_state)
    mean_loss, seconds = train_local(model, x, y, epochs, lr, batch_size, seed, loss_fn=load_loss(loss))
    return LocalResult(get_state(model), int(len(y)), float(mean_loss), float(seconds))


def evaluate_state(state: Mapping[str, np.ndarray], geometry: TaskGeometry,
                   x: np.ndarray, y: np.ndarray, loss: str | None = None,
                   device: str = "cpu") -> tuple[float, float]:
    """Loss and accuracy of the full model with weights ``state`` on ``(x, y)``, computed on ``device``."""
    from depl_fl.task.losses import load_loss
    from depl_fl.task.training import evaluate_model

    return evaluate_model(variant_model(state, geometry, 0.0, device), x, y, loss_fn=load_loss(loss))


def initial_state(geometry: TaskGeometry, seed: int) -> dict[str, np.ndarray]:
    """Seeded initial weights of the full global model."""
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import full_network

    return get_state(full_network(geometry, seed=seed))


def evaluate_variant(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float,
                     x: np.ndarray, y: np.ndarray, loss: str | None = None,
                     device: str = "cpu") -> tuple[float, float]:
    """Loss and accuracy of the model variant ``compression`` pruned from ``state``.

    This is the loss DepL tracks: the loss of the model being trained (the
    full model when ``compression`` is 0). Switching models changes it by a
    jump, which is what the contract's ``loss.switch`` profiles describe.
    """
    from depl_fl.task.losses import load_loss
    from depl_fl.task.training import evaluate_model

    return evaluate_model(variant_model(state, geometry, compression, device), x, y,
                          loss_fn=load_loss(loss))


def variant_model(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float,
                  device: str = "cpu") -> Any:
    """The network of variant ``compression`` with its weights pruned from ``state``, on ``device``."""
    from depl_fl.task.subnets import build_skeleton

    return _load_variant(build_skeleton(geometry, compression).to(device), state, geometry, compression)


def loaded_variant(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float,
                   device: str = "cpu") -> Any:
    """:func:`variant_model`'s network and weights, loaded into the process's cached sub-network.

    No copy of the network is made: the result is valid until the next load
    into the same variant (another call, or a client's local update in this
    process), so it is for a use that ends before, such as a central
    evaluation. ``set_state`` overwrites every entry, so nothing of an
    earlier load remains. ``device`` picks the cached copy on that device.
    """
    from depl_fl.task.subnets import cached_skeleton

    return _load_variant(cached_skeleton(geometry, compression, device), state, geometry, compression)


def _load_variant(model: Any, state: Mapping[str, np.ndarray], geometry: TaskGeometry,
                  compression: float) -> Any:
    """Load the entries of variant ``compression``, sliced from the full ``state``, into ``model``."""
    from depl_fl.task.models import set_state
    from depl_fl.task.slicing import extract
    from depl_fl.task.subnets import network_layout

    if compression == 0.0:
        set_state(model, state)
        return model
    set_state(model, extract(state, network_layout(geometry).structure(state, compression)))
    return model


def loss_spread(state: Mapping[str, np.ndarray], geometry: TaskGeometry, compression: float,
                x: np.ndarray, y: np.ndarray, loss: str | None = None, device: str = "cpu") -> float:
    """Standard deviation of the per-sample loss of variant ``compression`` on ``(x, y)``.

    ``loss_spread / sqrt(n)`` is the standard error of the mean loss on ``n``
    samples drawn like ``(x, y)``: how far a split's loss may lie from another's.
    """
    from depl_fl.task.losses import load_loss
    from depl_fl.task.training import per_sample_losses

    model = variant_model(state, geometry, compression, device)
    return float(np.std(per_sample_losses(model, x, y, loss_fn=load_loss(loss)), ddof=1))
