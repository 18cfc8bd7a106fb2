"""Structured variants of the job's network: which entries a variant keeps, slicing and scattering.

One path for every network, built-in or brought by the user: the layout of
the network's state (channel groups and the owner of every coordinate) is
derived once per process with torch-pruning
(:func:`depl_fl.task.subnets.network_layout`); a variant's kept channels are
chosen from the global state by :meth:`depl_fl.task.slicing.SubnetLayout.keep_sets`
(L1 norm of the producing weights, ties to the lower index, silenced channels
last). The server slices the global state into the sub-network
(:func:`extract`), sends only that, and scatters the replies back
(:func:`aggregate_pruned`, :func:`scatter`); a client never needs the index
sets, only the sub-network's shapes, which depend on the compression alone.

Function-preserving switches: before a compressed round the server silences
the channels the variant drops (:func:`silence_to_variant` zeroes the weights
that read them), so the global full network computes the compressed model.
The kept set then stays the same round after round, and a switch to more
channels starts from the compressed model's loss; the dropped channels train
again after it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from depl_fl.task.slicing import (
    PruneError,
    State,
    SubnetIndex,
    SubnetLayout,
    aggregate,
    check_compression,
    check_sub_state,
    extract,
    kept_width,
    scatter,
    silence,
)

__all__ = ["PruneError", "SubnetIndex", "SubnetLayout", "aggregate_pruned", "check_sub_state",
           "compute_structure", "extract", "kept_width", "scatter", "silence_to_variant"]


def compute_structure(layout: SubnetLayout, full_state: State, compression: float) -> SubnetIndex:
    """The kept coordinates of every entry of variant ``compression``, chosen from ``full_state``.

    Deterministic: equal states give equal index sets on every machine
    (norms in float64, stable order, ties to the lower index).
    """
    check_compression(compression)
    return layout.structure(full_state, compression)


def aggregate_pruned(full_state: State, replies: Iterable[tuple[State, float]],
                     structure: SubnetIndex) -> dict[str, np.ndarray]:
    """Weighted mean of sub-network replies written back into the full state (:func:`slicing.aggregate`)."""
    return aggregate(full_state, replies, structure)


def silence_to_variant(layout: SubnetLayout, full_state: State, compression: float) -> dict[str, np.ndarray]:
    """``full_state`` made to compute variant ``compression``'s function (:func:`slicing.silence`)."""
    if compression <= 0:
        return {name: np.array(arr, copy=True) for name, arr in full_state.items()}
    return silence(full_state, layout, compute_structure(layout, full_state, compression))
