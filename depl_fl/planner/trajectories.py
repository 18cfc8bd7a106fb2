"""Monte Carlo of candidate plans that resumes from shared round prefixes.

The planner checks many round sequences with the same seed and trajectory
count, and they often share a prefix (``trim`` removes one round of a plan;
the final check repeats the last accepted one). With a fixed seed the random
stream is consumed round by round, so the losses *and* the generator state
after a prefix are the same for every sequence that starts with it. This
cache keeps both at a few rounds of recently simulated sequences and restarts
from the longest stored prefix, which gives bit-for-bit the losses of a fresh
:func:`depl_fl.contract.semantics.simulate_final_losses` run. The final losses
of the most recent whole sequences are kept too: the planner asks for some
plans again long after their prefix states were evicted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import iter_round_losses, judged_losses

# Sequences remembered per (trajectories, seed), and states kept per sequence
# (memory: MAX_SEQUENCES * MAX_STATES arrays of n floats).
MAX_SEQUENCES = 3
MAX_STATES = 32
# Final losses kept for sequences simulated in full (the planner re-checks some
# plans much later, e.g. the cheapest passing plan of a kappa search): at most
# MAX_FINALS arrays of n floats.
MAX_FINALS = 16

StartFn = Callable[[int, np.random.Generator], "np.ndarray | float"]


@dataclass
class _Entry:
    keys: list[tuple[str, Any]]
    states: dict[int, tuple[np.ndarray | float, dict]] = field(default_factory=dict)
    final: np.ndarray | None = None


def _common_prefix(a: Sequence[tuple[str, Any]], b: Sequence[tuple[str, Any]]) -> int:
    k = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        k += 1
    return k


class TrajectoryCache:
    """Final losses of round sequences, resumed from stored prefix states.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    previous : str or None
        Model of the round before the first one (re-planning).
    previous_clients : sequence of str or None
        Client set of the round before the first one (None: every client).
    start : callable
        ``start(n, rng) -> initial losses`` (a scalar or an array of shape
        ``(n,)``), drawn from a fresh ``default_rng(seed)`` before the rounds.
    """

    def __init__(self, scenario: Scenario, previous: str | None, start: StartFn,
                 previous_clients: Sequence[str] | None = None) -> None:
        self.scenario = scenario
        self.previous = previous
        self.previous_clients = previous_clients
        self.start = start
        self._entries: dict[tuple[int, int], list[_Entry]] = {}
        self._tables: dict[tuple[str, tuple[str, ...]], tuple[Any, ...]] = {}
        self._finals: dict[tuple, np.ndarray] = {}
        # Client tuples as small ints, so a key does not hash every client id of every round.
        self._by_object: dict[int, tuple[Any, int]] = {}
        self._by_value: dict[tuple[str, ...], int] = {}

    def final_losses(self, rounds: Sequence[RoundDecision], n: int, seed: int) -> np.ndarray:
        """Final losses of ``n`` trajectories of ``rounds`` with ``default_rng(seed)``.

        The returned array is shared with the cache: read it, do not modify it.
        """
        keys = [(r.model, r.clients) for r in rounds]
        whole = (n, seed, tuple((m, self._clients_index(c)) for m, c in keys))
        done = self._finals.pop(whole, None)
        if done is not None:
            self._finals[whole] = done   # most recently used last
            return done
        final = self._simulate(rounds, keys, n, seed)
        self._finals[whole] = final
        if len(self._finals) > MAX_FINALS:
            self._finals.pop(next(iter(self._finals)))
        return final

    def _clients_index(self, clients: Sequence[str]) -> int:
        """A small int per distinct client tuple (found by object identity first, hashed once)."""
        hit = self._by_object.get(id(clients))
        if hit is not None and hit[0] is clients:
            return hit[1]
        index = self._by_value.setdefault(tuple(clients), len(self._by_value))
        self._by_object[id(clients)] = (clients, index)   # the reference keeps the id unique
        return index

    def _simulate(self, rounds: Sequence[RoundDecision], keys: list[tuple[str, Any]], n: int,
                  seed: int) -> np.ndarray:
        """Final losses of ``rounds``, resumed from the longest stored prefix state."""
        entries = self._entries.setdefault((n, seed), [])
        base, at = None, -1
        for entry in entries:
            c = _common_prefix(keys, entry.keys)
            if c == len(keys) == len(entry.keys) and entry.final is not None:
                entries.remove(entry)
                entries.append(entry)
                return entry.final
            usable = max((i for i in entry.states if i <= c), default=-1)
            if usable > at:
                base, at = entry, usable
        new = _Entry(keys)
        if base is None:
            rng = np.random.default_rng(seed)
            losses: np.ndarray | float = self.start(n, rng)
            at = 0
            new.states[0] = (losses, rng.bit_generator.state)
        else:
            losses, state = base.states[at]
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = state
            new.states.update({i: s for i, s in base.states.items() if i <= at})
        stride = max(1, math.ceil(len(keys) / MAX_STATES))
        previous = rounds[at - 1].model if at > 0 else self.previous
        trained_on = rounds[at - 1].clients if at > 0 else self.previous_clients
        final = None
        for k, final in enumerate(iter_round_losses(self.scenario, rounds[at:], n, rng,
                                                    start_loss=losses, previous_model=previous,
                                                    tables=self._tables, previous_clients=trained_on),
                                  start=at + 1):
            if k == len(keys):  # the last yield: the array is not updated any more
                new.states[k] = (final, rng.bit_generator.state)
            elif k % stride == 0:
                new.states[k] = (final.copy(), rng.bit_generator.state)
        if final is None:  # no round to run: the stored start losses
            final = np.array(np.broadcast_to(np.asarray(losses, dtype=float), (n,)))
        # Version 2's final map (identity, without draws, in version 1), after the stored states.
        final = judged_losses(self.scenario, rounds[-1] if rounds else None, final, rng)
        final.flags.writeable = False
        new.final = final
        entries.append(new)
        if len(entries) > MAX_SEQUENCES:
            entries.pop(0)
        return final
