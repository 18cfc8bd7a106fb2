"""Local training and evaluation of a (possibly pruned) model.

Optimiser: SGD with momentum 0.9 (fresh each call, i.e. each federated round),
the update rule of ``torch.optim.SGD(lr, momentum=0.9)`` written out in
:func:`sgd_momentum_step`: constructing a ``torch.optim`` optimiser imports
``torch._dynamo`` (about 1.3 s per process), which a deployment pays on every
message because Flower starts one ClientApp process per message.
With the zoo's He initialisation, ``lr=0.05`` and ``batch_size=32``, eight
IID digits clients (one local epoch per round) bring the global test loss from
about 2.4 to below 1 within three FedAvg rounds. Mini-batch order comes from a
generator seeded with ``seed``, so a call is deterministic for a given seed,
model state and thread count. Setting the number of torch threads is the
caller's job. Training and evaluation run on the model's device (``train.device``,
:mod:`depl_fl.task.devices`): the data goes there, the figures come back as
Python numbers and CPU arrays; the mini-batch order is drawn on the CPU, so it
is the same on every device. The loss is cross-entropy unless ``loss_fn`` gives a user's
per-sample loss (:mod:`depl_fl.task.losses`). A network whose BatchNorm cannot
normalise a single sample never trains on a batch of one (:func:`batch_starts`).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from depl_fl.errors import ScenarioError
from depl_fl.task.losses import LossFn

MOMENTUM = 0.9


def _as_tensors(
    x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    xt = (x if torch.is_tensor(x) else torch.as_tensor(np.asarray(x, dtype=np.float32))).float()
    yt = (y if torch.is_tensor(y) else torch.as_tensor(np.asarray(y))).long()
    if xt.shape[0] != yt.shape[0]:
        raise ScenarioError(f"x has {xt.shape[0]} samples but y has {yt.shape[0]}")
    if device is not None:  # on the CPU a no-op: the very tensors above
        xt, yt = xt.to(device), yt.to(device)
    return xt, yt


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (the CPU for a model without any)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def batch_starts(n: int, batch_size: int, fold_single: bool) -> list[tuple[int, int]]:
    """The ``(start, stop)`` of every mini-batch of ``n`` samples.

    With ``fold_single``, a last batch of one sample joins the one before it:
    BatchNorm cannot normalise a single sample in training (one value per
    channel after a flatten or a global pooling), so a partition of
    ``k * batch_size + 1`` samples would fail its last step.
    """
    bounds = [(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]
    if fold_single and len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] == 1:
        bounds[-2:] = [(bounds[-2][0], n)]
    return bounds


def one_sample_breaks_batch_norm(model: nn.Module, x_one: torch.Tensor) -> bool:
    """Whether a BatchNorm of ``model`` sees one value per channel for one sample.

    Such a layer cannot train on a batch of one (after a flatten or a global
    pooling); a BatchNorm over a feature map can, and its batches stay as they
    are. The probe is one evaluation-mode forward without gradients, so no
    running statistic moves.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return False
    values: list[int] = []
    hooks = [m.register_forward_pre_hook(lambda _m, inp: values.append(int(inp[0][0, 0].numel())))
             for m in norms]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x_one)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return 1 in values


def train_local(
    model: nn.Module,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    loss_fn: LossFn | None = None,
) -> tuple[float, float]:
    """Train ``model`` in place on ``(x, y)`` with mini-batch SGD (momentum 0.9).

    Parameters
    ----------
    model : torch.nn.Module
        Model to train (modified in place).
    x : array, shape (n, C, H, W)
        float32 images.
    y : array, shape (n,)
        Integer labels.
    epochs : int
        Passes over the data (>= 1).
    lr : float
        Learning rate (> 0).
    batch_size : int
        Mini-batch size (>= 1).
    seed : int
        Seed of the mini-batch shuffling.
    loss_fn : callable, optional
        Per-sample loss (:mod:`depl_fl.task.losses`); cross-entropy when ``None``.

    Returns
    -------
    mean_loss : float
        Sample-weighted mean loss over all mini-batches of all epochs.
    seconds : float
        Wall time of the training loop.
    """
    if epochs < 1 or batch_size < 1 or not lr > 0:
        raise ScenarioError(f"need epochs >= 1, batch_size >= 1, lr > 0 (got {epochs}, {batch_size}, {lr})")
    device = model_device(model)
    xt, yt = _as_tensors(x, y, device)
    n = xt.shape[0]
    if n == 0:
        raise ScenarioError("cannot train on an empty partition")
    gen = torch.Generator().manual_seed(int(seed))
    params = [p for p in model.parameters() if p.requires_grad]
    buffers: list[torch.Tensor | None] = [None] * len(params)
    model.train()
    total, count = 0.0, 0
    start = time.perf_counter()
    fold = n > batch_size and n % batch_size == 1 and one_sample_breaks_batch_norm(model, xt[:1])
    bounds = batch_starts(n, batch_size, fold)
    # Stochastic layers (dropout, stochastic depth) draw from torch's global generator: seeded from
    # ``seed`` inside the loop and restored after it, so an update is reproducible and leaves the
    # caller's random state as it was.
    on_gpu = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=on_gpu):
        torch.manual_seed(int(seed))
        for _ in range(epochs):
            order = torch.randperm(n, generator=gen).to(device)  # drawn on the CPU: one order on every device
            for i, stop in bounds:
                idx = order[i:stop]
                for p in params:
                    p.grad = None
                loss = _batch_loss(model(xt[idx]), yt[idx], loss_fn)
                loss.backward()
                sgd_momentum_step(params, buffers, lr)
                total += float(loss.detach()) * len(idx)
                count += len(idx)
    seconds = time.perf_counter() - start
    return total / count, seconds


def _batch_loss(logits: torch.Tensor, target: torch.Tensor, loss_fn: LossFn | None) -> torch.Tensor:
    """Mean loss of a mini-batch (cross-entropy when ``loss_fn`` is ``None``)."""
    if loss_fn is None:
        return F.cross_entropy(logits, target)
    return loss_fn(logits, target).mean()


def _sample_losses(logits: torch.Tensor, target: torch.Tensor, loss_fn: LossFn | None) -> torch.Tensor:
    """Per-sample losses of a batch (cross-entropy when ``loss_fn`` is ``None``)."""
    if loss_fn is None:
        return F.cross_entropy(logits, target, reduction="none")
    return loss_fn(logits, target)


@torch.no_grad()
def sgd_momentum_step(params: list[torch.Tensor], buffers: list[torch.Tensor | None], lr: float,
                      momentum: float = MOMENTUM) -> None:
    """One step of ``torch.optim.SGD(params, lr, momentum)`` (no dampening, decay or Nesterov).

    ``buf = grad`` on the first step, then ``buf = momentum * buf + grad``;
    ``param -= lr * buf``. Parameters without a gradient are skipped, as in
    torch. ``buffers`` (one slot per parameter, ``None`` at the start) holds
    the momentum between steps and is updated in place.
    """
    for i, param in enumerate(params):
        grad = param.grad
        if grad is None:
            continue
        buf = buffers[i]
        if buf is None:
            buf = buffers[i] = grad.detach().clone()
        else:
            buf.mul_(momentum).add_(grad)
        param.add_(buf, alpha=-lr)


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    batch_size: int = 512,
    loss_fn: LossFn | None = None,
) -> tuple[float, float]:
    """Mean loss (cross-entropy unless ``loss_fn``) and accuracy of ``model`` on ``(x, y)``.

    Returns
    -------
    loss : float
        Mean loss over all samples.
    accuracy : float
        Fraction of correctly classified samples.
    """
    loss_sum, correct, n = 0.0, 0, 0
    for logits, target in _eval_batches(model, x, y, batch_size):
        batch_loss, batch_correct = _batch_figures(logits, target, loss_fn)
        loss_sum, correct, n = loss_sum + batch_loss, correct + batch_correct, n + len(target)
    return loss_sum / n, correct / n


def _eval_batches(model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
                  batch_size: int):
    """``(logits, labels)`` of every evaluation batch (evaluation mode; the caller disables grad)."""
    xt, yt = _as_tensors(x, y, model_device(model))
    if xt.shape[0] == 0:
        raise ScenarioError("cannot evaluate on an empty set")
    model.eval()
    for i in range(0, xt.shape[0], batch_size):
        yield model(xt[i:i + batch_size]), yt[i:i + batch_size]


def _batch_figures(logits: torch.Tensor, target: torch.Tensor, loss_fn: LossFn | None) -> tuple[float, int]:
    """Summed loss (cross-entropy unless ``loss_fn``) and correct predictions of one batch."""
    loss = (float(F.cross_entropy(logits, target, reduction="sum")) if loss_fn is None
            else float(loss_fn(logits, target).sum()))
    return loss, int((logits.argmax(dim=1) == target).sum())


@torch.no_grad()
def evaluate_with_losses(model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
                         batch_size: int = 512, loss_fn: LossFn | None = None
                         ) -> tuple[float, float, np.ndarray]:
    """:func:`evaluate_model` and :func:`per_sample_losses` from one forward pass.

    Each figure is computed from the same logits as in those two functions,
    so the three equal theirs bit for bit at half the cost.

    Returns
    -------
    loss : float
        Mean loss (cross-entropy unless ``loss_fn``) over all samples.
    accuracy : float
        Fraction of correctly classified samples.
    losses : ndarray
        Loss of every sample.
    """
    loss_sum, correct, n, out = 0.0, 0, 0, []
    for logits, target in _eval_batches(model, x, y, batch_size):
        if loss_fn is None:
            batch_loss, losses = _cross_entropy_sum_and_samples(logits, target)
            batch_correct = int((logits.argmax(dim=1) == target).sum())
        else:
            batch_loss, batch_correct = _batch_figures(logits, target, loss_fn)
            losses = _sample_losses(logits, target, loss_fn)
        loss_sum, correct, n = loss_sum + batch_loss, correct + batch_correct, n + len(target)
        out.append(losses)
    return loss_sum / n, correct / n, torch.cat(out).cpu().numpy().astype(float)


def _cross_entropy_sum_and_samples(logits: torch.Tensor, target: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Summed and per-sample cross-entropy of a batch from one log-softmax.

    ``F.cross_entropy`` of class targets is ``F.nll_loss`` of the log-softmax
    (that is how torch computes it), so both figures equal the two
    ``F.cross_entropy`` calls bit for bit; the log-softmax, the costly part,
    is taken once.
    """
    log_probs = F.log_softmax(logits, dim=1)
    return float(F.nll_loss(log_probs, target, reduction="sum")), F.nll_loss(log_probs, target,
                                                                             reduction="none")


@torch.no_grad()
def per_sample_losses(model: nn.Module, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
                      batch_size: int = 512, loss_fn: LossFn | None = None) -> np.ndarray:
    """Loss of every sample of ``(x, y)`` under ``model`` (evaluation mode, no gradient).

    The loss is cross-entropy unless ``loss_fn`` gives a user's per-sample loss.
    """
    xt, yt = _as_tensors(x, y, model_device(model))
    if xt.shape[0] == 0:
        raise ScenarioError("cannot evaluate on an empty set")
    model.eval()
    out = [_sample_losses(model(xt[i:i + batch_size]), yt[i:i + batch_size], loss_fn)
           for i in range(0, xt.shape[0], batch_size)]
    return torch.cat(out).cpu().numpy().astype(float)
