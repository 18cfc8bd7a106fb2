"""Checks the user-network zoos share: a network's variants derived and checked, rounds as modelled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.subnets import build_skeleton, check_variants, network_layout


def check_derived_variants(geo: TaskGeometry, roots: tuple[str, ...]) -> None:
    """Groups rooted at ``roots``; the variants pass the check, shrink, and match the layout's shapes."""
    layout = network_layout(geo)
    assert tuple(g.root for g in layout.groups) == roots
    check_variants(geo, layout, (0.0, 0.5, 0.75))  # raises when a variant is not the silenced network
    sizes = [layout.size_bytes(c) for c in (0.0, 0.5, 0.75)]
    assert sizes[0] > sizes[1] > sizes[2]
    for compression in (0.5, 0.75):
        got = {k: tuple(v.shape) for k, v in build_skeleton(geo, compression).state_dict().items()}
        assert got == layout.sub_shapes(compression)


def check_rounds_as_modelled(records: Sequence[Mapping[str, Any]], docs: Sequence[Mapping[str, Any]],
                             clients: int) -> dict[str, int]:
    """Every round's loss is finite and its bytes down and up equal the variant's size per client.

    Returns the variants' sizes by model id.
    """
    sizes = {d["id"]: int(d["size_bytes"]) for d in docs}
    for rec in records:
        assert np.isfinite(rec["loss"])
        assert rec["bytes_down"] == rec["modelled_bytes_down"] == sizes[rec["model"]] * clients
        assert rec["bytes_up"] == rec["modelled_bytes_up"] == sizes[rec["model"]] * clients
    return sizes
