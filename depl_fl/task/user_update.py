"""A user's own training and test functions on DepL's sub-networks (torch, no flwr).

Flower's quickstart apps train with ``train(net, trainloader, epochs, device)``
and test with ``test(net, testloader, device) -> (loss, accuracy)``. DepL
hands them the variant's sub-network (really fewer channels, rebuilt from the
user's network and the compression, :func:`depl_fl.task.subnets.build_skeleton`)
loaded with the entries the server sent; the trained entries go back. The loss
DepL plans on is whatever ``test`` returns (cross-entropy in the quickstart;
targets are then in its units).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from torch import nn

from depl_fl.errors import ScenarioError
from depl_fl.task.local_update import LocalResult

#: ``train(net, trainloader, epochs, device)``: trains ``net`` in place; may return the mean train loss.
TrainFn = Callable[[nn.Module, Any, int, str], Any]
#: ``test(net, testloader, device) -> (loss, accuracy)``.
TestFn = Callable[[nn.Module, Any, str], tuple[float, float]]


def sample_count(loader: Any) -> int:
    """Number of samples a data loader yields per epoch (``len(loader.dataset)`` when it has one)."""
    dataset = getattr(loader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__"):
        return int(len(dataset))
    return int(sum(len(batch[0]) if isinstance(batch, (tuple, list)) else len(next(iter(batch.values())))
                   for batch in loader))


def reported_loss(value: Any) -> float | None:
    """What the user's ``train`` returned as its train loss: a number, or None when it reported none.

    ``train`` may return nothing (or something that is not a number): the
    reply then carries no ``train-loss``. A returned number is kept as it is,
    so that a non-finite loss (a diverged local update) still gets the reply
    rejected by :mod:`depl_fl.orchestration.reply_checks`.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def user_local_update(network: Any, sub_state: Mapping[str, np.ndarray], compression: float,
                      train: TrainFn, trainloader: Any, epochs: int, device: str = "cpu") -> LocalResult:
    """Load the received sub-network, run the user's ``train`` on it, return its trained entries.

    Parameters
    ----------
    network : UserNetwork or TaskGeometry
        What builds the full network (:class:`depl_fl.task.subnets.UserNetwork`).
    sub_state : mapping of str to array
        The variant's entries as the server sent them.
    compression : float
        The variant (with ``network`` it fixes the sub-network's shapes).
    train : callable
        The user's ``train(net, trainloader, epochs, device)``.
    trainloader : object
        The node's training data loader.
    epochs : int
        Local epochs (from the server's message).
    device : str
        Torch device for training.

    Returns
    -------
    LocalResult
        The trained entries (same names and shapes as ``sub_state``), the
        number of samples, the train loss ``train`` returned (None if none,
        :func:`reported_loss`) and the wall time.
    """
    from depl_fl.task.models import get_state, set_state
    from depl_fl.task.network_outputs import as_written
    from depl_fl.task.subnets import build_skeleton

    net = as_written(build_skeleton(network, float(compression)))
    try:
        set_state(net, sub_state)
    except ValueError as exc:
        raise ValueError(f"the entries the server sent do not fit this node's network "
                         f"{getattr(network, 'name', '')!r}: the ServerApp and the ClientApp must describe "
                         f"the same UserNetwork (builder and input shape); {exc}") from exc
    net.to(device)
    start = time.perf_counter()
    try:
        loss = train(net, trainloader, int(epochs), device)
    except Exception as exc:  # the user's code: one line with what DepL knows about the shapes
        raise ScenarioError(f"train failed on this node's train loader: {type(exc).__name__}: {exc}"
                            f"{shape_hint(network, trainloader)}") from exc
    seconds = time.perf_counter() - start
    return LocalResult(get_state(net.cpu()), sample_count(trainloader), reported_loss(loss),
                       float(seconds))


def variant_network(network: Any, state: Mapping[str, np.ndarray], compression: float) -> nn.Module:
    """The sub-network of variant ``compression`` with its entries sliced from the full ``state``."""
    from depl_fl.task.models import set_state
    from depl_fl.task.network_outputs import as_written
    from depl_fl.task.slicing import extract
    from depl_fl.task.subnets import build_skeleton, network_layout

    net = as_written(build_skeleton(network, float(compression)))
    if compression <= 0:
        set_state(net, state)
    else:
        set_state(net, extract(state, network_layout(network).structure(state, float(compression))))
    return net


def user_evaluate(network: Any, state: Mapping[str, np.ndarray], compression: float, test: TestFn,
                  testloader: Any, device: str = "cpu") -> tuple[float, float]:
    """The user's ``test`` on the variant ``compression`` of the global ``state``: ``(loss, accuracy)``."""
    net = variant_network(network, state, compression).to(device)
    try:
        result = test(net, testloader, device)
    except Exception as exc:  # the user's code: one line with what DepL knows about the shapes
        raise ScenarioError(f"test failed on the server's test loader: {type(exc).__name__}: {exc}"
                            f"{shape_hint(network, testloader)}") from exc
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ScenarioError(f"test must return (loss, accuracy), got {type(result).__name__} {result!r:.80}")
    loss, accuracy = result
    return float(loss), float(accuracy)


def first_input_shape(loader: Any) -> tuple[int, ...] | None:
    """Shape of the inputs of the loader's first batch (``batch[0]`` of a tuple), None if unknown."""
    try:
        batch = next(iter(loader))
    except Exception:  # noqa: BLE001 - only a hint: any loader that cannot say gives none
        return None
    inputs = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    shape = getattr(inputs, "shape", None)
    return tuple(int(d) for d in shape) if shape is not None and not isinstance(inputs, Mapping) else None


def shape_hint(network: Any, loader: Any) -> str:
    """`` (the network takes ...; the loader's first batch has ...)`` when they disagree, else empty.

    Read only after the user's function failed (iterating a loader draws from its random generator).
    """
    from depl_fl.task.subnets import input_shape_of

    shape = first_input_shape(loader)
    expected = input_shape_of(network)
    if shape is None or tuple(shape[1:]) == tuple(expected):
        return ""
    return (f" (the network takes one sample of shape {tuple(expected)}, the UserNetwork's input_shape; "
            f"the loader's first batch has inputs of shape {shape})")
