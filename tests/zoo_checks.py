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


def check_compressed_and_full_round(factory: str) -> None:
    """One p50 and one full DepL round of the user network ``factory`` (``MODULE:NAME``) in process:
    every client replies, bytes as modelled, p50 smaller than full, and the global float state moved."""
    from strategies.depl_strategy import arrays_to_state
    from tests.test_byom_rounds import N, _run

    name = factory.rsplit(":", 1)[1]
    _, _, docs, strategy, _, init, result = _run(name, model=["model=custom", f"model.factory={factory}"])
    records = strategy.controller.records
    assert [r["model"] for r in records] == ["p50", "full"]
    assert all(r["replied"] == ["c0", "c1", "c2"] and not r["rejected"] for r in records)
    sizes = check_rounds_as_modelled(records, docs, N)
    assert sizes["p50"] < sizes["full"]
    final = arrays_to_state(result.arrays)
    assert set(final) == set(init)
    assert any(not np.array_equal(final[k], init[k]) for k in init if init[k].dtype.kind == "f")
