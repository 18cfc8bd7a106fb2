"""Per-sample losses a user brings (``model.loss=tests.user_losses:NAME``), good and bad.

Importable on every node of a loopback deployment (the FAB ships ``tests/*.py``
other than ``test_*.py``), like :mod:`tests.user_nets`.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

#: What :func:`ce_plus_ten` adds to the cross-entropy: its gradient is the cross-entropy's,
#: so a job trains exactly as with cross-entropy while every loss it records is 10 higher.
OFFSET = 10.0


def ce_plus_ten(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy plus :data:`OFFSET` per sample."""
    return F.cross_entropy(logits, targets, reduction="none") + OFFSET


def label_smoothed_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy with label smoothing 0.1, per sample."""
    return F.cross_entropy(logits, targets, reduction="none", label_smoothing=0.1)


NOT_CALLABLE = 3


def batch_mean(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean over the batch: a scalar, not one loss per sample."""
    return F.cross_entropy(logits, targets)


def column(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One loss per sample, but shaped ``(n, 1)``."""
    return F.cross_entropy(logits, targets, reduction="none")[:, None]


def negative(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Minus the cross-entropy: below the loss model's floor of 0."""
    return -F.cross_entropy(logits, targets, reduction="none")


def batch_centred(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each sample's cross-entropy over the batch's mean: depends on the rest of the batch."""
    ce = F.cross_entropy(logits, targets, reduction="none")
    return ce / ce.mean()


def detached(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy without a gradient."""
    return F.cross_entropy(logits.detach(), targets, reduction="none")


def raises(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A loss that fails on every call."""
    raise RuntimeError("expected a one-hot target")


def integer(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Integer 'losses' (argmax misses)."""
    return (logits.argmax(dim=1) != targets).long()
