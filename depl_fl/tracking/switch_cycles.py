"""No net gain from switching variants in a circle: the measured switch jumps raised until no cycle gains.

Why. A model switch ``p -> m`` adds the jump ``Y ~ Normal(mean, std)`` to the
loss (the contract's ``loss.switch``); the exploration measures each jump's
mean on a few switch rounds, early, on the fresh model's plateau, where a
round's loss moves by its oscillation. A switch and the switch back return the
same network without training it, so their jumps cannot lower the loss
between them; measured, both can be negative. The planner then harvests the
measurement error: a static plan alternates the variants every round and
counts the loop's "gain" as training. On a user's residual network with the
digits CNN's constants, the four static plans of 21-34 rounds that ended above
their own predicted 0.9-quantile each switched in 20-31 of their rounds, all
with a measured gain of 0.03-0.06 a round trip
(``benchmarks/switch_cycle_replan.py``).

The correction. Every measured jump mean is raised by the same least amount
``lambda = max(0, -min over cycles of the cycle's mean jump)`` that leaves no
cycle of allowed switches a net gain (a cycle's mean jump is the sum of its
jumps over its length; the least uniform shift that makes every cycle's sum
non-negative is minus the minimum cycle mean). For two variants that is half
the loop's deficit on each jump: the least-squares projection of the two
measured means onto "the round trip gains nothing". A profile without such a
cycle is unchanged (``lambda`` 0). Every input is the job's own measured
jumps; the spreads stay as measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def least_cycle_mean(jumps: Mapping[tuple[str, str], float]) -> float | None:
    """The smallest mean jump over the directed cycles of the switch graph (Karp's algorithm).

    Parameters
    ----------
    jumps : mapping
        ``{(from, to): mean jump}`` of the allowed switches (``from != to``).

    Returns
    -------
    float or None
        ``min over cycles C of sum(jumps on C) / len(C)``; None when the
        allowed switches form no cycle. The minimum over every closed walk is
        attained on a simple cycle. Karp's minimum mean cycle takes
        ``O(V E)`` steps, where listing the cycles grows factorially with the
        variants.
    """
    nodes = sorted({n for edge in jumps for n in edge})
    n = len(nodes)
    index = {node: i for i, node in enumerate(nodes)}
    edges = [(index[a], index[b], float(w)) for (a, b), w in jumps.items()]
    inf = math.inf
    # walks[k][v]: the least total jump of a walk of exactly k switches ending at v, from any start
    walks = [[0.0] * n]
    for _ in range(n):
        last, step = walks[-1], [inf] * n
        for a, b, w in edges:
            if last[a] + w < step[b]:
                step[b] = last[a] + w
        walks.append(step)
    best: float | None = None
    for v in range(n):
        if walks[n][v] == inf:
            continue
        worst = max((walks[n][v] - walks[k][v]) / (n - k) for k in range(n) if walks[k][v] < inf)
        best = worst if best is None else min(best, worst)
    return best


def cycle_gain_shift(jumps: Mapping[tuple[str, str], float]) -> float:
    """``lambda >= 0``: the least amount that, added to every jump, leaves no cycle a net gain."""
    least = least_cycle_mean(jumps)
    return 0.0 if least is None or least >= 0.0 else -least


def without_cycle_gain(switch: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The contract's ``loss.switch`` entries with every mean raised by :func:`cycle_gain_shift`.

    Parameters
    ----------
    switch : sequence of mapping
        ``[{"from", "to", "mean", "std"}, ...]`` as the profile records them.

    Returns
    -------
    list of dict
        Copies; unchanged values when no cycle gains (or none exists).
    """
    jumps = {(str(s["from"]), str(s["to"])): float(s["mean"]) for s in switch if s["from"] != s["to"]}
    shift = cycle_gain_shift(jumps)
    if not (shift > 0.0 and math.isfinite(shift)):
        return [dict(s) for s in switch]
    return [{**s, "mean": float(s["mean"]) + shift} if s["from"] != s["to"] else dict(s) for s in switch]
