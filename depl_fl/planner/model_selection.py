"""Model selection and switching: lowest-weight path in an expanded graph.

Vertices are discretised training states ``(current model, loss-mean bin,
loss-std bin)``; each vertex also carries the exact predicted ``(mean, var)``,
elapsed time and round count of the cheapest path found to it (so
discretisation merges paths but never distorts the prediction). An edge is
"one more round with model m" -- when ``m`` differs from the current model it
includes the switch jump, and only switches listed in ``loss.switch`` exist.
Edge weight = the round's cost (plus an optional Lagrangian price on time and
rounds, used by the caller when the deadline or ``max_rounds`` bind). A vertex
is a goal when ``mean + kappa * std <= target`` within the deadline and round
limit.

The graph is built lazily: Dijkstra from the start state, generating
successors on demand and stopping at the first goal popped (the minimum-weight
goal). The bin width is ``eta * |L0 - L*| / 4`` for both mean and std, so the
number of vertices is ``O(M / eta^2)`` and every vertex has at most ``M`` out
edges: smaller ``eta`` = closer to optimal, more vertices. The explored part
can be exported as a :class:`networkx.DiGraph` for inspection/verification.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

from depl_fl.planner.quantile import LossPropagator


@dataclass(frozen=True)
class EdgeSpec:
    """Cost and time of one round with a model (for the plan's client set and levels)."""

    cost: float
    time: float


@dataclass
class GraphResult:
    """The cheapest goal path: models per round, predicted final moments, totals."""

    models: list[str]
    mean: float
    var: float
    cost: float
    time: float
    vertices: int
    edges: list[tuple[int, int, float]] = field(default_factory=list)

    def to_networkx(self) -> nx.DiGraph:
        """The explored part of the expanded graph (only when edges were recorded)."""
        graph = nx.DiGraph()
        graph.add_weighted_edges_from(self.edges)
        return graph


def cheapest_path(prop: LossPropagator, r: float, edges: dict[str, EdgeSpec],
                  start_mean: float, start_var: float, previous: str | None,
                  kappa: float, target: float, deadline: float, max_rounds: int,
                  bin_width: float, round_price: float = 0.0, time_price: float = 0.0,
                  record_edges: bool = False, max_vertices: int = 2_000_000
                  ) -> GraphResult | None:
    """Dijkstra on the lazily expanded state graph; None when no goal is reachable.

    Parameters
    ----------
    prop : LossPropagator
        Moment propagation of the scenario's loss.
    r : float
        Data ratio of the chosen client set.
    edges : dict
        ``model id -> EdgeSpec`` (per-round cost/time of each usable model).
    start_mean, start_var : float
        Loss moments at the start.
    previous : str or None
        Model of the round before the start (None at the very beginning).
    kappa : float
        Quantile multiplier of the goal test ``mean + kappa * std <= target``.
    target : float
        Target loss L*.
    deadline : float
        Remaining time.
    max_rounds : int
        Remaining rounds.
    bin_width : float
        Discretisation step of mean and std.
    round_price, time_price : float
        Lagrangian prices added to each edge weight (``round_price + time_price * time``).
    record_edges : bool
        Keep the explored edges (for :meth:`GraphResult.to_networkx`).
    max_vertices : int
        Safety cap on settled vertices.

    Returns
    -------
    GraphResult or None
    """
    models = list(edges)
    allowed = {p: [m for m in models if m == p or (p, m) in prop.switch] for p in models}
    first = [m for m in models if previous is None or m == previous or (previous, m) in prop.switch]
    inv_w = 1.0 / bin_width
    # per vertex: mean, var, model, time, rounds, cost, parent
    means = [start_mean]
    vars_ = [start_var]
    mods: list[str | None] = [previous]
    times = [0.0]
    rounds = [0]
    costs = [0.0]
    parents = [-1]
    keys: list[tuple | None] = [None]
    best: dict[tuple, float] = {}
    heap = [(0.0, 0)]
    settled = 0
    recorded: list[tuple[int, int, float]] = []
    weights = {m: e.cost + round_price + time_price * e.time for m, e in edges.items()}
    while heap:
        w, v = heapq.heappop(heap)
        if keys[v] is not None and best[keys[v]] < w:
            continue  # superseded by a cheaper path to the same vertex
        mean, var = means[v], vars_[v]
        if mean + kappa * math.sqrt(var) <= target:
            path = []
            u = v
            while u > 0:
                path.append(mods[u])
                u = parents[u]
            path.reverse()
            return GraphResult(path, mean, var, costs[v], times[v], len(means), recorded)
        settled += 1
        if settled > max_vertices:
            break
        cur = mods[v]
        if rounds[v] >= max_rounds:
            continue
        for m in (first if cur is None or v == 0 else allowed[cur]):
            e = edges[m]
            t = times[v] + e.time
            if t > deadline * (1.0 + 1e-9):
                continue
            nm, nv = (mean, var) if cur is None or cur == m else prop.switch_scalar(cur, m, mean, var)
            nm, nv = prop.run_scalar(m, nm, nv, r)
            nw = w + weights[m]
            key = (m, int(nm * inv_w), int(math.sqrt(nv) * inv_w))
            if best.get(key, math.inf) <= nw:
                continue
            best[key] = nw
            means.append(nm)
            vars_.append(nv)
            mods.append(m)
            times.append(t)
            rounds.append(rounds[v] + 1)
            costs.append(costs[v] + e.cost)
            parents.append(v)
            keys.append(key)
            u = len(means) - 1
            if record_edges:
                recorded.append((v, u, weights[m]))
            heapq.heappush(heap, (nw, u))
    return None


def sequence_cost(models: Sequence[str], edges: dict[str, EdgeSpec]) -> float:
    """Total cost of a model sequence under per-model round costs."""
    return float(sum(edges[m].cost for m in models))
