"""torch-pruning 1.6.1's group walk and index-mapping update, made fast with the same results.

``DependencyGraph.get_pruning_group`` reruns ``update_index_mapping`` over the
whole graph on every call, and each reshape or expand node there sizes its
channels with ``infer_out_channels_recursively`` /
``infer_in_channels_recursively``: walks without memory that revisit every
branch of every residual add, millions of calls on a windowed attention
(torchvision's Swin Transformer), a second per group. Four changes, none to
what torch-pruning computes:

- Within one update no channel count changes, so a walk's outcome from a
  node is a function of the node alone: its answer and how many steps it
  takes (each recursive call counts one step on a counter the caller
  shares; torch-pruning gives up, returning ``None``, once the counter
  passes ``MAX_RECURSION_DEPTH``). Both are memoized per update
  (:class:`_Walker`); a walk that would pass the limit runs torch-pruning's
  steps node by node (:class:`_Limited`), memoized by node and counter, so
  every answer and every counter is torch-pruning's (a warning it would
  repeat, which Python shows once, is not repeated). Channel counts are
  read once per update.
- An update whose inputs (channel counts, split and concatenation sizes, the
  mappings in place: :class:`_Read`) are those the last update left would
  write what it wrote then, so it is skipped: a graph's group walk updates
  once, pruning reruns it.
- The flatten index mapping builds its (often very long) index lists with
  the same values in the same order in C (:func:`flatten_indices`,
  :func:`unflatten_indices`).
- No cyclic garbage collection inside ``get_pruning_group``: its millions of
  short-lived indices made the collector run thousands of times.

:func:`as_released` turns them off, to compare with torch-pruning's own code.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

#: Whether the fast paths run (:func:`as_released` turns them off to compare with torch-pruning's own).
_FAST: list[bool] = [True]

#: Per running ``update_index_mapping`` (innermost last): node walk -> (answer, steps) or ``None``
#: (more steps than the limit allows from any start, or a walk that failed); limited walk from a
#: node and counter -> (answer, counter after).
_MEMOS: list[dict[tuple, tuple[Any, int] | None]] = []


_IDX, _ROOT = operator.itemgetter(0), operator.itemgetter(1)
_UNSEEN = object()


class _TooLong(Exception):
    """A walk takes more steps than torch-pruning allows, or fails: torch-pruning's code answers it."""


def _limit(shape_infer: ModuleType) -> int:
    return int(shape_infer.constants.MAX_RECURSION_DEPTH)


class _Walker:
    """torch-pruning's channel walks without their step limit, each answer and step count memoized."""

    def __init__(self, graph: Any, memo: dict, ops: ModuleType, budget: int) -> None:
        self.graph, self.memo, self.ops, self.budget = graph, memo, ops, budget

    def walk(self, node: Any, outward: bool) -> tuple[Any, int]:
        """``(answer, steps)`` of the walk from ``node`` (``outward``: its output channels)."""
        key = ("out" if outward else "in", node)
        if key in self.memo:
            found = self.memo[key]
            if found is None:
                raise _TooLong
            return found
        self.memo[key] = None  # a walk that raises leaves this mark: later ones are torch-pruning's
        steps = _Steps(self)
        answer = (self._out if outward else self._in)(node, steps)
        self.memo[key] = (answer, steps.taken)
        return answer, steps.taken

    def _out(self, node: Any, steps: _Steps) -> Any:
        """``infer_out_channels_recursively``'s answer, its steps counted on ``steps``."""
        ch = self.graph.get_out_channels(node)
        if ch is not None:
            return ch
        ch = 0
        for in_node in node.inputs:
            if node.type == self.ops.OPTYPE.CONCAT:
                sub_ch = steps.walk(in_node, True)
                if sub_ch is None:
                    return None
                ch += sub_ch
            elif in_node.type == self.ops.OPTYPE.SPLIT and in_node.module.split_sizes is not None:
                ch = _split_size(in_node, node, ch)
            else:
                ch = steps.walk(in_node, True)
        return None if ch == 0 else ch

    def _in(self, node: Any, steps: _Steps) -> Any:
        """``infer_in_channels_recursively``'s answer, its steps counted on ``steps``."""
        ch = self.graph.get_in_channels(node)
        if ch is not None:
            return ch
        ch = 0
        for out_node in node.outputs:
            if node.type == self.ops.OPTYPE.SPLIT:
                sub_ch = steps.walk(out_node, False)
                if sub_ch is None:
                    return None
                ch += sub_ch
            if out_node.type == self.ops.OPTYPE.CONCAT:
                return self._into_concat(node, out_node, steps)
            ch = steps.walk(out_node, False)
        return None if ch == 0 else ch

    def _into_concat(self, node: Any, concat: Any, steps: _Steps) -> Any:
        """The concatenation's channels less its other inputs' (torch-pruning counts no step for these)."""
        concat_output_channels = steps.walk(concat, False, step=False)
        siblings = []
        for in_node in concat.inputs:
            if in_node != node:
                s = steps.walk(in_node, True, step=False)
                if s is not None:
                    siblings.append(s)
        if concat_output_channels is None or len(siblings) == 0:
            return None
        return concat_output_channels - sum(siblings)


class _Steps:
    """The steps one walk takes: one per recursive call torch-pruning counts, and those of the calls."""

    def __init__(self, walker: _Walker) -> None:
        self.walker, self.taken = walker, 0

    def walk(self, node: Any, outward: bool, step: bool = True) -> Any:
        self.taken += int(step)
        answer, taken = self.walker.walk(node, outward)
        self.taken += taken
        if self.taken > self.walker.budget:
            raise _TooLong
        return answer


def _split_size(split: Any, node: Any, ch: Any) -> Any:
    """The size of ``split``'s output that is ``node`` (the last one matching), else ``ch``."""
    for i, split_out_node in enumerate(split.outputs):
        if split_out_node == node:
            ch = split.module.split_sizes[i]
    return ch


class _Limited:
    """torch-pruning's channel walks with their step limit, exactly: memoized where the limit is not reached.

    A walk from a node whose steps fit below the limit is read from the
    memo; one that reaches it runs torch-pruning's own steps here, node by
    node, each child again read from the memo when it fits. Entering past
    the limit is torch-pruning's own function (its warning included).
    """

    def __init__(self, graph: Any, memo: dict, ops: ModuleType, limit: int) -> None:
        self.graph, self.ops, self.limit, self.memo = graph, ops, limit, memo
        self.walker = _Walker(graph, memo, ops, limit + 1)

    def enter(self, node: Any, outward: bool, depth: list) -> Any:
        """``infer_out_channels_recursively`` (``outward``) or ``infer_in_channels_recursively``."""
        if depth[0] > self.limit:
            return _OWN[outward](self.graph, node, depth)
        found = self.memo.get(("out" if outward else "in", node), _UNSEEN)
        if found is _UNSEEN:
            try:
                found = self.walker.walk(node, outward)
            except Exception:  # noqa: BLE001 (too long, or failing: the steps below meet it as torch-pruning does)
                found = None
        if found is not None and depth[0] + found[1] <= self.limit:
            depth[0] += found[1]
            return found[0]
        # Within one update a limited walk is a function of its node and its counter at entry too
        # (only the warnings it repeats, which Python shows once, are not repeated).
        key = ("limited", outward, node, depth[0])
        if key in self.memo:
            answer, depth[0] = self.memo[key]
            return answer
        answer = (self._out if outward else self._in)(node, depth)
        self.memo[key] = (answer, depth[0])
        return answer

    def _step(self, node: Any, outward: bool, depth: list) -> Any:
        depth[0] += 1
        return self.enter(node, outward, depth)

    def _out(self, node: Any, depth: list) -> Any:
        ch = self.graph.get_out_channels(node)
        if ch is not None:
            return ch
        ch = 0
        for in_node in node.inputs:
            if node.type == self.ops.OPTYPE.CONCAT:
                sub_ch = self._step(in_node, True, depth)
                if sub_ch is None:
                    return None
                ch += sub_ch
            elif in_node.type == self.ops.OPTYPE.SPLIT and in_node.module.split_sizes is not None:
                ch = _split_size(in_node, node, ch)
            else:
                ch = self._step(in_node, True, depth)
        return None if ch == 0 else ch

    def _in(self, node: Any, depth: list) -> Any:
        ch = self.graph.get_in_channels(node)
        if ch is not None:
            return ch
        ch = 0
        for out_node in node.outputs:
            if node.type == self.ops.OPTYPE.SPLIT:
                sub_ch = self._step(out_node, False, depth)
                if sub_ch is None:
                    return None
                ch += sub_ch
            if out_node.type == self.ops.OPTYPE.CONCAT:
                concat_output_channels = self.enter(out_node, False, depth)
                siblings = [s for in_node in out_node.inputs if in_node != node
                            if (s := self.enter(in_node, True, depth)) is not None]
                if concat_output_channels is None or len(siblings) == 0:
                    return None
                return concat_output_channels - sum(siblings)
            ch = self._step(out_node, False, depth)
        return None if ch == 0 else ch


#: torch-pruning's own channel walks, by direction (``True``: output channels).
_OWN: dict[bool, Callable[..., Any]] = {}


def _memoized(walk: Callable[..., Any], outward: bool, shape_infer: ModuleType,
              ops: ModuleType) -> Callable[..., Any]:
    _OWN[outward] = walk

    @functools.wraps(walk)
    def memoized(graph: Any, node: Any, recursive_depth: list) -> Any:
        if not _MEMOS or not _FAST[-1]:
            return walk(graph, node, recursive_depth)
        return _Limited(graph, _MEMOS[-1], ops, _limit(shape_infer)).enter(node, outward, recursive_depth)

    memoized.depl_memoized = True  # type: ignore[attr-defined]
    return memoized


@dataclass
class _Read:
    """What an index-mapping update reads that can change after the trace, per node in graph order.

    Channel counts (torch-pruning's ``get_out_channels`` / ``get_in_channels``),
    the split and concatenation sizes and offsets, the index-mapping switch,
    and the mapping objects in place; the modules (a pruned ``nn.Parameter``
    is a new object) are compared by identity.
    """

    values: tuple
    modules: list
    channels: dict

    def same(self, other: _Read | None) -> bool:
        return (other is not None and self.values == other.values and len(self.modules) == len(other.modules)
                and all(a is b for a, b in zip(self.modules, other.modules, strict=True)))


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _read(graph: Any) -> _Read | None:
    """:class:`_Read` of ``graph`` now; ``None`` when a channel count cannot be read (then always update)."""
    values, modules, channels = [], [], {}
    try:
        for node in graph.module2node.values():
            module = node.module
            attributes = getattr(module, "__dict__", {})  # torch-pruning's operations keep them there
            out_channels, in_channels = graph.get_out_channels(node), graph.get_in_channels(node)
            channels[node] = (out_channels, in_channels)
            modules.append(module)
            values.append((node, out_channels, in_channels, node.enable_index_mapping,
                           *(_frozen(attributes.get(key)) for key in _SIZES),
                           tuple(m for dep in node.dependencies for m in dep.index_mapping)))
    except Exception:  # noqa: BLE001 (a layer torch-pruning cannot size: its own update decides)
        return None
    return _Read(tuple(values), modules, channels)


#: Module attributes of torch-pruning's split, concatenation and unbind operations that its update reads.
_SIZES = ("split_sizes", "offsets", "concat_sizes")


@contextlib.contextmanager
def _channels_read_once(graph: Any, read: _Read | None) -> Iterator[None]:
    """Within: ``graph``'s channel counts per node come from ``read`` (none changes during an update)."""
    if read is None:
        yield
        return
    get_out, get_in = graph.get_out_channels, graph.get_in_channels
    graph.get_out_channels = lambda n: read.channels[n][0] if n in read.channels else get_out(n)
    graph.get_in_channels = lambda n: read.channels[n][1] if n in read.channels else get_in(n)
    try:
        yield
    finally:
        del graph.get_out_channels, graph.get_in_channels


def _one_memo_per_update(update: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(update)
    def with_memo(graph: Any) -> Any:
        if not _FAST[-1]:
            setattr(graph, _LAST_READ, None)
            return update(graph)
        read = _read(graph)
        if read is not None and read.same(getattr(graph, _LAST_READ, None)):
            return None  # the update would write what it wrote last time, from the same inputs
        setattr(graph, _LAST_READ, None)
        _MEMOS.append({})
        try:
            with _channels_read_once(graph, read):
                result = update(graph)
                setattr(graph, _LAST_READ, _read(graph))
        finally:
            _MEMOS.pop()
        return result

    with_memo.depl_memoized = True  # type: ignore[attr-defined]
    return with_memo


#: Attribute under which a graph keeps the :class:`_Read` its last index-mapping update left.
_LAST_READ = "_depl_index_mapping_read"


def flatten_indices(idxs: list, stride: int, hybrid: type) -> list:
    """``[hybrid(k, i.root_idx) for i in idxs for k in range(i.idx * stride, (i.idx + 1) * stride)]``."""
    make = functools.partial(tuple.__new__, hybrid)
    starts = [i.idx * stride for i in idxs]
    ends = [(i.idx + 1) * stride for i in idxs]
    flat = itertools.chain.from_iterable(map(range, starts, ends))
    roots = itertools.chain.from_iterable(map(itertools.repeat, map(_ROOT, idxs), itertools.repeat(stride)))
    return list(map(make, zip(flat, roots, strict=True)))


def unflatten_indices(idxs: list, stride: int, hybrid: type) -> list:
    """``list(set(hybrid(i.idx // stride, i.root_idx) for i in idxs))``: one set, filled in that order."""
    make = functools.partial(tuple.__new__, hybrid)
    coarse = map(operator.floordiv, map(_IDX, idxs), itertools.repeat(stride))
    return list(set(map(make, zip(coarse, map(_ROOT, idxs), strict=False))))  # repeat() is endless


def _fast_flatten(flatten: Callable[..., Any], hybrid: type) -> Callable[..., Any]:
    @functools.wraps(flatten)  # torch-pruning's own stays at ``__wrapped__``
    def fast(mapping: Any, idxs: Any) -> Any:
        if not _FAST[-1]:
            return flatten(mapping, idxs)
        if mapping.reverse:
            return unflatten_indices(idxs, mapping._stride, hybrid)
        return flatten_indices(idxs, mapping._stride, hybrid)

    fast.depl_memoized = True  # type: ignore[attr-defined]
    return fast


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: a group walk makes millions of short-lived, acyclic indices."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _without_collection(get_group: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(get_group)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if not _FAST[-1]:
            return get_group(*args, **kwargs)
        with _collector_paused():
            return get_group(*args, **kwargs)

    paused.depl_memoized = True  # type: ignore[attr-defined]
    return paused


def fast() -> bool:
    """Whether the fast paths run (outside :func:`as_released`)."""
    return _FAST[-1]


def last_read(graph: Any) -> Any:
    """What ``graph``'s last index-mapping update read (a new object after each update that ran), or None."""
    return getattr(graph, _LAST_READ, None)


@contextlib.contextmanager
def as_released() -> Iterator[None]:
    """Within: torch-pruning's own index-mapping update, channel walks and flatten mapping (to compare)."""
    _FAST.append(False)
    try:
        yield
    finally:
        _FAST.pop()


def install(tp: ModuleType) -> None:
    """Memoize ``tp``'s channel walks per index-mapping update, and build flatten mappings fast (once)."""
    from torch_pruning import _helpers, ops
    from torch_pruning.dependency import index_mapping, shape_infer

    for name, outward in (("infer_out_channels_recursively", True), ("infer_in_channels_recursively", False)):
        walk = getattr(shape_infer, name)
        if not getattr(walk, "depl_memoized", False):
            setattr(shape_infer, name, _memoized(walk, outward, shape_infer, ops))
    update = index_mapping.update_index_mapping
    if not getattr(update, "depl_memoized", False):
        index_mapping.update_index_mapping = _one_memo_per_update(update)
    get_group = tp.DependencyGraph.get_pruning_group
    if not getattr(get_group, "depl_memoized", False):
        tp.DependencyGraph.get_pruning_group = _without_collection(get_group)
    flatten = index_mapping._FlattenIndexMapping.__call__
    if not getattr(flatten, "depl_memoized", False):
        index_mapping._FlattenIndexMapping.__call__ = _fast_flatten(flatten, _helpers._HybridIndex)
