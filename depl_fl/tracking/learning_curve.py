"""The plan regime of the loss profile: a learning curve from the exploration, with honest noise.

Why. A static plan starts where the federated exploration stops (about
``2 L*``) and runs below it, where no exploration round is observed. The
exploration's fitted levels describe the early, fast phase of training
(every round a different random mix of client groups); carried down to the
target (the anchor at loss 0, proportional decrease) they predict plans
that decay to 0 within a few rounds, while real plans slow down and level
off above 0. The noise needs the same care: the standard error of the judged
evaluation is a term of its own (not part of ``eval_std``), and a change of
client set is a transient made up in the next round, not a jump carried for
the rest of the plan. A trajectory bank (fixed plans run for 40 rounds after
the exploration of 80 federations, ``benchmarks/plan_regime/``) measures how
the predicted quantiles cover the actual final test losses (docs/RESULTS.md).

The model. Below the exploration's last loss ``L_e`` the run profile of each
variant is the learning curve ``mu(L) = c (L - f)**p`` (``f`` the floor the
curve levels off at): a power law in training time, ``L_k = f + A (k + k0)**-alpha``
with ``alpha = 1 / (p - 1)``, whose ``A`` and ``k0`` are fitted through the
variant's own exploration trajectory (its fresh loss and its loss after the
``k_e`` exploration rounds, :func:`rate_coefficient`). A set's rate scales
with ``r_eff**a`` and its oscillation with ``r_eff**-b``. The loss oscillates
around that trend from round to round without accumulating (period-2
oscillation of FedAvg on skewed clients, larger with more local SGD steps):
``eval_std = o sqrt(L) (steps / reference_steps)**gamma`` with ``std =
sqrt(2) eval_std`` (the walk adds no spread of its own); ``steps`` may be
held inside the range of local steps the constants were fitted on
(``steps_min``, ``steps_max``; opt-in, unbounded by default), so that the
power law is not carried beyond the bank's settings. The judged test loss
differs from the validation loss the walk tracks by the sampling error of
two finite splits: ``judged_error = jf * c`` with ``c`` the measured
``sem**2 / L`` (contract field ``loss.judged_error``).

The structural constants ``p, f, a, b, o, gamma, jf`` (:class:`PlanRegime`) are
not fitted per job: they are fitted once, by the pinball loss of the
predicted 0.8/0.85/0.9/0.95 quantiles, on the trajectory bank of four
development settings of the bundled digits task (``benchmarks/plan_regime/fit.py``;
none of the settings docs/RESULTS.md reports). They belong to the task (dataset
and architecture): another task needs its own bank and fit, and until then
its static plans carry the digits constants (with tracking, the run's trend
filter, :mod:`depl_fl.tracking.trend`, follows what the run really does); with
``explored_oscillation`` set (opt-in), a job whose own exploration oscillates
more than the bank's did widens ``o`` by the excess
(:mod:`depl_fl.tracking.oscillation`).
One job's exploration cannot fit ``f`` and ``p`` itself: it ends near
``2 L*``, above the range they shape, and at the measured oscillation their
least-squares fit spans its whole grid
(``benchmarks/plan_regime/identifiability.py``). docs/MODELS.md says what
the constants change on a residual network with BatchNorm (``model=digits_resnet``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from depl_fl.errors import ScenarioError

#: Levels of the learning curve between the floor and the top of the plan regime.
CURVE_LEVELS = 10
#: The plan regime reaches this far above the exploration's last loss (a plan's loss can rise).
REGIME_TOP = 1.25
#: Smallest rate coefficient (an exploration that made no progress plans with almost none).
MIN_RATE = 1e-6
#: Where a plan's learning curve starts (:attr:`PlanRegime.anchor`).
ANCHORS = ("last", "trend")
#: What a plan reads of the measured switch jumps (:attr:`PlanRegime.switch_cycles`).
SWITCH_CYCLES = ("measured", "no_gain")
#: Which explorations' rate a plan reads at ``r = 1`` (:attr:`PlanRegime.rate_at_full`).
RATE_AT_FULL = ("always", "cheapest")
#: :attr:`PlanRegime.rate_at_full` where none is given (a configuration recorded before the option:
#: such jobs read the rate at ``r = 1`` only after an exploration on the cheapest clusters);
#: ``conf/profile/default.yaml`` sets ``always``.
RATE_AT_FULL_BEFORE = "cheapest"


@dataclass(frozen=True)
class PlanRegime:
    """Structural constants of the plan-regime loss model (see the module docstring).

    Attributes
    ----------
    power : float
        ``p > 1`` of ``mu(L) = c (L - f)**p``.
    floor : float
        ``f``: the loss the learning curve levels off at.
    rate_exponent : float
        ``a``: a set's rate scales with ``r_eff**a``.
    noise_exponent : float
        ``b``: a set's oscillation scales with ``r_eff**-b``.
    oscillation : float
        ``o`` of ``eval_std = o sqrt(L)`` at ``reference_steps`` local steps.
    steps_exponent : float
        ``gamma``: the oscillation grows like ``(local steps)**gamma``.
    reference_steps : float
        Local SGD steps per round at which ``oscillation`` holds.
    judged_error_factor : float
        ``jf`` of ``judged_error = jf * sem**2 / L``.
    oscillation_dof : float or None
        The oscillation of the last round is Student-t with these degrees of
        freedom (> 2; heavier upper tail than a normal, as measured) or normal (None).
    explored_oscillation : float or None
        The reference ``m_ref`` (at ``reference_steps``) the oscillation a job's
        own exploration measures is compared with: the excess widens the plan's
        oscillation (:mod:`depl_fl.tracking.oscillation`); None: ``oscillation``
        as it is.
    anchor : str
        Where a plan's learning curve starts: ``"last"``, the exploration's last
        measured loss and the rate through it; ``"trend"``, the curve fitted
        through the exploration's trajectory with the job's own oscillation
        (:mod:`depl_fl.tracking.exploration_trend`), its end level with the
        fit's uncertainty.
    rate_at_full : str
        Which explorations' learning-curve rate a plan reads at ``r = 1`` (over
        the mean ``r_eff**a`` of their rounds, :func:`ratio_factor`):
        ``"always"``, every exploration's (rounds on every client measure it
        there: factor 1); ``"cheapest"``, only an exploration on the cheapest
        clusters', a ``max_clients`` exploration's rate then counts as measured
        at ``r = 1`` (:func:`depl_fl.orchestration.profile_fit.reads_rate_at_full`).
        Not given: :data:`RATE_AT_FULL_BEFORE`, as before the option.
    steps_min, steps_max : float or None
        The range of local steps (of a client of average size) the constants
        were fitted on: the steps factor holds the steps inside it, constant
        beyond (the growth with the steps is measured only there). None: no
        bound on that side (a section recorded before the option: the power
        law at any steps, as then).
    switch_cycles : str
        The measured switch jumps a plan reads: ``"measured"``, as measured;
        ``"no_gain"``, every mean raised by the least common amount that leaves
        no cycle of switches (a switch and the switch back) a net gain
        (:mod:`depl_fl.tracking.switch_cycles`). Not given: ``"measured"``.
    """

    power: float
    floor: float
    rate_exponent: float
    noise_exponent: float
    oscillation: float
    steps_exponent: float
    reference_steps: float
    judged_error_factor: float
    oscillation_dof: float | None = None
    explored_oscillation: float | None = None
    anchor: str = "last"
    rate_at_full: str = RATE_AT_FULL_BEFORE
    steps_min: float | None = None
    steps_max: float | None = None
    switch_cycles: str = "measured"

    def __post_init__(self) -> None:
        if not (self.power > 1.0 and math.isfinite(self.power)):
            raise ScenarioError(f"profile.plan_regime.power: must be a number > 1, got {self.power!r}")
        for name in ("floor", "rate_exponent", "noise_exponent", "oscillation", "steps_exponent",
                     "judged_error_factor"):
            value = getattr(self, name)
            if not (value >= 0.0 and math.isfinite(value)):
                raise ScenarioError(f"profile.plan_regime.{name}: must be a number >= 0, got {value!r}")
        if not (self.reference_steps > 0.0 and math.isfinite(self.reference_steps)):
            raise ScenarioError("profile.plan_regime.reference_steps: must be a number > 0, "
                                f"got {self.reference_steps!r}")
        dof = self.oscillation_dof
        if dof is not None and not (dof > 2.0 and math.isfinite(dof)):
            raise ScenarioError("profile.plan_regime.oscillation_dof: must be null or a number > 2, "
                                f"got {dof!r}")
        ref = self.explored_oscillation
        if ref is not None and not (ref >= 0.0 and math.isfinite(ref)):
            raise ScenarioError("profile.plan_regime.explored_oscillation: must be null or a number >= 0, "
                                f"got {ref!r}")
        _check_steps_range(self.steps_min, self.steps_max)
        if self.anchor not in ANCHORS:
            raise ScenarioError(f"profile.plan_regime.anchor: must be one of {', '.join(ANCHORS)}, "
                                f"got {self.anchor!r}")
        if self.switch_cycles not in SWITCH_CYCLES:
            raise ScenarioError("profile.plan_regime.switch_cycles: must be one of "
                                f"{', '.join(SWITCH_CYCLES)}, got {self.switch_cycles!r}")
        if self.rate_at_full not in RATE_AT_FULL:
            raise ScenarioError("profile.plan_regime.rate_at_full: must be one of "
                                f"{', '.join(RATE_AT_FULL)}, got {self.rate_at_full!r}")

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> PlanRegime:
        """The constants of a ``profile.plan_regime`` config section (extra keys ignored; without
        ``rate_at_full``, a section recorded before it: :data:`RATE_AT_FULL_BEFORE`; without
        ``steps_min`` / ``steps_max``: no bound on the steps; without ``switch_cycles``: ``measured``)."""
        names = ("power", "floor", "rate_exponent", "noise_exponent", "oscillation", "steps_exponent",
                 "reference_steps", "judged_error_factor")
        missing = [n for n in names if raw.get(n) is None]
        if missing:
            raise ScenarioError(f"profile.plan_regime: missing {', '.join(missing)}")
        try:
            values: dict[str, float | None] = {n: float(raw[n]) for n in names}
            for name in ("oscillation_dof", "explored_oscillation", "steps_min", "steps_max"):
                values[name] = None if raw.get(name) is None else float(raw[name])
        except (TypeError, ValueError):
            raise ScenarioError("profile.plan_regime: every constant must be a number") from None
        return cls(**values, anchor=str(raw.get("anchor") or "last"),
                   rate_at_full=str(raw.get("rate_at_full") or RATE_AT_FULL_BEFORE),
                   switch_cycles=str(raw.get("switch_cycles") or "measured"))

    def oscillation_at(self, local_steps: float) -> float:
        """``o (steps / reference_steps)**gamma``: the oscillation coefficient for ``local_steps``."""
        return self.oscillation * self.steps_factor(local_steps)

    def fitted_steps(self, local_steps: float) -> float:
        """``local_steps`` held inside ``[steps_min, steps_max]`` (an unbounded side left as it is)."""
        steps = float(local_steps)
        if self.steps_max is not None:
            steps = min(steps, self.steps_max)
        if self.steps_min is not None:
            steps = max(steps, self.steps_min)
        return steps

    def steps_factor(self, local_steps: float) -> float:
        """``(steps / reference_steps)**gamma``: how the oscillation at ``local_steps`` compares with the
        reference steps', with ``steps`` held inside the fitted range (:meth:`fitted_steps`)."""
        return (max(self.fitted_steps(local_steps), 1e-9) / self.reference_steps) ** self.steps_exponent


def _check_steps_range(low: float | None, high: float | None) -> None:
    """Refuse a steps range that is not ``0 < steps_min <= steps_max`` (either side may be None)."""
    for name, bound in (("steps_min", low), ("steps_max", high)):
        if bound is not None and not (bound > 0.0 and math.isfinite(bound)):
            raise ScenarioError(f"profile.plan_regime.{name}: must be null or a number > 0, got {bound!r}")
    if low is not None and high is not None and low > high:
        raise ScenarioError("profile.plan_regime.steps_min: must be at most steps_max, "
                            f"got {low!r} > {high!r}")


def effective_floor(floor: float, last_loss: float) -> float:
    """The floor used for a job: ``floor``, but at most half the loss already reached.

    An exploration that got below the structural floor shows that this task
    levels off lower; the curve then keeps half of the remaining loss as room.
    """
    return min(float(floor), 0.5 * max(float(last_loss), 0.0))


def rate_coefficient(first_loss: float, last_loss: float, rounds: int, power: float, floor: float) -> float:
    """``c`` of ``mu(L) = c (L - f)**p`` from a trajectory's first and last loss.

    The power-law learning curve ``L_k = f + A (k + k0)**-alpha`` with
    ``alpha = 1 / (p - 1)`` through ``(0, first_loss)`` and ``(rounds, last_loss)``
    has, at ``L_e = last_loss``, the effective time ``T = k_e + k0 =
    k_e / (1 - ((L_e - f) / (L_0 - f))**(1/alpha))`` and decreases by
    ``mu(L) = alpha (L - f)**p / ((L_e - f)**(p - 1) T)`` per round.

    Parameters
    ----------
    first_loss, last_loss : float
        The variant's loss before the first and after the last exploration round.
    rounds : int
        Exploration rounds between them (>= 1).
    power, floor : float
        ``p > 1`` and ``f`` (``f < last_loss``).

    Returns
    -------
    float
        ``c`` (at least :data:`MIN_RATE`; that when the trajectory did not descend).
    """
    if rounds < 1 or not (power > 1.0):
        raise ScenarioError(f"learning curve: need rounds >= 1 and power > 1, got {rounds!r}, {power!r}")
    top, end = first_loss - floor, last_loss - floor
    if not (end > 0.0 and top > end):
        return MIN_RATE
    alpha = 1.0 / (power - 1.0)
    progress = 1.0 - (end / top) ** (1.0 / alpha)
    effective_time = rounds / progress
    return max(alpha * end ** (1.0 - power) / effective_time, MIN_RATE)


def ratio_factor(ratios: Sequence[float], exponent: float) -> float:
    """The mean ``r_eff**exponent`` of exploration rounds (1 when every ``r_eff`` is 1 or none is given).

    An exploration on a subset of the clients measures the curve's rate at
    its own ``r_eff``; rounds on every client (``r_eff`` within ``1e-9`` of 1)
    measure it at ``r = 1`` exactly.
    """
    values = [float(r) for r in ratios if float(r) > 0.0]
    if not values or all(abs(r - 1.0) <= 1e-9 for r in values):
        return 1.0
    return float(np.mean([r ** float(exponent) for r in values]))


def curve_levels(last_loss: float, floor: float, count: int = CURVE_LEVELS) -> list[float]:
    """Loss levels of the plan regime: 0, the floor, then ``count`` levels up to ``REGIME_TOP * L_e``.

    Denser near the floor (geometric in ``L - f``), where the curve bends most.
    """
    top = REGIME_TOP * last_loss
    span = top - floor
    steps = [floor + span * (0.5 ** (count - 1 - j)) ** 0.5 for j in range(count)]
    levels = [0.0, floor, *steps] if floor > 0.0 else [0.0, *steps]
    return [float(v) for v in np.unique(np.round(levels, 12))]


def plan_regime_run(measured: Mapping[str, Sequence[float]], first_loss: float, last_loss: float,
                    rounds: int, regime: PlanRegime, oscillation: float,
                    ratio_factor: float = 1.0, rate: float | None = None,
                    floor: float | None = None, no_rise_above: bool = False) -> dict[str, list[float]]:
    """One variant's run profile: the learning curve below ``REGIME_TOP * L_e``, the measured levels above.

    Parameters
    ----------
    measured : mapping
        The exploration's fitted ``levels``, ``mean``, ``std`` (optionally
        ``eval_std``) of the variant.
    first_loss, last_loss : float
        The variant's exploration trajectory: fresh loss and loss at its end.
    rounds : int
        Exploration rounds.
    regime : PlanRegime
        Structural constants.
    oscillation : float
        ``o`` for this federation's local steps (:meth:`PlanRegime.oscillation_at`).
    ratio_factor : float, optional
        The mean ``r_eff**a`` of the exploration rounds the rate is measured on
        (:func:`ratio_factor`; 1 for rounds on every client): the curve's rate
        is divided by it, so that it holds at ``r = 1`` as the contract's
        ``r**a`` scaling reads it.
    rate : float, optional
        The curve's ``c`` as fitted elsewhere (the exploration's trend,
        :mod:`depl_fl.tracking.exploration_trend`; ``ratio_factor`` then
        unused); None: through ``first_loss`` and ``last_loss``.
    floor : float, optional
        The floor that fit used; None: :func:`effective_floor` at ``last_loss``.
    no_rise_above : bool, optional
        A measured level above the curve falls at least as fast as the curve's
        top. Those levels are measured on the raw losses: a swing up read there
        as a mean rise holds part of a trend start's trajectories above the
        curve for good, so that its probability stops growing with the plan's
        length. Off in the jobs (lifting every slow level also made static
        plans bolder than predicted); the plan-regime analyses in
        ``benchmarks/`` compare both.

    Returns
    -------
    dict
        ``levels``, ``mean``, ``std``, ``eval_std`` (contract version 2:
        ``2 eval_std**2 <= std**2`` holds at every level).
    """
    if floor is None:
        floor = effective_floor(regime.floor, last_loss)
    if rate is None:
        rate = rate_coefficient(first_loss, last_loss, rounds, regime.power, floor) / float(ratio_factor)
    levels = curve_levels(last_loss, floor)
    top = levels[-1]
    mean = [rate * max(v - floor, 0.0) ** regime.power for v in levels]
    eval_std = [oscillation * math.sqrt(v) for v in levels]
    std = [math.sqrt(2.0) * e for e in eval_std]
    m_levels = [float(v) for v in measured["levels"]]
    m_eval = list(measured.get("eval_std") or [0.0] * len(m_levels))
    least = mean[-1] if no_rise_above else -math.inf
    for lv, mu, sd, ev in zip(m_levels, measured["mean"], measured["std"], m_eval, strict=True):
        if lv > top * (1.0 + 1e-9):
            levels.append(lv)
            mean.append(max(float(mu), least))
            std.append(float(sd))
            eval_std.append(min(float(ev), float(sd) / math.sqrt(2.0)))
    return {"levels": levels, "mean": mean, "std": std, "eval_std": eval_std}
