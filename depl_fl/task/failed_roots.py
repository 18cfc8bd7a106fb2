"""Roots whose torch-pruning group walk failed, remembered for graphs traced the same way (one process).

A job traces its network more than once (the layout, the pruned copies that
become its variants, the groups tried one by one when one breaks), each a
deep copy traced the same way. A root whose walk fails (its flatten index
lists pass the cap, :mod:`depl_fl.task.torch_pruning_guard`) fails in every
such graph, after seconds of walking on a windowed attention. The walk is a
function of the graph's structure alone: nodes and their order, operation
types, channel counts, which pruning function triggers which, every index
mapping's settings and the cap; :func:`graph_signature` digests all of it,
naming pruning functions and nodes by their order of appearance instead of
their addresses, so two graphs with one signature walk alike from every root.
Anything it cannot name by value (an object in a mapping's settings) keeps
its address, so such graphs never share a signature.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from depl_fl.task import torch_pruning_speed

#: Signature -> indices (in ``module2node`` order) of the roots whose walk failed; a few recent graphs.
_FAILED: OrderedDict[str, set[int]] = OrderedDict()
_KEPT = 8


def _value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_value(v) for v in value)
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    return f"{type(value).__qualname__}@{id(value)}"  # not comparable by value: never shared


def graph_signature(dg: Any, limit: int | None) -> str | None:
    """A digest of what torch-pruning's group walk reads from ``dg`` (``None`` if it cannot be read).

    Call it with the index mappings up to date (after ``update_index_mapping``).
    """
    from torch_pruning import ops

    nodes = list(dg.module2node.values())
    index = {id(node): i for i, node in enumerate(nodes)}
    owners: dict[int, int] = {}

    def function(fn: Any) -> Any:
        owner = getattr(fn, "__self__", None)
        label = owners.setdefault(id(owner), len(owners)) if owner is not None else None
        return (type(owner).__qualname__, label, getattr(fn, "__qualname__", repr(fn)))

    def mapping(m: Any) -> Any:
        return None if m is None else (type(m).__qualname__, tuple(sorted(
            (k, _value(v)) for k, v in vars(m).items())))

    rows = [limit]
    try:
        for node in nodes:
            module = node.module
            rows.append((
                str(node.type), type(module).__qualname__, str(ops.module2type(module)),
                node.enable_index_mapping, node.pruning_dim,
                _value(dg.get_out_channels(node)), _value(dg.get_in_channels(node)),
                tuple(index[id(n)] for n in node.inputs), tuple(index[id(n)] for n in node.outputs),
                tuple((index[id(dep.source)], index[id(dep.target)], function(dep.trigger),
                       function(dep.handler), tuple(mapping(m) for m in dep.index_mapping))
                      for dep in node.dependencies)))
    except Exception:  # noqa: BLE001 (a graph it cannot describe is never shared)
        return None
    return hashlib.sha256(repr(rows).encode()).hexdigest()


class FailedRoots:
    """The roots of one graph whose walk failed in a graph of the same signature, and those failing now.

    Off (nothing known, nothing kept) while torch-pruning's own code runs
    (:func:`depl_fl.task.torch_pruning_speed.as_released`) and for a graph
    whose channel counts cannot be read. Each question first brings the
    graph's index mappings up to date, as the walk itself would (free when
    nothing changed), and reads the signature again if they changed.
    """

    def __init__(self, dg: Any, limit: int | None) -> None:
        self._dg, self._limit = dg, limit
        self._index = {module: i for i, module in enumerate(dg.module2node)}
        self._stamp: Any = None
        self._signature: str | None = None
        self._failed: set[int] = set()
        self._off = False

    def _current(self) -> str | None:
        from torch_pruning.dependency import index_mapping

        if self._off or not torch_pruning_speed.fast():
            return None
        try:
            index_mapping.update_index_mapping(self._dg)
        except Exception:  # noqa: BLE001 (the walk meets it, as before, and leaves the root out)
            self._off = True
            return None
        stamp = torch_pruning_speed.last_read(self._dg)
        if stamp is None:  # unreadable: off for this graph, so that no question costs an update
            self._off = True
            return None
        if stamp is not self._stamp:
            self._stamp, self._signature = stamp, graph_signature(self._dg, self._limit)
            self._failed = _FAILED.get(self._signature, set()) if self._signature is not None else set()
        return self._signature

    def known(self, module: Any) -> bool:
        """Whether ``module``'s walk failed in a graph of the same signature."""
        return self._current() is not None and self._index.get(module) in self._failed

    def add(self, module: Any) -> None:
        """Remember that ``module``'s walk failed."""
        if self._current() is None or module not in self._index:
            return
        self._failed = _FAILED.setdefault(self._signature, self._failed)
        self._failed.add(self._index[module])
        _FAILED.move_to_end(self._signature)
        while len(_FAILED) > _KEPT:
            _FAILED.popitem(last=False)
