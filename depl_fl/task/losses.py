"""The loss of a job: cross-entropy, or a user's per-sample loss ``model.loss=PKG.MODULE:NAME``.

A user's loss is a callable ``NAME(logits, targets) -> losses``:

* ``logits``: float tensor of shape ``(n, K)``, the network's output for a
  batch of ``n`` samples (``K`` = number of classes);
* ``targets``: int64 tensor of shape ``(n,)``, the class labels in ``[0, K)``;
* ``losses``: float tensor of shape ``(n,)``, each sample's loss: finite,
  non-negative (the loss model clamps the loss at 0), differentiable in
  ``logits``, and depending on that sample alone (not on the rest of the
  batch: training batches and evaluation batches differ in size).

Local training minimises the batch mean; every evaluation (the client's, the
server's validation and test losses, the per-sample losses of the stop margin,
the exploration's scores) averages it over samples. ``target.loss`` and the
loss profile are then in its units. The module must be importable wherever
the job runs, like ``model.factory``. :func:`check_loss` refuses a spec that
breaks the contract on a probe batch, in one line, before anything trains.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Mapping

import torch
from torch.nn import functional as F

from depl_fl.errors import ScenarioError
from depl_fl.task.factory import load_factory

#: ``loss_fn(logits, targets) -> per-sample losses``.
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
FIELD = "model.loss"
#: Samples of the probe batch :func:`check_loss` feeds a user's loss.
PROBE_SAMPLES = 6


def loss_spec(cfg: Mapping[str, Any]) -> str | None:
    """``model.loss`` of ``cfg``: a spec ``PKG.MODULE:NAME``, or ``None`` for cross-entropy."""
    spec = (cfg.get("model") or {}).get("loss")
    return None if spec in (None, "", "None", "null") else str(spec)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy, the default loss."""
    return F.cross_entropy(logits, targets, reduction="none")


@lru_cache(maxsize=16)
def load_loss(spec: str | None) -> LossFn | None:
    """The user's loss named by ``spec``; ``None`` (cross-entropy) when ``spec`` is ``None``.

    Raises
    ------
    ScenarioError
        The spec cannot be imported or is not callable (one line).
    """
    return None if spec is None else load_factory(spec, field=FIELD)


def check_loss(spec: str | None, num_classes: int, network: Any = None) -> None:
    """Refuse a ``model.loss`` that breaks the contract on a seeded probe batch (one line).

    Checks that the callable returns a floating tensor of shape ``(n,)``, finite
    and non-negative, with a finite gradient in the logits, and that each
    sample's loss does not change when the batch is cut in two. The probe's
    logits are the outputs of ``network`` (a task geometry or a
    :class:`depl_fl.task.subnets.UserNetwork`) for :data:`PROBE_SAMPLES` example
    samples when it is given: what the loss will read (a network ending in
    ``log_softmax`` gives log-probabilities, on which a negative log-likelihood
    is never negative); else seeded standard normal numbers.
    """
    fn = load_loss(spec)
    if fn is None:
        return
    k = int(num_classes)
    if network is not None:
        from depl_fl.task.subnets import probe_outputs

        logits = probe_outputs(network, PROBE_SAMPLES).to(torch.float32).clone().requires_grad_(True)
    else:
        gen = torch.Generator().manual_seed(0)
        logits = torch.randn(PROBE_SAMPLES, k, generator=gen).requires_grad_(True)
    targets = torch.arange(PROBE_SAMPLES) % k
    out = _probe(fn, spec, logits, targets)
    if not out.requires_grad:
        raise ScenarioError(f"{FIELD} {spec!r}: the loss has no gradient in the logits")
    (grad,) = torch.autograd.grad(out.sum(), logits, allow_unused=True)
    if grad is None or not bool(torch.isfinite(grad).all()):
        raise ScenarioError(f"{FIELD} {spec!r}: the loss has no finite gradient in the logits")
    half = PROBE_SAMPLES // 2
    with torch.no_grad():
        parts = torch.cat([_probe(fn, spec, logits[:half], targets[:half]),
                           _probe(fn, spec, logits[half:], targets[half:])])
    if not torch.allclose(parts, out.detach(), rtol=1e-4, atol=1e-6):
        raise ScenarioError(f"{FIELD} {spec!r}: a sample's loss changes with the rest of the batch; "
                            "return each sample's own loss (reduction='none')")


def _probe(fn: LossFn, spec: str | None, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``fn(logits, targets)`` checked for type, shape, finiteness and sign."""
    try:
        out = fn(logits, targets)
    except Exception as exc:  # user code: report it in one line
        raise ScenarioError(f"{FIELD} {spec!r} failed on logits of shape {tuple(logits.shape)}: "
                            f"{type(exc).__name__}: {exc}") from None
    n = logits.shape[0]
    if not torch.is_tensor(out) or not out.is_floating_point():
        raise ScenarioError(f"{FIELD} {spec!r} returned {type(out).__name__}"
                            f"{'' if not torch.is_tensor(out) else f' of {out.dtype}'}, "
                            f"not a float tensor of per-sample losses")
    if tuple(out.shape) != (n,):
        raise ScenarioError(f"{FIELD} {spec!r} returned shape {tuple(out.shape)} for {n} samples; "
                            f"expected ({n},), one loss per sample (reduction='none')")
    if not bool(torch.isfinite(out).all()) or bool((out < 0).any()):
        raise ScenarioError(f"{FIELD} {spec!r} returned a negative or non-finite loss; "
                            "losses must be finite and >= 0")
    return out
