"""The job's one-line list of its clients, kept readable for thousands of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

#: Clients listed one by one; a larger federation is summarised, then this many are listed.
LISTED_CLIENTS = 20


def _client_order(cid: str) -> tuple[int, str]:
    digits = cid[1:]
    return (int(digits), cid) if digits.isdigit() else (-1, cid)


def client_listing(properties: Mapping[str, Mapping[str, Any]], limit: int = LISTED_CLIENTS) -> str:
    """``c0(A, 144), c1(A, 144), ...`` for every client; beyond ``limit`` clients a summary first.

    Parameters
    ----------
    properties : mapping
        Client id -> its reported properties (``cluster``, ``num-samples``).
    limit : int
        Most clients listed one by one; the others are counted (results.json's
        ``scenario.clients`` holds every one).

    Returns
    -------
    str
        The listing, one line.
    """
    ordered = sorted(properties.items(), key=lambda kv: _client_order(kv[0]))
    items = [f"{cid}({p['cluster']}, {p['num-samples']})" for cid, p in ordered]
    if len(items) <= limit:
        return ", ".join(items)
    clusters = Counter(str(p["cluster"]) for _, p in ordered)
    samples = sorted(int(p["num-samples"]) for _, p in ordered)
    mid = len(samples) // 2
    median = samples[mid] if len(samples) % 2 else (samples[mid - 1] + samples[mid]) / 2
    per_cluster = ", ".join(f"{name} {count}" for name, count in sorted(clusters.items()))
    return (f"{len(items)} clients ({per_cluster}; {samples[0]}-{samples[-1]} samples, median {median:g}, "
            f"{sum(samples)} in all): {', '.join(items[:limit])}, ... ({len(items) - limit} more in "
            f"results.json's scenario.clients)")
