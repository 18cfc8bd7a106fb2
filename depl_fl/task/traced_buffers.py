"""Per-channel buffers of a user's modules, traced as parameters so that their channels are pruned.

torch-pruning's dependency graph follows the autograd graph, which a buffer
reaches only as a constant: a fixed per-channel scale would keep its full
length while its channels go. Inside :func:`buffers_as_parameters` such
buffers are parameters; after it, buffers again, in their first order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn


def _wrapped(module: nn.Module) -> bool:
    """Whether torch-pruning prunes ``module``'s own entries itself (a convolution, a BatchNorm...)."""
    import torch_pruning as tp

    kind = tp.ops.module2type(module)
    return kind in tp.pruner.function.PrunerBox and kind != tp.ops.OPTYPE.ELEMENTWISE


def traced_buffers(model: nn.Module, x: torch.Tensor) -> list[str]:
    """Turn per-channel buffers of the user's own modules into parameters, so that tracing sees them.

    A fixed per-channel scale (``register_buffer("scale", torch.ones(C))``)
    reaches the autograd graph only as a parameter; torch-pruning then slices
    it with its channels like a layer scale. Buffers of layers it knows
    (BatchNorm's statistics) and non-persistent buffers stay as they are.
    A forward that cannot run with them as parameters (one that updates a
    buffer in place) keeps them all as buffers. ``model`` is in evaluation
    mode. Returns their names, for :func:`_restore_buffers`.
    """
    order = _buffer_order(model)
    names = _buffers_to_parameters(model)
    if names:
        try:
            with torch.enable_grad():
                model(x)
        except Exception:  # user code that needs its buffers as buffers: trace them as constants
            _restore_buffers(model, names, order)
            return []
    return names


def _buffers_to_parameters(model: nn.Module) -> list[str]:
    names = []
    for prefix, module in model.named_modules():
        if _wrapped(module):
            continue
        for key, buf in list(module._buffers.items()):
            if (buf is None or not buf.is_floating_point() or buf.dim() == 0
                    or key in module._non_persistent_buffers_set):
                continue
            del module._buffers[key]
            module.register_parameter(key, nn.Parameter(buf.detach().clone()))
            names.append(f"{prefix}.{key}" if prefix else key)
    return names


def _restore_buffers(model: nn.Module, names: list[str], order: dict[str, list[str]]) -> None:
    """Undo :func:`traced_buffers` (keeping any pruning), each module's buffers in their first order."""
    for full in names:
        prefix, _, key = full.rpartition(".")
        module = model.get_submodule(prefix) if prefix else model
        tensor = module._parameters.pop(key).detach()
        module._buffers[key] = tensor
        module._buffers = {k: module._buffers[k] for k in order[prefix] if k in module._buffers}


def _buffer_order(model: nn.Module) -> dict[str, list[str]]:
    return {prefix: list(module._buffers) for prefix, module in model.named_modules()}


def buffers_traced(model: nn.Module, x: torch.Tensor) -> Callable[[nn.Module], None]:
    """Per-channel buffers traced as parameters in ``model`` for good (a throwaway copy).

    Returns a function that restores them as buffers in a copy of it.
    """
    order = _buffer_order(model)
    names = traced_buffers(model, x)
    return lambda copy_: _restore_buffers(copy_, names, order)


@contextlib.contextmanager
def buffers_as_parameters(model: nn.Module, x: torch.Tensor) -> Iterator[Callable[[nn.Module], None]]:
    """Per-channel buffers traced as parameters inside the block, buffers again after it.

    Yields a function that restores them in a copy made inside the block.
    """
    order = _buffer_order(model)
    names = traced_buffers(model, x)
    try:
        yield lambda copy_: _restore_buffers(copy_, names, order)
    finally:
        _restore_buffers(model, names, order)
