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
= closer to optimal, more vertices. The graph is never built in full: since
``k`` is part of the vertex the graph is a DAG, so Dijkstra becomes a forward
pass over rounds (:class:`LayeredGraph`), vectorised with numpy per layer and
stopped as soon as a layer's lightest vertex is no lighter than the best goal.
A dominance rule (same model, both bins lower or equal, lighter) keeps each
layer a Pareto staircase of ``O(1/eta)`` vertices per model, so a solve costs
``O(K * M^2 / eta)`` vertex updates for ``K`` rounds and ``M`` models.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class _Layer:
    mean: np.ndarray
    var: np.ndarray
    model: np.ndarray
    weight: np.ndarray
    cost: np.ndarray
    time: np.ndarray
    parent: np.ndarray
    min_weight: float


class LayeredGraph:
    """The layers of the expanded graph, built once and solved for any ``kappa``.

    Only the goal test depends on ``kappa``, so the layers are built without
    pruning by the best goal's weight (lazily, as far as a query needs) and
    each :meth:`solve` scans them. Pruning by weight only ever removes
    vertices at least as heavy as the best goal, which can neither lead to a
    lighter goal nor win a merge or dominance test against a lighter vertex,
    so :meth:`solve` returns exactly the path of the pruned forward pass.

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
    deadline : float
        Remaining time.
    max_rounds : int
        Remaining rounds.
    bin_width : float
        Discretisation step of mean and std.
    round_price, time_price : float
        Lagrangian prices added to each edge weight (``round_price + time_price * time``).
    dominance : bool
        Drop dominated vertices (see the module docstring).
    """

    def __init__(self, prop: LossPropagator, r: float, edges: dict[str, EdgeSpec],
                 start_mean: float, start_var: float, previous: str | None,
                 deadline: float, max_rounds: int, bin_width: float,
                 round_price: float = 0.0, time_price: float = 0.0,
                 dominance: bool = True) -> None:
        self.prop, self.r, self.dominance = prop, r, dominance
        self.models = list(edges)
        n_m = len(self.models)
        index = {m: i for i, m in enumerate(self.models)}
        allowed = np.zeros((n_m + 1, n_m), dtype=bool)  # row n_m: "no previous model"
        sw_mean = np.zeros((n_m + 1, n_m))
        sw_var = np.zeros((n_m + 1, n_m))
        for i, p in enumerate(self.models):
            for j, m in enumerate(self.models):
                if p == m:
                    allowed[i, j] = True
                elif (p, m) in prop.switch:
                    allowed[i, j] = True
                    sw_mean[i, j], sw_var[i, j] = prop.switch[(p, m)]
        self.reachable = True
        start_idx = n_m
        if previous is None:
            allowed[n_m, :] = True
        elif previous in index:
            start_idx = index[previous]
        else:
            self.reachable = False
        self.allowed_t = allowed.T.copy()
        self.sw_mean, self.sw_var = sw_mean, sw_var
        self.cost_e = np.array([edges[m].cost for m in self.models])
        self.time_e = np.array([edges[m].time for m in self.models])
        self.weight_e = self.cost_e + round_price + time_price * self.time_e
        self.inv_w = 1.0 / bin_width
        self.limit_t = deadline * (1.0 + 1e-9)
        self.max_rounds = max_rounds
        self.start_mean, self.start_var = start_mean, start_var
        self.layers: list[_Layer] = []
        self._last = _Layer(np.array([start_mean]), np.array([start_var]), np.array([start_idx]),
                            np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1, dtype=np.int64), 0.0)
        self._done = not self.reachable
        self._judged_moments: dict[tuple[int, float], tuple[np.ndarray, np.ndarray]] = {}

    def _grow(self) -> bool:
        """Append the next layer; False when there is none (round limit, deadline)."""
        if self._done or len(self.layers) >= self.max_rounds:
            self._done = True
            return False
        prev = self._last
        # Every (model j, parent src) edge of the layer at once, ordered by j then src.
        mod, src = np.nonzero(self.allowed_t[:, prev.model])
        t1 = prev.time[src] + self.time_e[mod]
        ok = t1 <= self.limit_t
        if not ok.all():
            mod, src, t1 = mod[ok], src[ok], t1[ok]
        if src.size == 0:
            self._done = True
            return False
        from_model = prev.model[src]
        m0 = prev.mean[src] + self.sw_mean[from_model, mod]
        v0 = prev.var[src] + self.sw_var[from_model, mod]
        m1, v1 = self.prop.run_many(self.models, mod, m0, v0, self.r)
        w1 = prev.weight[src] + self.weight_e[mod]
        c1 = prev.cost[src] + self.cost_e[mod]
        kb_mean = np.floor(m1 * self.inv_w).astype(np.int64)
        kb_std = np.floor(np.sqrt(v1) * self.inv_w).astype(np.int64)
        order = np.lexsort((w1, kb_std, kb_mean, mod))
        s_mod, s_mean, s_std = mod[order], kb_mean[order], kb_std[order]
        first = np.ones(order.size, dtype=bool)
        first[1:] = (s_mod[1:] != s_mod[:-1]) | (s_mean[1:] != s_mean[:-1]) \
            | (s_std[1:] != s_std[:-1])
        keep = order[first]
        if self.dominance and keep.size > 1:
            keep = keep[_undominated(mod[keep], kb_mean[keep], kb_std[keep], w1[keep])]
        layer = _Layer(m1[keep], v1[keep], mod[keep], w1[keep], c1[keep], t1[keep], src[keep],
                       float(w1[keep].min()))
        self.layers.append(layer)
        self._last = layer
        return True

    def _judged(self, index: int, unseen: float) -> tuple[np.ndarray, np.ndarray]:
        """Judged mean and std of layer ``index``'s vertices (kept: every kappa asks again)."""
        key = (index, unseen)
        found = self._judged_moments.get(key)
        if found is None:
            layer = self.layers[index]
            found = self.prop.judged_mean_std(self.models, layer.model, layer.mean, layer.var, unseen, self.r)
            self._judged_moments[key] = found
        return found

    def solve(self, kappa: float, target: float, unseen: float = 0.0) -> GraphResult | None:
        """Lightest goal (``mean + kappa * std <= target``); None when none is reachable.

        The quantile is that of the judged final loss: version 2's final map
        with the set's unseen share ``unseen`` (:meth:`LossPropagator.judged_array`).
        """
        if not self.reachable:
            return None
        if self.prop.start_quantile(self.start_mean, self.start_var, kappa) <= target:
            return GraphResult([], self.start_mean, self.start_var, 0.0, 0.0, 1)
        best: tuple[float, int, int] | None = None           # (weight, layer, index)
        k = 0
        while k < len(self.layers) or self._grow():
            layer = self.layers[k]
            k += 1
            if best is not None and layer.min_weight >= best[0]:
                break
            judged_mean, judged_std = self._judged(k - 1, unseen)
            goal = judged_mean + kappa * judged_std <= target
            if goal.any():
                g = np.nonzero(goal)[0]
                i = int(g[np.argmin(layer.weight[g])])
                if best is None or layer.weight[i] < best[0]:
                    best = (float(layer.weight[i]), k, i)
        if best is None:
            return None
        path = []
        i = best[2]
        for layer_idx in range(best[1] - 1, -1, -1):
            layer = self.layers[layer_idx]
            path.append(self.models[int(layer.model[i])])
            i = int(layer.parent[i])
        path.reverse()
        goal_layer = self.layers[best[1] - 1]
        j = best[2]
        vertices = 1 + sum(layer.mean.size for layer in self.layers[:k])
        return GraphResult(path, float(goal_layer.mean[j]), float(goal_layer.var[j]),
                           float(goal_layer.cost[j]), float(goal_layer.time[j]), vertices)


def _undominated(model: np.ndarray, mean_bin: np.ndarray, std_bin: np.ndarray,
                 weight: np.ndarray) -> np.ndarray:
    """Mask of vertices not dominated (same model, both bins <=, strictly lighter).

    Keys ``(model, mean_bin, std_bin)`` must be unique. All models are handled
    in one 3-D grid (model x mean bin x std bin, bins relative to the model's
    smallest) whose 2-D prefix minimum gives, per cell, the lightest vertex
    with both bins lower or equal.
    """
    groups, inv = np.unique(model, return_inverse=True)
    if model.size ** 2 <= _grid_cells(inv, groups.size, mean_bin, std_bin):
        # Few vertices spread over many bins: compare every pair (the same mask, less work).
        lighter = ((model[None, :] == model[:, None]) & (mean_bin[None, :] <= mean_bin[:, None])
                   & (std_bin[None, :] <= std_bin[:, None]) & (weight[None, :] < weight[:, None]))
        return ~lighter.any(axis=1)
    mb_min = np.full(groups.size, np.iinfo(np.int64).max)
    sb_min = mb_min.copy()
    np.minimum.at(mb_min, inv, mean_bin)
    np.minimum.at(sb_min, inv, std_bin)
    mb = mean_bin - mb_min[inv]
    sb = std_bin - sb_min[inv]
    grid = np.full((groups.size, int(mb.max()) + 1, int(sb.max()) + 1), np.inf)
    grid[inv, mb, sb] = weight
    np.minimum.accumulate(grid, axis=1, out=grid)
    np.minimum.accumulate(grid, axis=2, out=grid)
    return weight <= grid[inv, mb, sb]


def _grid_cells(inv: np.ndarray, groups: int, mean_bin: np.ndarray, std_bin: np.ndarray) -> int:
    """Cells of :func:`_undominated`'s grid (models x mean bins x std bins, per-model offsets)."""
    mb_span = np.zeros(groups, dtype=np.int64)
    sb_span = np.zeros(groups, dtype=np.int64)
    for g in range(groups):
        sel = inv == g
        mb_span[g] = mean_bin[sel].max() - mean_bin[sel].min()
        sb_span[g] = std_bin[sel].max() - std_bin[sel].min()
    return groups * (int(mb_span.max()) + 1) * (int(sb_span.max()) + 1)
