"""Online loss tracking of the server: estimator and re-plan policy (pure, no Flower).

After every round the server refines l_run / l_sw
(:class:`OnlineLossEstimator`), predicts the pi-quantile of
the final loss of the remaining plan, and asks :class:`ReplanPolicy` whether to
re-plan.  Reasons are checked in this order and the first that applies is
returned: planned clients failed (the plan cannot be executed as written),
behind target (predicted quantile above ``target_loss + margin``), ahead of
target (predicted quantile below ``target_loss - ahead_margin``: the remaining
plan is more than the target needs, and a re-plan can save energy), periodic.

With ``keep_dependable_plan`` a behind-target re-plan is deferred while the
remaining plan still passes the planner's own acceptance test from the
tracked state (:func:`depl_fl.planner.plan_holds`): the Gaussian quantile
that the behind test reads is more pessimistic than the Monte Carlo judged
probability the planner accepts plans on (a Student-t oscillation and the
judged error), so a fresh plan is predicted "behind" from its first round
and, without the check, the run re-plans every round to a plan of the same
length.

Why re-plan when ahead too: the observed global loss fluctuates from round to
round around its trend.  A policy that reacts only to bad rounds adds rounds
after every upward fluctuation and never gives them back, so every method ends
well below the target at a needless energy cost (and a mean-based plan looks
dependable when it is not).  Reacting in both directions keeps the final loss
distribution where the plan put it.

:class:`OnlineLossEstimator` (used by the server after every round)
    Starts from a prior :class:`~depl_fl.contract.scenario.LossModel` and keeps its levels.
    Per model, the level means get a Gaussian posterior from a Bayesian
    linear regression on the hat basis (prior mean = prior profile, prior
    precision ``prior_strength / sigma_j**2``, i.e. worth ``prior_strength``
    observations per level); each level's variance gets an inverse-gamma
    posterior fed by the basis-weighted squared residuals.  The reported std of a
    level is the posterior predictive one,
    ``sqrt(E[sigma_j**2] + horizon * Var(mu_j))``: ``E[sigma**2] = beta/(alpha-1)``
    is the Student-t variance and ``Var(mu_j)`` the remaining uncertainty about the
    mean, so few observations give a wider profile.  Switch jumps get a conjugate
    Normal-inverse-gamma posterior per pair, on the jump estimates ``Y_i`` of
    :mod:`depl_fl.tracking.estimation`.
    With a calibrated prior the run posterior is computed on the per-round
    scale of the residuals and multiplied back by ``spread_factor``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from depl_fl.contract.scenario import LossModel, RunProfile, SwitchProfile
from depl_fl.errors import ScenarioError
from depl_fl.tracking.estimation import (
    DEFAULT_STD_FLOOR,
    LossObservation,
    hat_basis,
    run_arrays,
    switch_estimates,
)

#: Opening words of the behind-target reason.
BEHIND = "behind target"


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
        re-planning on estimation noise when the plan is tight. It does not apply
        once the plan has no round left: the run would end with a predicted
        quantile above the target, a run that misses it, so any excess re-plans.

    ahead_margin : float or None
        Re-plan when the predicted quantile is below ``target_loss - ahead_margin``
        (``None``: never for being ahead).  Not on the last round.
    keep_dependable_plan : bool
        Defer a behind-target re-plan while the remaining plan passes the
        planner's acceptance test from the tracked state (see the module
        docstring); failures, drift, ahead and periodic re-plans are never deferred.
    """

    every_rounds: int | None = None
    margin: float = 0.0
    ahead_margin: float | None = None
    keep_dependable_plan: bool = False

    def __post_init__(self) -> None:
        if self.every_rounds is not None and (
                isinstance(self.every_rounds, bool)
                or not isinstance(self.every_rounds, int) or self.every_rounds < 1):
            raise ScenarioError("replan every_rounds: must be an integer >= 1 or None, "
                                f"got {self.every_rounds!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)) \
                or not math.isfinite(self.margin) or self.margin < 0:
            raise ScenarioError(f"replan margin: must be a finite number >= 0, got {self.margin!r}")
        if self.ahead_margin is not None and (
                isinstance(self.ahead_margin, bool) or not isinstance(self.ahead_margin, (int, float))
                or not math.isfinite(self.ahead_margin) or self.ahead_margin < 0):
            raise ScenarioError(f"replan ahead_margin: must be a finite number >= 0 or None, "
                                f"got {self.ahead_margin!r}")
        if not isinstance(self.keep_dependable_plan, bool):
            raise ScenarioError(f"replan keep_dependable_plan: must be true or false, "
                                f"got {self.keep_dependable_plan!r}")

    @staticmethod
    def deferrable(reason: str | None) -> bool:
        """Whether ``reason`` (from :meth:`decide`) is the behind-target test, the one that may wait."""
        return reason is not None and reason.startswith(BEHIND)

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
        margin = self.margin if remaining_rounds != 0 else 0.0
        if predicted_quantile is not None and not math.isnan(predicted_quantile) \
                and predicted_quantile > target_loss + margin:
            bound = f"{target_loss:.4g}" + (f" + margin {margin:.4g}" if margin else "")
            return f"{BEHIND}: predicted q={predicted_quantile:.4g} > {bound}"
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


# ---------------------------------------------------------------------------
# Online estimator
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _RunPosterior:
    mean: np.ndarray          # posterior mean of the level means
    mean_var: np.ndarray      # posterior variance of the level means
    noise_var: np.ndarray     # E[sigma_j**2] (Student-t predictive variance)
    support: np.ndarray       # sum of basis weights per level (effective count)


@dataclass(frozen=True)
class _SwitchPosterior:
    mean: float
    mean_var: float
    noise_var: float
    count: int


def _factor(profile: RunProfile) -> np.ndarray:
    """The profile's spread factors (ones when it is not calibrated)."""
    if profile.spread_factor is None:
        return np.ones(len(profile.levels))
    return np.asarray(profile.spread_factor, dtype=float)


class OnlineLossEstimator:
    """Bayesian online refinement of l_run / l_sw from observed rounds.

    Parameters
    ----------
    prior_loss_model : LossModel
        The profile the plan was made with (levels are kept).
    prior_strength : float
        How many observations the prior is worth, per level and per switch pair.
    horizon_rounds : float
        Multiplier of the mean's posterior variance in the reported std.  Errors
        of the mean add up coherently over rounds; ``horizon_rounds = H`` makes the
        independent per-round draws of the contract carry the right variance
        over ``H`` rounds.  1 gives the plain posterior predictive.
    std_floor : float
        Smallest reported standard deviation.
    """

    def __init__(self, prior_loss_model: LossModel, prior_strength: float = 5.0,
                 horizon_rounds: float = 1.0, std_floor: float = DEFAULT_STD_FLOOR) -> None:
        if not (prior_strength > 0.0 and math.isfinite(prior_strength)):
            raise ScenarioError("estimator: prior_strength must be a finite number > 0, "
                                f"got {prior_strength!r}")
        if not (horizon_rounds >= 0.0 and math.isfinite(horizon_rounds)):
            raise ScenarioError("estimator: horizon_rounds must be a finite number >= 0, "
                                f"got {horizon_rounds!r}")
        self.prior = prior_loss_model
        self.prior_strength = float(prior_strength)
        self.horizon_rounds = float(horizon_rounds)
        self.std_floor = float(std_floor)
        self._run_obs: dict[str, list[LossObservation]] = {m: [] for m in prior_loss_model.run}
        self._switch_obs: dict[tuple[str, str], list[LossObservation]] = {}
        self._cache: tuple[dict[str, _RunPosterior], dict[tuple[str, str], _SwitchPosterior]] | None = None

    @property
    def num_observations(self) -> int:
        """Number of rounds observed so far."""
        return sum(map(len, self._run_obs.values())) + sum(map(len, self._switch_obs.values()))

    def observe(self, obs: LossObservation) -> None:
        """Add one observed round (run rounds update l_run, switch rounds l_sw)."""
        for name, ident in (("model", obs.model), ("previous_model", obs.previous_model)):
            if ident is not None and ident not in self._run_obs:
                raise ScenarioError(f"observation round {obs.round}: unknown {name} {ident!r}")
        if obs.is_switch:
            self._switch_obs.setdefault((obs.previous_model, obs.model), []).append(obs)  # type: ignore[arg-type]
        else:
            self._run_obs[obs.model].append(obs)
        self._cache = None

    # -- posteriors ---------------------------------------------------------
    def _run_posterior(self, model: str) -> _RunPosterior:
        prior = self.prior.run[model]
        k0 = self.prior_strength
        mu0 = np.asarray(prior.mean, dtype=float)
        # A calibrated prior (spread_factor) holds multi-round spread; the
        # posterior is computed on the per-round scale the residuals have and
        # calibrated back at the end.
        factor = _factor(prior)
        sd0 = np.maximum(np.asarray(prior.std, dtype=float), self.std_floor) / factor
        obs = self._run_obs[model]
        if not obs:
            return _RunPosterior(mu0, sd0**2 / k0, (sd0 * factor) ** 2, np.zeros_like(mu0))
        alpha0 = k0 / 2.0 + 1.0
        beta0 = sd0**2 * (alpha0 - 1.0)
        loss, y, s = run_arrays(obs, self.prior.data_exponent_mean, self.prior.data_exponent_std)
        phi = hat_basis(loss, prior.levels)
        support = phi.sum(axis=0)
        noise_var = sd0**2
        for _ in range(3):
            prior_prec = k0 / noise_var
            weights = 1.0 / ((phi @ np.sqrt(noise_var)) ** 2 * s**2)
            precision = np.diag(prior_prec) + phi.T @ (phi * weights[:, None])
            cov = np.linalg.inv(precision)
            mean = cov @ (prior_prec * mu0 + phi.T @ (weights * y))
            res2 = ((y - phi @ mean) / s) ** 2
            alpha = alpha0 + 0.5 * support
            beta = beta0 + 0.5 * (phi.T @ res2)
            noise_var = np.maximum(beta / (alpha - 1.0), self.std_floor**2)
        noise_var = np.maximum(noise_var * factor**2, self.std_floor**2)
        return _RunPosterior(mean, np.diag(cov).copy(), noise_var, support)

    def _switch_posterior(self, pair: tuple[str, str], run: Mapping[str, _RunPosterior]) -> _SwitchPosterior:
        source, target = pair
        k0 = self.prior_strength
        prior = self.prior.switch.get(pair)
        if prior is None:
            # Not in the prior (a switch the plan never allowed): weak, centred prior.
            k0 = 1.0
            mean0 = 0.0
            sd0 = max(float(np.max(self.prior.run[target].std)), self.std_floor)
        else:
            mean0, sd0 = prior.mean, max(prior.std, self.std_floor)
        obs = self._switch_obs.get(pair, [])
        if not obs:
            return _SwitchPosterior(mean0, sd0**2 / k0, sd0**2, 0)
        calibrated = self._profile_from(self.prior.run[target], run[target], include_mean_var=False)
        # A switch round carries one round of run noise: the per-round spread.
        profile = RunProfile(calibrated.levels, calibrated.mean,
                             tuple(np.asarray(calibrated.std) / _factor(calibrated)))
        jumps, run_var, _ = switch_estimates(obs, profile, self.prior.data_exponent_mean,
                                              self.prior.data_exponent_std)
        n = len(jumps)
        vbar = float(np.mean(run_var))
        tau0 = sd0**2 + vbar
        alpha0 = k0 / 2.0 + 1.0
        beta0 = tau0 * (alpha0 - 1.0)
        ybar = float(np.mean(jumps))
        kn = k0 + n
        mean = (k0 * mean0 + n * ybar) / kn
        beta = beta0 + 0.5 * (float(np.sum((jumps - ybar) ** 2)) + k0 * n / kn * (ybar - mean0) ** 2)
        total_var = beta / (alpha0 + n / 2.0 - 1.0)
        noise_var = max(total_var - vbar, self.std_floor**2)
        return _SwitchPosterior(mean, total_var / kn, noise_var, n)

    def _posteriors(self) -> tuple[dict[str, _RunPosterior], dict[tuple[str, str], _SwitchPosterior]]:
        if self._cache is None:
            run = {m: self._run_posterior(m) for m in self.prior.run}
            pairs = list(self.prior.switch) + [p for p in self._switch_obs if p not in self.prior.switch]
            switch = {p: self._switch_posterior(p, run) for p in pairs}
            self._cache = (run, switch)
        return self._cache

    def _profile_from(self, prior: RunProfile, post: _RunPosterior,
                      include_mean_var: bool = True) -> RunProfile:
        var = post.noise_var + (self.horizon_rounds * post.mean_var if include_mean_var else 0.0)
        std = np.maximum(np.sqrt(var), self.std_floor)
        eval_std = None
        if prior.eval_std is not None:
            # The prior's evaluation noise, never more than the refined std allows (2 e**2 <= s**2).
            eval_std = tuple(float(v) for v in np.minimum(prior.eval_std, std / math.sqrt(2.0)))
        return RunProfile(tuple(prior.levels), tuple(float(v) for v in post.mean),
                          tuple(float(v) for v in std), prior.spread_factor, eval_std)

    # -- outputs ------------------------------------------------------------
    def loss_model(self) -> LossModel:
        """The refined loss profile (posterior means, predictive stds), for re-planning."""
        run, switch = self._posteriors()
        profiles = {m: self._profile_from(self.prior.run[m], run[m]) for m in self.prior.run}
        switches = {}
        for (source, target), post in switch.items():
            std = max(math.sqrt(post.noise_var + self.horizon_rounds * post.mean_var), self.std_floor)
            switches[(source, target)] = SwitchProfile(source, target, float(post.mean), std)
        # The version-2 fields (label coverage) are the prior's: no round observes them.
        return replace(self.prior, run=profiles, switch=switches)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly state for logging: per model/level and per switch pair."""
        run, switch = self._posteriors()
        model = self.loss_model()
        return {
            "observations": self.num_observations,
            "run": {m: {
                "levels": list(model.run[m].levels),
                "mean": list(model.run[m].mean),
                "std": list(model.run[m].std),
                "mean_stderr": [float(v) for v in np.sqrt(run[m].mean_var)],
                "support": [float(v) for v in run[m].support],
            } for m in model.run},
            "switch": [{
                "from": src, "to": dst, "mean": model.switch[(src, dst)].mean,
                "std": model.switch[(src, dst)].std,
                "mean_stderr": float(math.sqrt(post.mean_var)), "count": post.count,
            } for (src, dst), post in switch.items()],
        }
