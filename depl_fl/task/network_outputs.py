"""The logits in what a user's forward returns: a tensor, a tuple, a dict or an output object.

Users' networks often return more than the logits: GoogLeNet/Inception-style
``(logits, aux_logits)`` namedtuples in training, ``(logits, embedding)``
pairs, ``{"logits": ...}`` dicts or Hugging Face-style output objects with a
``logits`` attribute. DepL trains, evaluates and checks the logits; a forward
hook (:func:`use_logits`) puts them in place of the whole output, so every
caller sees one tensor. Tracing (torch-pruning's dependency graph) must see
every tensor the forward returns, so that a layer feeding only an auxiliary
output loses its channels with the layers it reads: inside
:func:`raw_outputs` the hook passes the output through and
:func:`output_tensors` lists its tensors. A user's own ``train`` and ``test``
functions (a Flower app's) get the network as written (:func:`as_written`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

#: Inside :func:`raw_outputs`: the hook leaves the forward's output as it is.
_RAW: contextvars.ContextVar[bool] = contextvars.ContextVar("depl_raw_outputs", default=False)


def logits_of(output: Any) -> Any:
    """The logits in ``output``, or ``output`` itself when it holds none DepL recognises.

    A tensor is the logits; a tuple or list (a namedtuple included) holds them
    first; a mapping under the key ``"logits"``; any other object (a
    dataclass, a Hugging Face ``ModelOutput``) as its attribute ``logits``.
    """
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        found = output.get("logits")
    elif isinstance(output, (tuple, list)):
        found = output[0] if output else None
    else:
        found = getattr(output, "logits", None)
    return found if isinstance(found, torch.Tensor) else output


def output_tensors(output: Any) -> list[torch.Tensor]:
    """Every tensor in ``output`` (nested tuples, lists, mappings and dataclasses), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        items: Any = output.values()
    elif isinstance(output, (tuple, list)):
        items = output
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        items = [getattr(output, f.name) for f in dataclasses.fields(output)]
    else:
        logits = getattr(output, "logits", None)
        items = [logits] if logits is not None else []
    return [t for item in items for t in output_tensors(item)]


def _logits_hook(module: nn.Module, args: Any, output: Any) -> Any:
    """Forward hook of the top module: its logits in place of its output (outside :func:`raw_outputs`)."""
    if _RAW.get() or isinstance(output, torch.Tensor):
        return None  # None keeps the output as it is
    return logits_of(output)


def use_logits(model: nn.Module) -> nn.Module:
    """Make ``model``'s forward return its logits (:func:`logits_of`); returns ``model``.

    The hook is a module-level function: the model still pickles and deep-copies.
    """
    if _logits_hook not in model._forward_hooks.values():
        model.register_forward_hook(_logits_hook)
    return model


def as_written(model: nn.Module) -> nn.Module:
    """``model`` without the hook of :func:`use_logits`: its forward returns what the user wrote.

    For the user's own ``train`` and ``test`` functions (a Flower app's), which
    read the network's outputs as their network returns them.
    """
    for key, hook in list(model._forward_hooks.items()):
        if hook is _logits_hook:
            del model._forward_hooks[key]
    return model


@contextlib.contextmanager
def raw_outputs() -> Iterator[None]:
    """Within: models given :func:`use_logits` return their whole output again (for tracing)."""
    token = _RAW.set(True)
    try:
        yield
    finally:
        _RAW.reset(token)
