"""Compiled networks: a ``torch.compile`` wrapper unwrapped, a TorchScript module refused in one line.

DepL traces a network through forward hooks and autograd and slices its
layers' weights in place. ``torch.compile`` only changes how a forward runs,
so the eager module it wraps is what DepL uses; a ``torch.jit`` module runs
its layers inside TorchScript, out of reach of both.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from depl_fl.errors import ScenarioError


def eager(model: nn.Module) -> nn.Module:
    """``model`` with every ``torch.compile`` wrapper (``OptimizedModule``) replaced by the module it wraps.

    ``torch.compile`` changes how a forward runs, not what it computes; DepL
    traces, slices and trains the eager module (whose entries lack the
    wrapper's ``_orig_mod.`` prefix). A compiled submodule is replaced in its
    parent; the network itself is returned unwrapped.
    """
    dynamo = sys.modules.get("torch._dynamo.eval_frame")  # imported by torch.compile; slow to import else
    if dynamo is None:
        return model
    OptimizedModule = dynamo.OptimizedModule  # noqa: N806 (torch's class)
    while isinstance(model, OptimizedModule):
        model = model._orig_mod
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            while isinstance(child, OptimizedModule):
                child = child._orig_mod
                setattr(module, name, child)
    return model


def refuse_compiled(model: nn.Module, name: str) -> None:
    """One line when the network is, or holds, a ``torch.jit`` module (``torch.jit.script``/``trace``).

    A compiled module runs its layers inside TorchScript: no forward hook sees
    them, so DepL can neither trace which channels they read nor slice their
    weights, nor put the logits hook on a compiled network.
    """
    for prefix, module in model.named_modules():
        if isinstance(module, torch.jit.ScriptModule):
            where = f"layer {prefix!r} is" if prefix else "the network is"
            raise ScenarioError(f"model {name}: {where} compiled by torch.jit ({type(module).__name__}), "
                                "whose layers DepL can neither trace nor slice; give DepL the eager module "
                                "(compile it after training)")
