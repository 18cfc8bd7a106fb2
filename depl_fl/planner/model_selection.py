"""Model selection and switching: lowest-weight path in an expanded graph.

Vertices are discretised training states ``(round k, current model,
loss-mean bin, loss-std bin)``; each vertex also carries the exact predicted
``(mean, var)``, elapsed time and cost of the lightest path found to it (so
discretisation merges paths but never distorts the prediction). An edge is
"one more round with model m" -- when ``m`` differs from the current model it
includes the switch jump, and only switches listed in ``loss.switch`` exist.
Edge weight = the round's cost (plus optional Lagrangian prices on time and
rounds, used by the caller when the deadline binds). A vertex is a goal when
``mean + kappa * std <= target`` within the deadline and round limit.

The bin width is ``eta * |L0 - L*| / 4`` for mean and std, so a layer holds
``O(M / eta^2)`` vertices, each with at most ``M`` out-edges: smaller ``eta``
= closer to optimal, more vertices. The graph is never built in full:

* :func:`cheapest_path` -- lazy Dijkstra from the start state, successors
  generated on demand, stops at the first goal popped; can export the
  explored part as a :class:`networkx.DiGraph` (used to cross-check it).
* :func:`layered_path` -- the production solver: since ``k`` is part of the
  vertex the graph is a DAG, so Dijkstra becomes a forward pass over rounds,
  vectorised with numpy per layer and stopped as soon as a layer's lightest
  vertex is no lighter than the best goal. Both return the same path.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

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
    edges: list[tuple[object, object, float]] = field(default_factory=list)
    goal: object = "start"

    def to_networkx(self) -> nx.DiGraph:
        """The explored part of the expanded graph (vertices are discretised states).

        Only available when edges were recorded; the start vertex is ``"start"``.
        """
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
    recorded: list[tuple[object, object, float]] = []
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
            return GraphResult(path, mean, var, costs[v], times[v], len(means), recorded,
                               keys[v] if keys[v] is not None else "start")
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
            key = (rounds[v] + 1, m, int(nm * inv_w), int(math.sqrt(nv) * inv_w))
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
                recorded.append((keys[v] if keys[v] is not None else "start", key, weights[m]))
            heapq.heappush(heap, (nw, u))
    return None


def sequence_cost(models: Sequence[str], edges: dict[str, EdgeSpec]) -> float:
    """Total cost of a model sequence under per-model round costs."""
    return float(sum(edges[m].cost for m in models))


def layered_path(prop: LossPropagator, r: float, edges: dict[str, EdgeSpec],
                 start_mean: float, start_var: float, previous: str | None,
                 kappa: float, target: float, deadline: float, max_rounds: int,
                 bin_width: float, round_price: float = 0.0, time_price: float = 0.0,
                 dominance: bool = True) -> GraphResult | None:
    """The same expanded graph as :func:`cheapest_path`, solved layer by layer.

    Vertices ``(round k, model, mean bin, std bin)`` form a DAG in ``k``, so
    Dijkstra reduces to a forward pass over rounds; each layer is processed
    with numpy (all vertices x all models at once, duplicates merged keeping
    the lightest). The pass stops as soon as the lightest vertex of a layer
    weighs at least the best goal found (every edge has positive weight), or
    at ``max_rounds``. Same parameters and result as :func:`cheapest_path`,
    plus ``dominance``: within a layer and model, drop a vertex when another
    one has a lower-or-equal mean bin, lower-or-equal std bin and a smaller
    weight (it is at least as close to every goal, for less). This keeps each
    layer a Pareto staircase of ``O(1/eta)`` vertices instead of
    ``O(1/eta^2)``.
    """
    models = list(edges)
    n_m = len(models)
    index = {m: i for i, m in enumerate(models)}
    allowed = np.zeros((n_m + 1, n_m), dtype=bool)  # row n_m: "no previous model"
    sw_mean = np.zeros((n_m + 1, n_m))
    sw_var = np.zeros((n_m + 1, n_m))
    for i, p in enumerate(models):
        for j, m in enumerate(models):
            if p == m:
                allowed[i, j] = True
            elif (p, m) in prop.switch:
                allowed[i, j] = True
                sw_mean[i, j], sw_var[i, j] = prop.switch[(p, m)]
    if previous is None:
        allowed[n_m, :] = True
        start_idx = n_m
    elif previous in index:
        start_idx = index[previous]
    else:
        return None
    cost_e = np.array([edges[m].cost for m in models])
    time_e = np.array([edges[m].time for m in models])
    weight_e = cost_e + round_price + time_price * time_e
    inv_w = 1.0 / bin_width
    mean = np.array([start_mean])
    var = np.array([start_var])
    model = np.array([start_idx])
    weight = np.zeros(1)
    cost = np.zeros(1)
    time_ = np.zeros(1)
    if start_mean + kappa * math.sqrt(start_var) <= target:
        return GraphResult([], start_mean, start_var, 0.0, 0.0, 1)
    history: list[tuple[np.ndarray, np.ndarray]] = []   # per layer: (parent index, model)
    best: tuple[float, int, int] | None = None           # (weight, layer, index)
    best_state = None
    vertices = 1
    for k in range(1, max_rounds + 1):
        parts = []
        for j in range(n_m):
            src = np.nonzero(allowed[model, j])[0]
            if src.size == 0:
                continue
            t = time_[src] + time_e[j]
            ok = t <= deadline * (1.0 + 1e-9)
            src, t = src[ok], t[ok]
            if src.size == 0:
                continue
            sm = sw_mean[model[src], j]
            sv = sw_var[model[src], j]
            m0, v0 = mean[src] + sm, var[src] + sv
            m1, v1 = prop.run_array(models[j], m0, v0, r)
            parts.append((src, np.full(src.size, j), m1, v1, weight[src] + weight_e[j],
                          cost[src] + cost_e[j], t))
        if not parts:
            break
        src, mod, m1, v1, w1, c1, t1 = (np.concatenate(x) for x in zip(*parts))
        kb_mean = np.floor(m1 * inv_w).astype(np.int64)
        kb_std = np.floor(np.sqrt(v1) * inv_w).astype(np.int64)
        order = np.lexsort((w1, kb_std, kb_mean, mod))
        keys = np.stack([mod[order], kb_mean[order], kb_std[order]])
        first = np.ones(order.size, dtype=bool)
        first[1:] = np.any(keys[:, 1:] != keys[:, :-1], axis=0)
        keep = order[first]
        if best is not None:
            keep = keep[w1[keep] < best[0]]
        if dominance and keep.size > 1:
            keep = keep[_undominated(mod[keep], kb_mean[keep], kb_std[keep], w1[keep])]
        if keep.size == 0:
            break
        mean, var, model = m1[keep], v1[keep], mod[keep]
        weight, cost, time_ = w1[keep], c1[keep], t1[keep]
        history.append((src[keep], mod[keep]))
        vertices += keep.size
        goal = mean + kappa * np.sqrt(var) <= target
        if goal.any():
            g = np.nonzero(goal)[0]
            i = int(g[np.argmin(weight[g])])
            if best is None or weight[i] < best[0]:
                best = (float(weight[i]), k, i)
                best_state = (float(mean[i]), float(var[i]), float(cost[i]), float(time_[i]))
    if best is None:
        return None
    path = []
    i = best[2]
    for layer in range(best[1] - 1, -1, -1):
        parents, mods = history[layer]
        path.append(models[int(mods[i])])
        i = int(parents[i])
    path.reverse()
    return GraphResult(path, best_state[0], best_state[1], best_state[2], best_state[3], vertices)



def _undominated(model: np.ndarray, mean_bin: np.ndarray, std_bin: np.ndarray,
                 weight: np.ndarray) -> np.ndarray:
    """Mask of vertices not dominated (same model, both bins <=, strictly lighter)."""
    keep = np.ones(model.size, dtype=bool)
    for j in np.unique(model):
        idx = np.nonzero(model == j)[0]
        mb = mean_bin[idx] - mean_bin[idx].min()
        sb = std_bin[idx] - std_bin[idx].min()
        grid = np.full((int(mb.max()) + 1, int(sb.max()) + 1), np.inf)
        grid[mb, sb] = weight[idx]  # keys are unique per (model, mb, sb)
        prefix = np.minimum.accumulate(np.minimum.accumulate(grid, axis=0), axis=1)
        keep[idx] = weight[idx] <= prefix[mb, sb]
    return keep
