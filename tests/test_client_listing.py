"""The job's list of clients: all of a small federation, a summary and the first few of a large one."""

from __future__ import annotations

from depl_fl.runs.client_listing import client_listing


def _props(counts: list[int]) -> dict[str, dict[str, object]]:
    return {f"c{i}": {"cluster": "A" if i < len(counts) // 2 else "B", "num-samples": n}
            for i, n in enumerate(counts)}


def test_a_small_federation_lists_every_client_in_id_order():
    props = _props([144, 143, 142])
    props = dict(reversed(list(props.items())))
    assert client_listing(props) == "c0(A, 144), c1(B, 143), c2(B, 142)"


def test_ids_sort_by_number_not_by_text():
    props = {f"c{i}": {"cluster": "A", "num-samples": 1} for i in (10, 2, 1)}
    assert client_listing(props).startswith("c1(A, 1), c2(A, 1), c10(A, 1)")


def test_a_large_federation_is_summarised_then_listed_up_to_the_limit():
    counts = list(range(50, 1050))  # 1,000 clients, 500 per cluster
    line = client_listing(_props(counts), limit=3)
    assert line == ("1000 clients (A 500, B 500; 50-1049 samples, median 549.5, 549500 in all): "
                    "c0(A, 50), c1(A, 51), c2(A, 52), ... (997 more in results.json's scenario.clients)")
    assert len(client_listing(_props(counts))) < 600
