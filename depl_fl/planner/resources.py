"""Resource allocation: which level each active cluster runs at, per round.

Mapping onto VNF placement (as in the paper): clusters are the *servers*,
the model trained in a round is the *VNF* to place, and the model's
complexity (FLOPs per sample, bytes) is the VNF's *requirement*. A placement
puts the chosen clients' share of the VNF on their cluster's server at one of
its resource levels; a server's capacity is ``max_clients``. Placement cost is
energy, placement latency is the round time (the slowest server).

For a fixed client set the data (hence the loss) does not depend on levels,
so this is a pure cost/time trade-off, solved in two exact-or-near-exact steps:

1. :func:`round_options` -- for one model and client set, the **Pareto front**
   of (round time, round cost) over all level vectors. It is exact: for any
   round-time budget ``tau`` each cluster independently picks its cheapest
   level whose time is <= ``tau``, and only the cluster-level times are
   candidate budgets, so ``O((C L)^2 C)`` work instead of ``L^C`` vectors.
2. :func:`allocate_levels` -- given the model of every round, pick one option
   per round minimising total cost under the deadline: a multiple-choice
   knapsack, solved greedily on each model's lower convex hull of options
   (from the fastest options, slow rounds down by best joules saved per
   second added while the deadline holds). This is the LP relaxation's
   greedy and is optimal up to one partially-usable step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from depl_fl.contract.scenario import Scenario


@dataclass(frozen=True)
class ClientSet:
    """A set of clients with its per-cluster aggregates (what the cost model needs)."""

    ids: tuple[str, ...]
    clusters: tuple[str, ...]
    samples: np.ndarray     # per cluster in ``clusters``: sum of num_samples
    counts: np.ndarray      # per cluster: number of clients
    max_samples: np.ndarray  # per cluster: largest num_samples
    total_samples: int

    @classmethod
    def from_ids(cls, scenario: Scenario, ids: Sequence[str]) -> "ClientSet":
        """Aggregate ``ids`` per cluster (ids must exist)."""
        agg: dict[str, list[int]] = {}
        for cid in ids:
            client = scenario.client(cid)
            entry = agg.setdefault(client.cluster, [0, 0, 0])
            entry[0] += client.num_samples
            entry[1] += 1
            entry[2] = max(entry[2], client.num_samples)
        order = [c.id for c in scenario.clusters if c.id in agg]
        return cls(tuple(ids), tuple(order),
                   np.array([agg[c][0] for c in order], dtype=float),
                   np.array([agg[c][1] for c in order], dtype=float),
                   np.array([agg[c][2] for c in order], dtype=float),
                   int(sum(agg[c][0] for c in order)))


@dataclass(frozen=True)
class Option:
    """One level vector for a round: its time, cost and the levels of the active clusters."""

    time: float
    cost: float
    levels: tuple[tuple[str, int], ...]

    def level_map(self) -> dict[str, int]:
        """The ``levels`` mapping of a plan round."""
        return dict(self.levels)


def _cluster_tables(scenario: Scenario, cset: ClientSet, model_id: str
                    ) -> tuple[np.ndarray, np.ndarray, float]:
    """Per active cluster and level: time and energy (without activation), plus total activation."""
    model = scenario.model(model_id)
    clusters = [scenario.cluster(c) for c in cset.clusters]
    n_levels = max(len(cl.levels) for cl in clusters)
    times = np.full((len(clusters), n_levels), np.inf)
    costs = np.full((len(clusters), n_levels), np.inf)
    activation = 0.0
    le = scenario.local_epochs
    for i, cl in enumerate(clusters):
        flops_per_s = np.array([lv.flops_per_s for lv in cl.levels], dtype=float)
        joules_per_flop = np.array([lv.joules_per_flop for lv in cl.levels], dtype=float)
        comm_t = 2.0 * model.size_bytes / cl.bytes_per_s
        comm_e = cset.counts[i] * 2.0 * model.size_bytes * cl.joules_per_byte
        times[i, :flops_per_s.size] = le * cset.max_samples[i] * model.flops_per_sample / flops_per_s + comm_t
        costs[i, :flops_per_s.size] = le * cset.samples[i] * model.flops_per_sample * joules_per_flop + comm_e
        activation += cl.activation_joules
    return times, costs, activation


def round_options(scenario: Scenario, cset: ClientSet, model_id: str) -> list[Option]:
    """Pareto front of (round time, round cost) for ``model_id`` on ``cset``.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    cset : ClientSet
        The round's clients.
    model_id : str
        The model trained in the round.

    Returns
    -------
    list of Option
        Sorted by increasing time (hence decreasing cost); the first is the
        fastest round, the last the cheapest.
    """
    times, costs, activation = _cluster_tables(scenario, cset, model_id)
    taus = np.unique(times[np.isfinite(times)])
    taus = taus[taus >= np.max(np.min(times, axis=1))]
    ok = times[None, :, :] <= taus[:, None, None] * (1.0 + 1e-12)
    masked = np.where(ok, costs[None, :, :], np.inf)
    choice = np.argmin(masked, axis=2)                       # (U, C)
    cluster = np.arange(len(cset.clusters))[None, :]
    total = costs[cluster, choice].sum(axis=1) + activation
    chosen_t = times[cluster, choice].max(axis=1)
    options: list[Option] = []
    best = np.inf
    for u in np.argsort(chosen_t, kind="stable"):
        if total[u] < best * (1.0 - 1e-12):
            best = total[u]
            levels = choice[u].tolist()
            options.append(Option(float(chosen_t[u]), float(total[u]),
                                  tuple(zip(cset.clusters, levels, strict=True))))
    return options


def lagrangian_option(options: Sequence[Option], lam: float) -> Option:
    """The option minimising ``cost + lam * time`` (the Lagrangian of the deadline)."""
    return min(options, key=lambda o: (o.cost + lam * o.time, o.time))


def _lower_hull(options: Sequence[Option]) -> list[int]:
    """Indices of the lower convex hull of (time, cost), time ascending."""
    hull: list[int] = []
    for i, o in enumerate(options):
        while len(hull) >= 2:
            a, b = options[hull[-2]], options[hull[-1]]
            # b is above the segment a -> o: drop it
            if (b.cost - a.cost) * (o.time - a.time) >= (o.cost - a.cost) * (b.time - a.time):
                hull.pop()
            else:
                break
        hull.append(i)
    return hull


def allocate_levels(models: Sequence[str], options: dict[str, list[Option]],
                    deadline: float) -> list[Option] | None:
    """Cheapest option per round under a total-time deadline (greedy MCKP).

    Parameters
    ----------
    models : sequence of str
        The model of every round, in order.
    options : dict
        ``model id -> round_options(...)`` for the plan's client set.
    deadline : float
        Time available for all rounds.

    Returns
    -------
    list of Option or None
        One option per round, or None when even the fastest options miss the deadline.
    """
    counts: dict[str, int] = {}
    for m in models:
        counts[m] = counts.get(m, 0) + 1
    slack = deadline - sum(options[m][0].time * k for m, k in counts.items())
    if slack < -1e-9 * max(deadline, 1.0):
        return None
    hulls = {m: _lower_hull(options[m]) for m in counts}
    steps = []
    for m, hull in hulls.items():
        for h in range(len(hull) - 1):
            a, b = options[m][hull[h]], options[m][hull[h + 1]]
            steps.append(((a.cost - b.cost) / (b.time - a.time), m, h, b.time - a.time))
    steps.sort(key=lambda s: -s[0])
    at = {m: [counts[m]] + [0] * (len(hulls[m]) - 1) for m in counts}
    for _, m, h, dt in steps:
        movable = at[m][h]
        if movable == 0:
            continue
        q = min(movable, int(max(slack, 0.0) // dt)) if dt > 0 else movable
        if q <= 0:
            continue
        at[m][h] -= q
        at[m][h + 1] += q
        slack -= q * dt
    pool = {m: [options[m][hulls[m][h]] for h in range(len(hulls[m])) for _ in range(at[m][h])]
            for m in counts}
    return [pool[m].pop() for m in models]


def _hull_steps(options: Sequence[Option]) -> list[tuple[float, float, float]]:
    """``(joules saved per second added, seconds added, joules saved)`` of each step along the
    lower convex hull of a model's options, fastest first (the steps :func:`allocate_levels` takes)."""
    hull = _lower_hull(options)
    return [((a.cost - b.cost) / (b.time - a.time), b.time - a.time, a.cost - b.cost)
            for a, b in ((options[i], options[j]) for i, j in zip(hull, hull[1:], strict=False))]


def block_costs(blocks: Sequence[tuple[Sequence[Option], np.ndarray]], deadline: float) -> np.ndarray:
    """Cost of :func:`allocate_levels` for many schedules of the same models at once.

    Parameters
    ----------
    blocks : sequence of (options, counts)
        Per distinct model of the schedules: its options (a Pareto front,
        fastest first) and its number of rounds in each schedule (an array,
        all of one shape; ``inf`` marks a schedule that does not exist).
    deadline : float
        Time available for all rounds.

    Returns
    -------
    numpy.ndarray
        Per schedule, the total cost of the greedy level allocation under the
        deadline (the same steps as :func:`allocate_levels`, so the same
        cost); ``inf`` where even the fastest options miss the deadline.
    """
    counts = [np.asarray(k, dtype=float) for _, k in blocks]
    alive = np.all([np.isfinite(k) for k in counts], axis=0)
    counts = [np.where(alive, k, 0.0) for k in counts]
    slack = deadline - sum(k * opts[0].time for (opts, _), k in zip(blocks, counts, strict=True))
    cost = sum(k * opts[0].cost for (opts, _), k in zip(blocks, counts, strict=True))
    late = slack < -1e-9 * max(deadline, 1.0)
    steps = [(-rate, b, h, dt, saved) for b, (opts, _) in enumerate(blocks)
             for h, (rate, dt, saved) in enumerate(_hull_steps(opts))]
    steps.sort(key=lambda s: s[0])
    # Rounds of each block still at hull vertex h (the greedy moves them one vertex slower).
    at = [{0: k.copy()} for k in counts]
    for _, b, h, dt, saved in steps:
        movable = at[b].get(h)
        if movable is None:
            continue
        q = movable if dt <= 0 else np.minimum(movable, np.floor(np.maximum(slack, 0.0) / dt))
        at[b][h] = movable - q
        at[b][h + 1] = at[b].get(h + 1, 0.0) + q
        slack = slack - q * dt
        cost = cost - q * saved
    return np.where(alive & ~late, cost, np.inf)
