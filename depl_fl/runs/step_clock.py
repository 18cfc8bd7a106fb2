"""Wall time of the steps of one round (where a round's seconds go).

A round record carries ``steps_s``: the seconds from the round's start to its
first mark, then between consecutive marks, under the marks' names (a name
marked twice adds up). A training round's steps are ``configure``,
``exchange`` (send the messages until the last reply is in), ``aggregate``,
``evaluate``, ``record``; an exploration round's ``exchange``,
``evaluate_groups``, ``evaluate``, ``record``. What follows a round outside
its ``wall_s`` (``write``: its checkpoint and results.json; ``admit``: asking
late nodes for their properties) is added to its ``steps_s`` once done, so the
files written for a round hold it from the next write on.
``benchmarks/deploy_round_bench.py`` reports their medians.
"""

from __future__ import annotations

import time
from typing import Callable


class StepClock:
    """Marks the end of each step of a round and keeps their durations.

    Parameters
    ----------
    clock : callable
        Monotonic time in seconds (default :func:`time.perf_counter`).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = self._last = clock()
        self._steps: dict[str, float] = {}

    def mark(self, step: str) -> float:
        """End the step ``step`` now; returns its duration in seconds."""
        now = self._clock()
        took = now - self._last
        self._steps[step] = self._steps.get(step, 0.0) + took
        self._last = now
        return took

    @property
    def elapsed(self) -> float:
        """Seconds since the clock started."""
        return self._clock() - self._start

    def steps(self) -> dict[str, float]:
        """Seconds per step in marking order, rounded to the millisecond."""
        return {k: round(v, 3) for k, v in self._steps.items()}
