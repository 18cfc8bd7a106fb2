"""Slicing a global state into a sub-network and scattering updates back (numpy only).

A :class:`SubnetLayout` says, for every entry of a network's state (parameters
and buffers), which of its coordinates belong to which prunable channel: an
:class:`Axis` is one dimension of one entry together with the owning channel
of every coordinate along it (``-1``: owned by no prunable channel, always
kept). Channels are numbered globally: channel ``c`` of group ``g`` is
``groups[g].offset + c``. The layout is derived once per job from the network
(:mod:`depl_fl.task.subnets`, torch-pruning's dependency graph); this module
only needs numpy, so the server aggregates without building networks.

Which channels a variant keeps (:meth:`SubnetLayout.keep_sets`): in every
group, the ``k = max(1, round((1 - compression) * C))`` channels of largest
L1 norm of the group's producing weights in the *global* state (every
parameter of two or more dimensions whose output channels the group owns:
convolution and linear weights, summed over residual-coupled producers),
norms in float64, ties to the lower index; channels whose reading weights
are all zero (silenced, :func:`silence`) rank after every other, so the kept
set of a compressed variant stays put round after round.

Integer entries (BatchNorm's ``num_batches_tracked``) are never averaged as
floats: :func:`aggregate` takes the lower median of the replies' values, an
exact integer that one bad client cannot move. Every function takes torch
tensors on any device as well as numpy arrays (:func:`host_array`) and returns
numpy arrays.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from depl_fl.errors import DeplError, ScenarioError

State = Mapping[str, np.ndarray]


def host_array(value: Any, dtype: Any = None) -> np.ndarray:
    """``value`` as a numpy array in host memory; a torch tensor on any device is copied to the CPU first.

    Duck-typed (``detach`` and ``cpu``), so this module never imports torch: a
    state whose tensors a user's code left on a GPU slices and scatters like
    its numpy arrays, and what comes out is numpy on the CPU.
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=dtype)


class PruneError(DeplError, ValueError):
    """A weight state does not match the expected (full or sub-network) structure."""


@dataclass(frozen=True)
class Axis:
    """One dimension of one state entry whose coordinates belong to prunable channels.

    Attributes
    ----------
    entry : str
        State entry name (``layer.weight``).
    dim : int
        Dimension of the entry.
    owner : numpy.ndarray
        Global channel id of every coordinate along ``dim`` (``-1``: always kept).
    reads : bool
        True where the entry reads the channels (a consumer's input dimension),
        False where it produces or normalises them.
    """

    entry: str
    dim: int
    owner: np.ndarray
    reads: bool


@dataclass(frozen=True)
class ChannelGroup:
    """A set of coupled channels pruned together (one torch-pruning group).

    Attributes
    ----------
    A grouped convolution (``groups`` G > 1, not depthwise) the channels pass
    through splits them into G blocks that must stay equal: it reads each
    block with one weight slice. So channels ``c`` and ``c + width`` (and
    ``c + 2 width``, ...) are one *tied* channel, kept or dropped together
    (as torch-pruning prunes grouped convolutions); ``width`` counts tied
    channels and ``blocks`` the channels tied into each.

    Attributes
    ----------
    root : str
        Name of the layer whose output channels define the group.
    width : int
        Number of (tied) channels.
    offset : int
        Global id of the group's channel 0.
    multiple : int
        A variant keeps a multiple of this many tied channels (so that every
        GroupNorm the channels pass through keeps whole groups; 1 without one).
    blocks : int
        Channels tied into one (the least common multiple of the groups of the
        grouped convolutions the channels pass through; 1 without one).
    """

    root: str
    width: int
    offset: int
    multiple: int = 1
    blocks: int = 1

    def kept(self, compression: float) -> int:
        """Tied channels a variant keeps: :func:`kept_width`, rounded to a multiple of ``multiple``."""
        return kept_width(self.width, compression, self.multiple)

    def kept_channels(self, compression: float) -> int:
        """Channels a variant keeps in the network itself (tied ones counted ``blocks`` times)."""
        return self.kept(compression) * self.blocks


def kept_width(width: int, compression: float, multiple: int = 1) -> int:
    """Number of channels kept out of ``width`` (round half up, at least 1).

    With ``multiple`` > 1 (a GroupNorm's number of groups, which divides
    ``width``) the nearest multiple of it, at least ``multiple``.
    """
    check_compression(compression)
    kept = max(1, min(width, int(np.floor((1.0 - compression) * width + 0.5 + 1e-9))))
    if multiple <= 1:
        return kept
    return max(multiple, min(width, multiple * int(np.floor(kept / multiple + 0.5 + 1e-9))))


def check_compression(compression: float) -> None:
    """One-line error unless ``0 <= compression < 1``."""
    if not (0.0 <= float(compression) < 1.0):
        raise ScenarioError(f"compression must be in [0, 1), got {compression}")


@dataclass(frozen=True)
class SubnetIndex:
    """The kept coordinates of every state entry for one variant.

    Attributes
    ----------
    compression : float
        Fraction of channels removed per group.
    keep : tuple of numpy.ndarray
        Kept channels of every group (ascending, group-local ids).
    index : dict of str to tuple
        Per entry, per dimension, the kept coordinates (``None``: all of them).
    full_shapes : dict of str to tuple of int
        Entry shapes of the full network.
    """

    compression: float
    keep: tuple[np.ndarray, ...]
    index: dict[str, tuple[np.ndarray | None, ...]]
    full_shapes: dict[str, tuple[int, ...]]

    def sub_shapes(self) -> dict[str, tuple[int, ...]]:
        """Entry shapes of the sub-network (those of :func:`extract`)."""
        return {name: tuple(len(ix) if ix is not None else size
                            for ix, size in zip(idx, self.full_shapes[name], strict=True))
                for name, idx in self.index.items()}


@dataclass(frozen=True)
class SubnetLayout:
    """Entries, channel groups and per-coordinate channel owners of a network's state.

    Attributes
    ----------
    shapes : dict of str to tuple of int
        Shape of every state entry of the full network (state-dict order).
    dtypes : dict of str to str
        numpy dtype name of every entry.
    groups : tuple of ChannelGroup
        The prunable channel groups.
    axes : tuple of Axis
        The pruned dimensions of every entry.
    kept : tuple of str
        Root layers of the channel groups every variant keeps whole because the
        forward breaks once they lose channels (network order; not in ``groups``).
    """

    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    groups: tuple[ChannelGroup, ...]
    axes: tuple[Axis, ...]
    kept: tuple[str, ...] = ()

    @property
    def sliced_layers(self) -> frozenset[str]:
        """Names of the layers with an entry a variant slices (``""``: the network's own parameters)."""
        return frozenset(axis.entry.rpartition(".")[0] for axis in self.axes)

    @property
    def num_channels(self) -> int:
        """Total number of prunable channels over all groups."""
        return sum(g.width for g in self.groups)

    def widths(self, compression: float) -> tuple[int, ...]:
        """Channels kept per group by a variant."""
        return tuple(g.kept(compression) for g in self.groups)

    def _group_of(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.groups)), [g.width for g in self.groups])

    def _per_channel(self, state: State, reads: bool, min_ndim: int) -> tuple[np.ndarray, np.ndarray]:
        """Per global channel: summed |value| over the matching axes, and whether any axis touched it."""
        total = np.zeros(self.num_channels, dtype=np.float64)
        touched = np.zeros(self.num_channels, dtype=bool)
        for axis in self.axes:
            if axis.reads != reads or len(self.shapes[axis.entry]) < min_ndim:
                continue
            arr = np.abs(host_array(state[axis.entry]))
            others = tuple(d for d in range(arr.ndim) if d != axis.dim)
            per_coord = arr.sum(axis=others, dtype=np.float64)
            owned = axis.owner >= 0
            np.add.at(total, axis.owner[owned], per_coord[owned])
            touched[axis.owner[owned]] = True
        return total, touched

    def keep_sets(self, full_state: State, compression: float) -> tuple[np.ndarray, ...]:
        """Kept channels of every group (deterministic, see the module docstring)."""
        check_compression(compression)
        check_state(full_state, self.shapes, "full state")
        norms, _ = self._per_channel(full_state, reads=False, min_ndim=2)
        read_sum, read_any = self._per_channel(full_state, reads=True, min_ndim=2)
        silent = read_any & (read_sum == 0)
        keep = []
        for g in self.groups:
            sl = slice(g.offset, g.offset + g.width)
            order = np.lexsort((np.arange(g.width), -norms[sl], silent[sl]))
            keep.append(np.sort(order[:g.kept(compression)]).astype(np.int64))
        return tuple(keep)

    def index_of(self, keep: tuple[np.ndarray, ...], compression: float) -> SubnetIndex:
        """The kept coordinates of every entry for the given kept channels per group."""
        mask = np.zeros(self.num_channels + 1, dtype=bool)
        mask[-1] = True  # owner -1 (no channel) indexes the last slot: always kept
        for g, kept in zip(self.groups, keep, strict=True):
            mask[g.offset + np.asarray(kept, dtype=np.int64)] = True
        index: dict[str, list[np.ndarray | None]] = {name: [None] * len(shape)
                                                      for name, shape in self.shapes.items()}
        for axis in self.axes:
            kept_coords = np.flatnonzero(mask[axis.owner])
            previous = index[axis.entry][axis.dim]
            if previous is not None and not np.array_equal(previous, kept_coords):
                raise PruneError(f"{axis.entry}: dimension {axis.dim} is owned inconsistently")
            index[axis.entry][axis.dim] = kept_coords
        # A dimension kept whole needs no index: None keeps extraction a plain copy.
        out = {name: tuple(None if ix is not None and len(ix) == self.shapes[name][d] else ix
                           for d, ix in enumerate(idx)) for name, idx in index.items()}
        return SubnetIndex(float(compression), tuple(keep), out, dict(self.shapes))

    def structure(self, full_state: State, compression: float) -> SubnetIndex:
        """The variant ``compression`` sliced from ``full_state`` (kept channels chosen from it)."""
        if compression == 0:  # the full network: every channel, no norms to rank
            check_state(full_state, self.shapes, "full state")
            return self.nested_structure(0.0)
        return self.index_of(self.keep_sets(full_state, compression), compression)

    def nested_structure(self, compression: float) -> SubnetIndex:
        """The variant keeping the first channels of every group (shapes only: the client's skeleton)."""
        keep = tuple(np.arange(w, dtype=np.int64) for w in self.widths(compression))
        return self.index_of(keep, compression)

    def sub_shapes(self, compression: float) -> dict[str, tuple[int, ...]]:
        """Entry shapes of variant ``compression`` (independent of which channels are kept)."""
        return self.nested_structure(compression).sub_shapes()

    def size_bytes(self, compression: float) -> int:
        """Bytes one transfer of the variant moves: its entries serialised as ``.npy`` arrays.

        Flower's ``Array`` carries a numpy array as ``np.save`` bytes: the
        array's data at its own dtype plus a header (128 bytes for most
        shapes); :func:`npy_bytes` counts both exactly.
        """
        return int(sum(npy_bytes(shape, self.dtypes[name])
                       for name, shape in self.sub_shapes(compression).items()))


def npy_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Length of ``np.save``'s output for an array of ``shape`` and ``dtype`` (header + data)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": tuple(shape)})
    return buf.tell() + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def check_state(state: State, expected: Mapping[str, tuple[int, ...]], what: str) -> None:
    """Raise :class:`PruneError` unless ``state`` has exactly the expected names and shapes."""
    if set(state) != set(expected):
        missing = sorted(set(expected) - set(state))
        extra = sorted(set(state) - set(expected))
        raise PruneError(f"{what}: missing {missing[:5]}, unexpected {extra[:5]} entries")
    for name, shape in expected.items():
        got = tuple(np.shape(state[name]))
        if got != tuple(shape):
            raise PruneError(f"{what}: {name} has shape {got}, expected {tuple(shape)}")


def _take(arr: np.ndarray, idx: tuple[np.ndarray | None, ...]) -> np.ndarray:
    for dim, ix in enumerate(idx):
        if ix is not None:
            arr = np.take(arr, ix, axis=dim)
    return arr


def _ix(idx: tuple[np.ndarray | None, ...], shape: tuple[int, ...]) -> tuple[np.ndarray, ...] | None:
    if all(ix is None for ix in idx):
        return None
    return np.ix_(*(np.arange(size) if ix is None else ix for ix, size in zip(idx, shape, strict=True)))


def extract(full_state: State, structure: SubnetIndex) -> dict[str, np.ndarray]:
    """The sub-network's entries sliced from ``full_state``, named as in the full network (copies)."""
    check_state(full_state, structure.full_shapes, "full state")
    out = {}
    for name, idx in structure.index.items():
        arr = host_array(full_state[name])
        sub = _take(arr, idx)
        out[name] = np.array(sub, copy=True, order="C")
    return out


def check_sub_state(sub_state: State, structure: SubnetIndex) -> None:
    """Raise :class:`PruneError` unless names/shapes match the variant and values are finite."""
    check_state(sub_state, structure.sub_shapes(), "sub-network state")
    for name, arr in sub_state.items():
        arr = host_array(arr)
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise PruneError(f"sub-network state: {name} contains non-finite values")


def aggregate(full_state: State, replies: Iterable[tuple[State, float]],
              structure: SubnetIndex) -> dict[str, np.ndarray]:
    """Weighted mean of sub-network replies written back into the full state.

    Parameters
    ----------
    full_state : mapping of str to array
        Global state the replies were trained from.
    replies : iterable of (sub_state, weight)
        Each client's sub-network entries and its weight (e.g. number of samples).
    structure : SubnetIndex
        The variant every reply follows.

    Returns
    -------
    dict of str to numpy.ndarray
        Kept coordinates of floating entries: the weighted mean of the replies;
        integer entries: the lower median of the replies; every other
        coordinate keeps its global value. Dtypes follow ``full_state``.

    Raises
    ------
    PruneError
        If there are no replies, a weight is negative/non-finite or all are
        zero, or a reply has wrong names, shapes or non-finite values.
    """
    replies = list(replies)
    if not replies:
        raise PruneError("no replies to aggregate")
    weights = np.array([float(w) for _, w in replies], dtype=np.float64)
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
        raise PruneError(f"aggregation weights must be finite, >= 0 and not all 0: {weights.tolist()}")
    check_state(full_state, structure.full_shapes, "full state")
    for state, _ in replies:
        check_sub_state(state, structure)
    weights /= weights.sum()
    result = {}
    for name, idx in structure.index.items():
        full = host_array(full_state[name])
        if np.issubdtype(full.dtype, np.floating):
            merged = sum(w * host_array(state[name], dtype=np.float64)
                         for (state, _), w in zip(replies, weights, strict=True))
        else:
            stacked = np.sort(np.stack([host_array(state[name]) for state, _ in replies]), axis=0)
            merged = stacked[(len(replies) - 1) // 2]
        result[name] = _put(full, merged, idx)
    return result


def _put(full: np.ndarray, sub: np.ndarray, idx: tuple[np.ndarray | None, ...]) -> np.ndarray:
    ix = _ix(idx, full.shape)
    if ix is None:
        return np.asarray(sub, dtype=full.dtype).reshape(full.shape).copy()
    out = full.copy()
    out[ix] = np.asarray(sub).astype(full.dtype, copy=False)
    return out


def scatter(full_state: State, sub_state: State, structure: SubnetIndex) -> dict[str, np.ndarray]:
    """Write one sub-network state back into a copy of the full state."""
    check_state(full_state, structure.full_shapes, "full state")
    check_sub_state(sub_state, structure)
    return {name: _put(host_array(full_state[name]), host_array(sub_state[name]), idx)
            for name, idx in structure.index.items()}


def silence(full_state: State, layout: SubnetLayout, structure: SubnetIndex) -> dict[str, np.ndarray]:
    """Zero every weight that reads a channel ``structure`` drops (a function-preserving prune).

    The full network then computes exactly the sub-network's function: each
    kept channel reads only kept channels, BatchNorm included (its statistics
    are per channel). A later switch to a variant with more channels starts
    from this variant's loss; the dropped channels keep their own weights and
    train again after it. The sub-network itself reads none of the zeroed
    coordinates, so this changes nothing of :func:`extract`'s result.
    """
    check_state(full_state, layout.shapes, "full state")
    mask = np.ones(layout.num_channels + 1, dtype=bool)
    for g, kept in zip(layout.groups, structure.keep, strict=True):
        mask[g.offset:g.offset + g.width] = False
        mask[g.offset + np.asarray(kept, dtype=np.int64)] = True
    out = {name: np.array(host_array(arr), copy=True) for name, arr in full_state.items()}
    for axis in layout.axes:
        if not axis.reads or not np.issubdtype(out[axis.entry].dtype, np.floating):
            continue
        dropped = np.flatnonzero(~mask[axis.owner])
        if dropped.size:
            view = np.moveaxis(out[axis.entry], axis.dim, 0)
            view[dropped] = 0
    return out
