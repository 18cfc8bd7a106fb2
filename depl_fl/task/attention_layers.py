"""Which layers of a traced network belong to an attention (their channels are kept whole).

An attention is an ``nn.MultiheadAttention``, a fused attention kernel, or a
matrix product of two activations (``q @ k^T``, ``A @ v``), read off the
autograd nodes torch-pruning's dependency graph traced.
"""

from __future__ import annotations

from typing import Any

from torch import nn

#: Autograd nodes of matrix products: an attention's ``Q K^T`` and ``A V`` when both factors are activations.
_PRODUCTS = frozenset({"MmBackward0", "BmmBackward0", "BaddbmmBackward0", "AddmmBackward0",
                       "AddbmmBackward0", "MvBackward0", "DotBackward0"})
#: Autograd nodes that only reshape, reorder, copy or select one input (a weight stays a weight through them).
_VIEWS = ("TBackward", "ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward", "ExpandBackward",
          "TransposeBackward", "PermuteBackward", "CloneBackward", "SqueezeBackward", "UnsqueezeBackward",
          "ToCopyBackward", "SliceBackward", "SelectBackward", "UnbindBackward", "SplitBackward")


def from_parameter(fn: Any) -> bool:
    """Whether an autograd input is a parameter, possibly reshaped or sliced (a layer's weight)."""
    while fn is not None:
        if type(fn).__name__ == "AccumulateGrad":
            return True
        inputs = [f for f, _ in fn.next_functions if f is not None]
        if not fn.name().startswith(_VIEWS) or len(inputs) != 1:
            return False
        fn = inputs[0]
    return False


def is_attention_node(node: Any) -> bool:
    """A fused attention kernel or a product of two activations (not a layer's weight times its input)."""
    fn = node.grad_fn
    name = fn.name() if fn is not None and hasattr(fn, "name") else ""
    if "Attention" in name:
        return True
    if name not in _PRODUCTS:
        return False
    factors = [f for f, _ in fn.next_functions if f is not None]
    return sum(not from_parameter(f) for f in factors) >= 2


def attention_modules(groups: list[Any], root_types: tuple[type, ...]) -> set[nn.Module]:
    """The layers of every attention: those in a group whose channels an attention product reads.

    For ``nn.MultiheadAttention`` that is the module itself (its fused
    projections read and write the embedding); for an attention written by
    hand, the query, key and value projections and the output projection.
    Every group holding one of these layers is kept whole: the embedding they
    read and write as well as the query, key and value channels.
    """
    layers: set[nn.Module] = set()
    for group in groups:
        modules = [item.dep.target.module for item in group.items]
        fused = [m for m in modules if isinstance(m, nn.MultiheadAttention)]
        if fused:  # torch-pruning couples its inner products to the embedding: the module alone counts
            layers.update(fused)
        elif any(is_attention_node(item.dep.target) for item in group.items):
            layers.update(m for m in modules if isinstance(m, root_types))
    return layers
