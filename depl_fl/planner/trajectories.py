"""Monte Carlo of candidate plans that resumes from shared round prefixes.

The planner checks many round sequences with the same seed and trajectory
count, and they often share a prefix (``trim`` removes one round of a plan;
the final check repeats the last accepted one). With a fixed seed the random
stream is consumed round by round, so the losses *and* the generator state
after a prefix are the same for every sequence that starts with it. This
cache keeps both at a few rounds of recently simulated sequences and restarts
from the longest stored prefix, which gives bit-for-bit the losses of a fresh
:func:`depl_fl.contract.semantics.simulate_final_losses` run.
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
    start : callable
        ``start(n, rng) -> initial losses`` (a scalar or an array of shape
        ``(n,)``), drawn from a fresh ``default_rng(seed)`` before the rounds.
    """

    def __init__(self, scenario: Scenario, previous: str | None, start: StartFn) -> None:
        self.scenario = scenario
        self.previous = previous
        self.start = start
        self._entries: dict[tuple[int, int], list[_Entry]] = {}
        self._tables: dict[tuple[str, tuple[str, ...]], tuple[Any, ...]] = {}

    def final_losses(self, rounds: Sequence[RoundDecision], n: int, seed: int) -> np.ndarray:
        """Final losses of ``n`` trajectories of ``rounds`` with ``default_rng(seed)``.

        The returned array is shared with the cache: read it, do not modify it.
        """
        keys = [(r.model, r.clients) for r in rounds]
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
        final = None
        for k, final in enumerate(iter_round_losses(self.scenario, rounds[at:], n, rng,
                                                    start_loss=losses, previous_model=previous,
                                                    tables=self._tables),
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
