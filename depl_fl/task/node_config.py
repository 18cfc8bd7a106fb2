"""The node config keys DepL's own ClientApp reads, and the refusal of a near miss of one.

A SuperNode's node config (``flower-supernode --node-config 'K=V ...'``) is
shared by every Flower app that runs on it, so a key DepL does not read is
left alone: it may be another app's. A key within a typo of one DepL reads
(``clustr``, ``data_dir``, ``partition_id``) is refused in one line naming the
key it resembles: the node would otherwise run without the setting, e.g. with
an assigned cluster instead of its own.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from depl_fl.errors import ScenarioError

#: Every node config key DepL's own ClientApp and its warm worker read (docs/DEPLOYMENT.md).
NODE_CONFIG_KEYS = frozenset({
    "partition-id", "num-partitions", "cluster", "data-dir", "device", "cache-dir", "energy-meter",
    "level-threads", "level-cpus", "level-watts",
    "warm-worker", "warm-worker-idle-s", "warm-worker-start-s", "warm-worker-reply-s",
    "faults-kind", "faults-from-round", "faults-scale", "faults-slow-s", "faults-slowdown",
    "faults-train-only",
})

#: How close (difflib ratio) an unknown key must be to a known one to count as its misspelling,
#: and by how many characters at most their lengths may differ (``partition`` or ``cluster-id``
#: may well be another app's keys).
NEAR_MISS, NEAR_MISS_LENGTH = 0.83, 2


def near_miss(key: str) -> str | None:
    """The known key ``key`` misspells (``_`` written for ``-``, or a typo away), else ``None``."""
    if key in NODE_CONFIG_KEYS:
        return None
    hyphenated = key.replace("_", "-").lower()
    if hyphenated in NODE_CONFIG_KEYS:
        return hyphenated
    close = [known for known in difflib.get_close_matches(hyphenated, sorted(NODE_CONFIG_KEYS), n=3,
                                                          cutoff=NEAR_MISS)
             if abs(len(known) - len(hyphenated)) <= NEAR_MISS_LENGTH]
    return close[0] if close else None


def check_node_config(node_config: Mapping[str, Any]) -> None:
    """Refuse, in one line, the first node config key that misspells one DepL reads.

    Raises
    ------
    ScenarioError
        ``node config clustr: unknown key; did you mean cluster? ...``
    """
    for key in node_config:
        meant = near_miss(str(key))
        if meant is not None:
            raise ScenarioError(f"node config {key}: unknown key; did you mean {meant}? (flower-supernode "
                                f"--node-config '{meant}=...'; the keys DepL reads: docs/DEPLOYMENT.md)")
