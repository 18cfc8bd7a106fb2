"""Deterministic structured pruning of the zoo models (numpy only).

A compressed model is the sub-network that keeps, in every prunable group
(the output channels of a convolution or the hidden units of a linear layer),
the ``k = max(1, round((1 - compression) * C))`` channels with the largest L1
norm of the producing layer's weights in the *global* model (ties broken by the
lower index); channels whose outgoing weights are all zero (silenced, see
below) rank after every other. Every client and the server derive the same
structure from the same global weights, so clients only send back the kept weights.

Function-preserving switches: before a compressed round the server silences
the channels the variant drops (:func:`silence_dropped` zeroes the weights that
read them), so the global full model computes the compressed model. The kept
set then stays the same round after round, and a switch to more channels
starts from the compressed model's loss; the dropped channels train again
after it.

Compression and FLOPs: ``compression`` is the fraction of channels removed per
group. A layer between two pruned groups keeps ``(1 - c)^2`` of its weights and
multiply-accumulates (0.75 -> ~1/16, 0.5 -> ~1/4); layers touching the fixed
input or the classifier keep ``(1 - c)``; depthwise convolutions keep
``(1 - c)``. :func:`depl_fl.task.variants.measure_variant` measures the exact figure.

``extract``, ``scatter`` and ``aggregate_pruned`` use numpy only (the server
imports them without torch). The models use no BatchNorm, so a state holds
only weights and biases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from depl_fl.errors import DeplError, ScenarioError
from depl_fl.task.archs import ArchSpec, LayerSpec, arch_spec

State = Mapping[str, np.ndarray]


class PruneError(DeplError, ValueError):
    """A weight state does not match the expected (pruned or full) structure."""


@dataclass(frozen=True)
class PruneStructure:
    """Which channels of every prunable group a compressed model keeps.

    Attributes
    ----------
    arch : str
        Architecture name.
    compression : float
        Fraction of channels removed per group.
    keep : tuple of tuple of int
        Kept channel indices of every group, ascending.
    full_widths : tuple of int
        Channel count of every group in the full model.
    in_channels, num_classes : int
        Fixed input channels and output classes.
    spatial : int
        Spatial positions per channel at the flatten feeding the first linear layer.
    """

    arch: str
    compression: float
    keep: tuple[tuple[int, ...], ...]
    full_widths: tuple[int, ...]
    in_channels: int
    num_classes: int
    spatial: int

    @property
    def widths(self) -> tuple[int, ...]:
        """Channel count of every group in the pruned model."""
        return tuple(len(k) for k in self.keep)

    def full_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter shapes of the full model."""
        return _shapes(arch_spec(self.arch), self.full_widths, self.in_channels,
                       self.num_classes, self.spatial)

    def pruned_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter shapes of the pruned model (those of :func:`extract`)."""
        return _shapes(arch_spec(self.arch), self.widths, self.in_channels,
                       self.num_classes, self.spatial)


def kept_width(width: int, compression: float) -> int:
    """Number of channels kept out of ``width`` (round half up, at least 1)."""
    _check_compression(compression)
    return max(1, min(width, int(np.floor((1.0 - compression) * width + 0.5 + 1e-9))))


def _check_compression(compression: float) -> None:
    if not (0.0 <= float(compression) < 1.0):
        raise ScenarioError(f"compression must be in [0, 1), got {compression}")


def _shapes(
    spec: ArchSpec, widths: Sequence[int], in_channels: int, num_classes: int, spatial: int
) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in spec.layers:
        c_in = in_channels if layer.in_group is None else widths[layer.in_group]
        c_out = num_classes if layer.out_group is None else widths[layer.out_group]
        if layer.kind == "conv":
            shapes[f"{layer.name}.weight"] = (c_out, c_in, layer.kernel, layer.kernel)
        elif layer.kind == "dwconv":
            c_out = c_in
            shapes[f"{layer.name}.weight"] = (c_in, 1, layer.kernel, layer.kernel)
        else:
            shapes[f"{layer.name}.weight"] = (c_out, c_in * (spatial if layer.flatten_in else 1))
        shapes[f"{layer.name}.bias"] = (c_out,)
    return shapes


def _producer(spec: ArchSpec, group: int) -> LayerSpec:
    return next(layer for layer in spec.layers if layer.out_group == group and layer.kind != "dwconv")


def _check_state(state: State, expected: Mapping[str, tuple[int, ...]], what: str) -> None:
    names, want = set(state), set(expected)
    if names != want:
        missing, extra = sorted(want - names), sorted(names - want)
        raise PruneError(f"{what}: missing {missing[:3]}, unexpected {extra[:3]} parameter names")
    for name, shape in expected.items():
        got = tuple(np.shape(state[name]))
        if got != tuple(shape):
            raise PruneError(f"{what}: {name} has shape {got}, expected {tuple(shape)}")


def _infer_dims(spec: ArchSpec, full_state: State) -> tuple[tuple[int, ...], int, int, int]:
    """Full widths, input channels, classes and flatten spatial size from a full state."""
    try:
        widths = tuple(
            int(np.shape(full_state[f"{_producer(spec, g).name}.weight"])[0])
            for g in range(len(spec.default_widths))
        )
        first, last = spec.layers[0], spec.layers[-1]
        in_channels = int(np.shape(full_state[f"{first.name}.weight"])[1])
        num_classes = int(np.shape(full_state[f"{last.name}.weight"])[0])
        flat = next(layer for layer in spec.layers if layer.flatten_in)
        in_features = int(np.shape(full_state[f"{flat.name}.weight"])[1])
    except (KeyError, IndexError) as exc:
        raise PruneError(f"full state does not look like a model of this architecture ({exc})") from None
    flat_channels = in_channels if flat.in_group is None else widths[flat.in_group]
    spatial = max(1, in_features // flat_channels)
    return widths, in_channels, num_classes, spatial


def compute_structure(arch: str, full_state: State, compression: float) -> PruneStructure:
    """Choose the kept channels of every group from the global weights.

    Parameters
    ----------
    arch : str
        Architecture of ``full_state``.
    full_state : mapping of str to array
        Global (full-model) weights.
    compression : float
        Fraction of channels removed per group, in [0, 1); 0 keeps everything.

    Returns
    -------
    PruneStructure
        Deterministic: equal weights give equal structures on every machine
        (norms in float64, stable sort, ties to the lower index).

    Raises
    ------
    PruneError
        If ``full_state`` does not match the architecture.
    """
    _check_compression(compression)
    spec = arch_spec(arch)
    widths, in_channels, num_classes, spatial = _infer_dims(spec, full_state)
    _check_state(full_state, _shapes(spec, widths, in_channels, num_classes, spatial), "full state")
    keep = []
    for g, width in enumerate(widths):
        k = kept_width(width, compression)
        weight = np.asarray(full_state[f"{_producer(spec, g).name}.weight"], dtype=np.float64)
        norms = np.abs(weight).reshape(width, -1).sum(axis=1)
        silent = _silent_channels(spec, full_state, g, width, spatial)
        # Silenced channels (see silence_dropped) rank last: the kept set of a compressed
        # variant stays the same round after round instead of flipping between channels
        # of similar norm (a flip swaps trained channels for stale ones).
        order = np.lexsort((np.arange(width), -norms, silent))
        keep.append(tuple(int(i) for i in np.sort(order[:k])))
    return PruneStructure(arch, float(compression), tuple(keep), widths, in_channels,
                          num_classes, spatial)


def _consumer_columns(spec: ArchSpec, group: int, width: int,
                      spatial: int) -> list[tuple[str, np.ndarray]]:
    """Per non-depthwise consumer of ``group``: its weight name and, per channel, its input columns.

    Returns ``(name, cols)`` with ``cols`` of shape ``(width, n)``: the columns
    of ``name`` fed by each channel (``spatial`` of them after a flatten).
    """
    out = []
    for layer in spec.layers:
        if layer.in_group != group or layer.kind == "dwconv":
            continue
        per = spatial if layer.flatten_in else 1
        cols = np.arange(width)[:, None] * per + np.arange(per)
        out.append((f"{layer.name}.weight", cols))
    return out


def _silent_channels(spec: ArchSpec, full_state: State, group: int, width: int,
                     spatial: int) -> np.ndarray:
    """Boolean per channel of ``group``: every weight reading it is exactly zero."""
    silent = np.ones(width, dtype=bool)
    for name, cols in _consumer_columns(spec, group, width, spatial):
        weight = np.asarray(full_state[name])
        per_channel = weight.reshape(weight.shape[0], weight.shape[1], -1)[:, cols]
        silent &= ~np.any(per_channel != 0, axis=(0, 2, 3))
    return silent


def silence_dropped(full_state: State, structure: PruneStructure) -> dict[str, np.ndarray]:
    """Zero the weights that read the channels ``structure`` drops (a function-preserving prune).

    The full model then computes exactly the compressed model's function: a
    later switch to a variant with more channels starts from the compressed
    model's loss instead of mixing in channels that went stale while the
    compressed variant trained (the jump the profile's switch rounds, taken
    early, could not predict). The dropped channels keep their own weights, so
    they train again after the switch (zeroed outgoing weights, as in
    function-preserving network growth); they also rank last in
    :func:`compute_structure`, so the kept set stays put while the compressed
    variant trains. A no-op for the compressed model itself (:func:`extract`
    reads none of the zeroed weights).

    Parameters
    ----------
    full_state : mapping of str to array
        Global (full-model) weights.
    structure : PruneStructure
        The compressed variant's structure computed from ``full_state``.

    Returns
    -------
    dict of str to numpy.ndarray
        A copy of ``full_state`` with the dropped channels' outgoing weights zeroed.
    """
    _check_state(full_state, structure.full_shapes(), "full state")
    spec = arch_spec(structure.arch)
    out = {name: np.array(arr, copy=True) for name, arr in full_state.items()}
    for g, width in enumerate(structure.full_widths):
        dropped = np.setdiff1d(np.arange(width), np.asarray(structure.keep[g], dtype=np.int64))
        if dropped.size == 0:
            continue
        for name, cols in _consumer_columns(spec, g, width, structure.spatial):
            weight = out[name].reshape(out[name].shape[0], out[name].shape[1], -1)
            weight[:, cols[dropped].ravel()] = 0
    return out


def silence_to_variant(arch: str, full_state: State, compression: float) -> dict[str, np.ndarray]:
    """``full_state`` made to compute the ``compression`` variant's function (:func:`silence_dropped`)."""
    return silence_dropped(full_state, compute_structure(arch, full_state, compression))


def _indices(structure: PruneStructure) -> dict[str, tuple[np.ndarray, ...]]:
    """Per parameter, the kept indices along each of its first one or two dims."""
    spec = arch_spec(structure.arch)

    def group(g: int | None, size: int) -> np.ndarray:
        return np.arange(size) if g is None else np.asarray(structure.keep[g], dtype=np.int64)

    out: dict[str, tuple[np.ndarray, ...]] = {}
    full = structure.full_shapes()
    for layer in spec.layers:
        w_shape = full[f"{layer.name}.weight"]
        rows = group(layer.out_group, w_shape[0])
        if layer.kind == "dwconv":
            cols = np.arange(w_shape[1])
        elif layer.flatten_in:
            chans = group(layer.in_group, w_shape[1] // structure.spatial)
            cols = (chans[:, None] * structure.spatial + np.arange(structure.spatial)).ravel()
        else:
            cols = group(layer.in_group, w_shape[1])
        out[f"{layer.name}.weight"] = np.ix_(rows, cols)
        out[f"{layer.name}.bias"] = (rows,)
    return out


def extract(full_state: State, structure: PruneStructure) -> dict[str, np.ndarray]:
    """Kept weights of the pruned model, named as in the full model.

    Returns
    -------
    dict of str to numpy.ndarray
        New arrays with the shapes of :meth:`PruneStructure.pruned_shapes`.
    """
    _check_state(full_state, structure.full_shapes(), "full state")
    return {
        name: np.array(np.asarray(full_state[name])[idx], copy=True)
        for name, idx in _indices(structure).items()
    }


def check_pruned_state(pruned_state: State, structure: PruneStructure) -> None:
    """Raise :class:`PruneError` unless names/shapes match and values are finite."""
    _check_state(pruned_state, structure.pruned_shapes(), "pruned state")
    for name, arr in pruned_state.items():
        if not np.all(np.isfinite(np.asarray(arr))):
            raise PruneError(f"pruned state: {name} contains non-finite values")


def aggregate_pruned(
    full_state: State,
    replies: Iterable[tuple[State, float]],
    structure: PruneStructure,
) -> dict[str, np.ndarray]:
    """Weighted mean of pruned replies written back into the full model.

    Parameters
    ----------
    full_state : mapping of str to array
        Global weights the replies were trained from.
    replies : iterable of (pruned_state, weight)
        Kept weights of each client and its weight (e.g. number of samples).
    structure : PruneStructure
        Structure every reply follows.

    Returns
    -------
    dict of str to numpy.ndarray
        Kept entries = weighted mean of the replies; every other entry keeps
        its global value. Dtypes follow ``full_state``.

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
    _check_state(full_state, structure.full_shapes(), "full state")
    for state, _ in replies:
        check_pruned_state(state, structure)
    weights /= weights.sum()
    result = {}
    for name, idx in _indices(structure).items():
        full = np.asarray(full_state[name])
        mean = sum(w * np.asarray(state[name], dtype=np.float64)
                   for (state, _), w in zip(replies, weights, strict=True))
        out = full.copy()
        out[idx] = mean.astype(full.dtype)
        result[name] = out
    return result


def scatter(full_state: State, pruned_state: State, structure: PruneStructure) -> dict[str, np.ndarray]:
    """Write one pruned state back into a copy of the full state."""
    return aggregate_pruned(full_state, [(pruned_state, 1.0)], structure)


def build_pruned_model(
    arch: str,
    structure: PruneStructure,
    num_classes: int,
    in_channels: int,
    image_size: int,
    seed: int | None = None,
):
    """Build the (untrained) smaller network whose state shapes equal :func:`extract`'s.

    Load the extracted weights with :func:`depl_fl.task.models.set_state`. Imports
    torch lazily so the numpy functions of this module stay torch-free.
    """
    from depl_fl.task.models import build_model

    if arch != structure.arch:
        raise ScenarioError(f"structure was computed for {structure.arch}, not {arch}")
    if (num_classes, in_channels) != (structure.num_classes, structure.in_channels):
        raise ScenarioError(
            f"structure has {structure.num_classes} classes / {structure.in_channels} input "
            f"channels, asked for {num_classes} / {in_channels}"
        )
    return build_model(arch, num_classes, in_channels, image_size, widths=structure.widths, seed=seed)
