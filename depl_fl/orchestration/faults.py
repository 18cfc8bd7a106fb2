"""Fault injection for robustness experiments: make chosen clients misbehave on purpose.

Configured by the run configuration (``faults.clients``, ``faults.kind``,
``faults.from_round``, ``faults.scale``, ``faults.slow_s``; works in every
simulation backend since the ClientApp gets the configuration by closure) or,
in a deployment, by the SuperNode's node config: a node started with
``--node-config '... faults-kind="nan" faults-from-round=3'`` (optional
``faults-scale``, ``faults-slow-s``) is faulty whatever ``faults.clients`` says.

Kinds, applied to the training reply from round ``from_round`` on:

``nan``           the first array is all NaN
``huge``          1e30 is added to every weight (finite, destroys a plain average)
``scale``         every weight is multiplied by ``scale``
``num_examples``  ``num-examples`` claims 1e9 samples
``dtype``         the arrays are sent as complex numbers
``shape``         the first array loses its last row
``crash``         the ClientApp raises (an error reply)
``slow``          the reply is delayed by ``slow_s`` seconds
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from depl_fl.runs.config_choices import FAULT_KINDS, fault_kind

HUGE = 1e30
CLAIMED_SAMPLES = 1_000_000_000


class InjectedFault(RuntimeError):
    """Raised by a client told to crash."""


@dataclass(frozen=True)
class FaultSpec:
    """What one client does wrong and from which round on."""

    kind: str
    from_round: int = 1
    scale: float = 100.0
    slow_s: float = 5.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"faults kind: must be one of {', '.join(FAULT_KINDS)}, got {self.kind!r}")


def fault_of(cfg: Mapping[str, Any], node_config: Mapping[str, Any], client_id: str) -> FaultSpec | None:
    """The fault of this client: node config ``faults-*`` keys first, then ``cfg["faults"]``."""
    if node_config.get("faults-kind") is not None:
        return FaultSpec(str(fault_kind(node_config["faults-kind"])),
                         int(node_config.get("faults-from-round", 1)),
                         float(node_config.get("faults-scale", 100.0)),
                         float(node_config.get("faults-slow-s", 5.0)))
    faults = cfg.get("faults") or {}
    if faults.get("kind") is None or client_id not in (faults.get("clients") or ()):
        return None
    return FaultSpec(str(fault_kind(faults["kind"])), int(faults.get("from_round", 1)),
                     float(faults.get("scale", 100.0)), float(faults.get("slow_s", 5.0)))


def corrupt(spec: FaultSpec, state: dict[str, np.ndarray], metrics: dict[str, Any]
            ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The reply's arrays and metrics after ``spec``'s fault (new dicts; inputs unchanged)."""
    state, metrics = dict(state), dict(metrics)
    first = next(iter(state))
    if spec.kind == "crash":
        raise InjectedFault("injected fault: crash")
    if spec.kind == "slow":
        time.sleep(spec.slow_s)
    elif spec.kind == "nan":
        state[first] = np.full_like(state[first], np.nan)
    elif spec.kind == "huge":
        state = {k: v + np.asarray(HUGE, dtype=v.dtype) for k, v in state.items()}
    elif spec.kind == "scale":
        state = {k: (v * spec.scale).astype(v.dtype) for k, v in state.items()}
    elif spec.kind == "num_examples":
        metrics["num-examples"] = CLAIMED_SAMPLES
    elif spec.kind == "dtype":
        state = {k: v.astype(np.complex64) for k, v in state.items()}
    elif spec.kind == "shape":
        state[first] = state[first][:-1]
    return state, metrics


def apply_faults(cfg: Mapping[str, Any], context: Any, server_round: int, state: dict[str, np.ndarray],
                 metrics: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Corrupt this node's training reply if it is configured to be faulty in ``server_round``."""
    node_config = context.node_config
    spec = fault_of(cfg, node_config, f"c{int(node_config['partition-id'])}")
    if spec is None or server_round < spec.from_round:
        return state, metrics
    return corrupt(spec, state, metrics)
