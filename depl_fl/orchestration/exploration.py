"""The Flower-free parts of the federated exploration: client groups, round cost, merged models.

:class:`strategies.federated_profiling.FederatedProfiler` drives the exploration
rounds through the Flower grid; what it computes between two message
exchanges lives here: the disjoint random client groups of a round, the
clients of the cheapest clusters, the cheapest resource levels, the modelled
cost of a round of several groups, the weighted merge of the groups'
aggregates, and :class:`ExploreProgress`, what a checkpoint keeps of an
unfinished exploration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import client_energy, client_time
from depl_fl.diskcache import atomic_write


def write_json_atomic(path: Path, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` to ``path`` through a unique temporary file and ``os.replace`` (concurrent-safe)."""
    text = json.dumps(doc, indent=2) + "\n"
    atomic_write(path, lambda fh: fh.write(text), binary=False)


def worst(values: Any) -> float | None:
    """Largest of ``values``; ``None`` when any is missing (an evaluation without a test split)."""
    values = list(values)
    return None if not values or any(v is None for v in values) else float(max(values))


def split_groups(clients: Sequence[str], num_groups: int, rng: np.random.Generator) -> list[list[str]]:
    """Disjoint random groups of ``clients`` with random sizes (each at least one client)."""
    order = [clients[i] for i in rng.permutation(len(clients))]
    n = len(order)
    if num_groups <= 1 or n < num_groups:
        return [sorted(order)] + [[] for _ in range(num_groups - 1)]
    low = max(1, n // (2 * num_groups))
    cuts = sorted(rng.choice(np.arange(low, n - low + 1), size=num_groups - 1, replace=num_groups > 2))
    bounds = [0, *[int(c) for c in cuts], n]
    groups = [sorted(order[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return groups if all(groups) else [sorted(order[i::num_groups]) for i in range(num_groups)]


def sizes_by_cost(groups: Sequence[Sequence[str]], costs: Sequence[float]) -> list[list[str]]:
    """``groups`` handed to the variants of ``costs`` (per-sample cost, in the groups' order) so that
    the cheaper a variant, the larger its group: the group sizes stay those drawn, the costliest
    variant gets the smallest group.

    Why: on a small federation the exploration pool holds few clients and a client on the largest
    variant costs several times one on a pruned variant; a random hand-out put two of three clients
    on the largest variant in a third of the rounds, and such a round costs 1.5x one with one client
    there. Ties keep the drawn order (stable sorts).
    """
    by_size = sorted(range(len(groups)), key=lambda i: -len(groups[i]))
    by_cost = sorted(range(len(costs)), key=lambda i: float(costs[i]))
    out: list[list[str]] = [[] for _ in groups]
    for variant, group in zip(by_cost, by_size, strict=True):
        out[variant] = list(groups[group])
    return out


def round_clients(clients: Sequence[str], cap: int | None, rng: np.random.Generator) -> list[str]:
    """The clients of one exploration round: all of them, or a random ``cap`` of them (sorted)."""
    if cap is None or len(clients) <= int(cap):
        return list(clients)
    return sorted(clients[i] for i in rng.choice(len(clients), size=int(cap), replace=False))


def cheapest_clients(scenario: Scenario, clients: Sequence[str], levels: Mapping[str, int], model: str,
                     least: int) -> list[str]:
    """The clients of the clusters whose exploration round costs least per sample, at least ``least``.

    A cluster's cost per sample is what a round of ``model`` on all its
    ``clients`` costs at ``levels`` (client energies plus the cluster's
    activation) over their samples. Clusters are taken cheapest first until
    they hold at least ``least`` clients (every cluster when none does).
    """
    by_cluster: dict[str, list[str]] = {}
    for cid in clients:
        by_cluster.setdefault(scenario.client(cid).cluster, []).append(cid)

    def per_sample(cluster: str) -> float:
        members = by_cluster[cluster]
        energy = sum(client_energy(scenario, c, model, levels[cluster]) for c in members)
        samples = sum(scenario.client(c).num_samples for c in members)
        return (energy + scenario.cluster(cluster).activation_joules) / max(samples, 1)

    chosen: list[str] = []
    for cluster in sorted(by_cluster, key=lambda c: (per_sample(c), c)):
        chosen += by_cluster[cluster]
        if len(chosen) >= least:
            break
    return sorted(chosen)


def cheapest_levels(scenario: Scenario) -> dict[str, int]:
    """Per cluster, the level with the lowest energy per FLOP."""
    return {c.id: int(np.argmin([lv.joules_per_flop for lv in c.levels])) for c in scenario.clusters}


def round_cost(scenario: Scenario, decisions: Sequence[RoundDecision]) -> tuple[float, float]:
    """Modelled ``(energy_j, time_s)`` of one round running several disjoint groups at once.

    Client energies add up, every active cluster pays its activation once and
    the round lasts as long as its slowest client.
    """
    energy, duration, active = 0.0, 0.0, set()
    for d in decisions:
        for cid in d.clients:
            level = d.levels[scenario.client(cid).cluster]
            energy += client_energy(scenario, cid, d.model, level)
            duration = max(duration, client_time(scenario, cid, d.model, level))
            active.add(scenario.client(cid).cluster)
    return energy + sum(scenario.cluster(c).activation_joules for c in active), duration


def merge_states(states: Sequence[Mapping[str, np.ndarray]],
                 weights: Sequence[float]) -> dict[str, np.ndarray]:
    """Weighted average of full-size model states (the groups' aggregates)."""
    total = float(sum(weights))
    return {k: sum(np.asarray(s[k], dtype=np.float64) * (w / total)
                   for s, w in zip(states, weights, strict=True)).astype(states[0][k].dtype)
            for k in states[0]}


@dataclass
class ExploreProgress:
    """Where an unfinished exploration stands after round ``done``: what a checkpoint keeps of it.

    Every exploration round starts from the global model (switch rounds too),
    so no group aggregate needs keeping: the losses so far, the observations,
    the per-variant trajectories (evaluation noise) and the trained client
    sets (coverage bounds).
    """

    done: int
    fresh_loss: float
    losses: dict[str, float]
    observations: list[Any]
    trajectories: dict[str, tuple[list[float], list[float]]]
    pilot_sets: list[list[str]]
    wall_s: float = 0.0
    #: Per variant, ``(validation loss, its standard error)`` of every evaluation so far.
    sem_points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
