"""Re-plan policy of the server's online loss tracking (pure, no Flower).

After every round the server refines l_run / l_sw
(:class:`depl_fl.tracking.estimation.OnlineLossEstimator`), predicts the pi-quantile of
the final loss of the remaining plan, and asks :class:`ReplanPolicy` whether to
re-plan.  Reasons are checked in this order and the first that applies is
returned: planned clients failed (the plan cannot be executed as written),
behind target (predicted quantile above ``target_loss + margin``), ahead of
target (predicted quantile below ``target_loss - ahead_margin``: the remaining
plan is more than the target needs, and a re-plan can save energy), periodic.

Why re-plan when ahead too: the observed global loss fluctuates from round to
round around its trend.  A policy that reacts only to bad rounds adds rounds
after every upward fluctuation and never gives them back, so every method ends
well below the target at a needless energy cost (and a mean-based plan looks
dependable when it is not).  Reacting in both directions keeps the final loss
distribution where the plan put it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from depl_fl.errors import ScenarioError


@dataclass(frozen=True)
class ReplanPolicy:
    """When to re-plan during a run.

    Parameters
    ----------
    every_rounds : int or None
        Re-plan unconditionally every this many rounds (``None``: never periodically).
    margin : float
        Tolerance (>= 0, in loss units) on the behind-target test: re-plan when the
        predicted quantile exceeds ``target_loss + margin``.  A small margin avoids
        re-planning on estimation noise when the plan is tight.

    ahead_margin : float or None
        Re-plan when the predicted quantile is below ``target_loss - ahead_margin``
        (``None``: never for being ahead).  Not on the last round.
    """

    every_rounds: int | None = None
    margin: float = 0.0
    ahead_margin: float | None = None

    def __post_init__(self) -> None:
        if self.every_rounds is not None and (
                isinstance(self.every_rounds, bool) or not isinstance(self.every_rounds, int)
                or self.every_rounds < 1):
            raise ScenarioError(f"replan every_rounds: must be an integer >= 1 or None, got {self.every_rounds!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)) \
                or not math.isfinite(self.margin) or self.margin < 0:
            raise ScenarioError(f"replan margin: must be a finite number >= 0, got {self.margin!r}")
        if self.ahead_margin is not None and (
                isinstance(self.ahead_margin, bool) or not isinstance(self.ahead_margin, (int, float))
                or not math.isfinite(self.ahead_margin) or self.ahead_margin < 0):
            raise ScenarioError(f"replan ahead_margin: must be a finite number >= 0 or None, "
                                f"got {self.ahead_margin!r}")

    def decide(self, round: int, predicted_quantile: float | None, target_loss: float,
               failed_planned_clients: Sequence[str] = (), remaining_rounds: int | None = None) -> str | None:
        """Return why to re-plan after ``round``, or ``None`` to keep the plan.

        Parameters
        ----------
        round : int
            The round just completed (1-based).
        predicted_quantile : float or None
            Predicted pi-quantile of the final loss under the remaining plan
            (``None`` or NaN: no prediction, the behind-target test is skipped).
        target_loss : float
            L*.
        failed_planned_clients : sequence of str
            Clients the plan used in this round (or needs next) that did not reply.
        remaining_rounds : int, optional
            Rounds left in the plan; with 0 left, only failures and the
            behind-target test apply (a periodic or ahead-of-target re-plan of
            nothing is pointless).

        Returns
        -------
        str or None
            A one-line reason, e.g. ``"behind target: predicted q=0.41 > 0.35"``.
        """
        if failed_planned_clients:
            return "planned clients failed: " + ", ".join(sorted(failed_planned_clients))
        if predicted_quantile is not None and not math.isnan(predicted_quantile) \
                and predicted_quantile > target_loss + self.margin:
            bound = f"{target_loss:.4g}" + (f" + margin {self.margin:.4g}" if self.margin else "")
            return f"behind target: predicted q={predicted_quantile:.4g} > {bound}"
        if self.ahead_margin is not None and remaining_rounds != 0 and predicted_quantile is not None \
                and not math.isnan(predicted_quantile) \
                and predicted_quantile < target_loss - self.ahead_margin:
            return (f"ahead of target: predicted q={predicted_quantile:.4g} < "
                    f"{target_loss:.4g} - margin {self.ahead_margin:.4g}")
        if self.every_rounds is not None and round > 0 and round % self.every_rounds == 0 \
                and remaining_rounds != 0:
            return f"periodic every {self.every_rounds} rounds"
        return None


@dataclass(frozen=True)
class ReplanRecord:
    """One re-planning event, as stored in ``results.json``."""

    round: int
    reason: str
    old_remaining_rounds: int
    new_remaining_rounds: int
    quantile_before: float | None
    quantile_after: float | None
    feasible: bool = True
    planner_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (NaN quantiles become ``None``)."""
        doc = asdict(self)
        for key in ("quantile_before", "quantile_after"):
            value = doc[key]
            if value is not None and not math.isfinite(value):
                doc[key] = None
        return doc
