"""Estimation of the loss-evolution parameters l_run and l_sw (docs/FORMATS.md).

The contract's loss semantics for a round with model ``m`` after model ``p``:

* switch (``p`` exists and differs from ``m``): ``L += Y``,
  ``Y ~ Normal(switch[p->m].mean, switch[p->m].std)``;
* run: ``L -= X``, ``X ~ Normal(mu_m(L) * r**a, sigma_m(L) * r**-b)`` with
  ``mu_m`` / ``sigma_m`` linear interpolations over loss levels (clamped).

The estimators here:

:func:`fit_loss_profile` (batch, used by ``depl-fl profile``)
    Run rounds (no switch) of model ``m`` give ``d = L_before - L_after = X``.
    Writing ``y = d / r**a`` and ``s = r**-(a+b)``, ``y = mu_m(L) + s * sigma_m(L) * Z``.
    Because the profile interpolates linearly, ``mu_m(L) = sum_j phi_j(L) mu_j`` with
    the piecewise-linear "hat" basis ``phi_j`` of the levels, so the level means are a
    weighted least-squares regression of ``y`` on ``phi(L)`` (weights ``1/(s sigma)^2``),
    unbiased even when the mean varies inside a bin.  The level standard
    deviations come from the same regression on ``|residual| / s * sqrt(pi/2)``
    (``E|Z| = sqrt(2/pi)``, which is linear in ``sigma_j``), corrected for the fitted
    degrees of freedom and floored at ``std_floor``.  Levels with less support than
    ``min_points_per_level`` (sum of basis weights) are dropped, i.e. pooled into
    their neighbours.

    A switch round gives ``d = X - Y``, so each one yields the estimate
    ``Y_i = mu_m(L_i + Ybar) * r_i**a - d_i`` (the observed decrease deficit
    relative to the new model's fitted run mean, evaluated at the mean post-jump
    loss; a short fixed-point iteration on ``Ybar``).  The jump's standard
    deviation is the spread of the ``Y_i`` minus the run noise they carry:
    ``var(Y) = var(Y_i) - mean(sigma_m(L_i + Ybar)**2 * r_i**-2b)``, floored.
    Pairs never observed are left out (the contract then forbids that switch).

:func:`fit_spread_factors` (optional, ``spread_horizon``)
    The contract adds independent per-round draws; observed losses revert
    towards their trend (a badly evaluating round is made up in the next), so
    the per-round ``sigma`` over-states the spread over many rounds. The
    variance ratio of the pilots' ``h``-round windows scales each level's
    ``sigma`` so that the random walk has the observed ``h``-round spread; the
    factors are kept in the profile as the extra field ``spread_factor``.

:class:`depl_fl.tracking.online.OnlineLossEstimator` (the server, after every round)
    Refines the fitted profile online; see its module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from depl_fl.contract.scenario import RunProfile
from depl_fl.errors import ScenarioError

#: Smallest standard deviation any fitted profile reports.
DEFAULT_STD_FLOOR = 1e-3
#: Fewest switch rounds of a pair from which its jump's spread is estimated (fewer: the run std).
SWITCH_MIN_POINTS = 4
_SQRT_PI_OVER_2 = math.sqrt(math.pi / 2.0)


@dataclass(frozen=True)
class LossObservation:
    """One observed training round.

    Attributes
    ----------
    round : int
        Server round (1-based).
    model : str
        Model id trained in this round.
    previous_model : str or None
        Model id of the previous round (``None`` in round 1).
    loss_before, loss_after : float
        Global loss before and after the round (before any switch jump).
    sample_fraction : float
        ``r`` = samples used in the round / ``reference_samples``.
    """

    round: int
    model: str
    previous_model: str | None
    loss_before: float
    loss_after: float
    sample_fraction: float = 1.0

    def __post_init__(self) -> None:
        for name in ("loss_before", "loss_after", "sample_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ScenarioError(f"observation round {self.round}: {name} must be a finite number, "
                                    f"got {value!r}")
        if self.sample_fraction <= 0.0:
            raise ScenarioError(f"observation round {self.round}: sample_fraction must be > 0, "
                                f"got {self.sample_fraction!r}")

    @property
    def is_switch(self) -> bool:
        """True when this round switched from another model."""
        return self.previous_model is not None and self.previous_model != self.model


def observations_from_trajectory(losses: Sequence[float], models: Sequence[str],
                                 sample_fractions: Sequence[float] | float = 1.0,
                                 previous_model: str | None = None,
                                 first_round: int = 1) -> list[LossObservation]:
    """Turn one loss trajectory into per-round observations.

    Parameters
    ----------
    losses : sequence of float
        ``L_0, L_1, ..., L_K`` (loss before round 1, then after each round).
    models : sequence of str
        The ``K`` model ids used in rounds ``1..K``.
    sample_fractions : float or sequence of float
        ``r`` per round (a scalar applies to every round).
    previous_model : str, optional
        Model used before the first listed round (``None`` for a fresh run).
    first_round : int
        Round number of the first listed round.

    Returns
    -------
    list of LossObservation
    """
    if len(losses) != len(models) + 1:
        raise ScenarioError(f"trajectory: expected {len(models) + 1} losses for {len(models)} rounds, "
                            f"got {len(losses)}")
    fractions = ([float(sample_fractions)] * len(models) if np.isscalar(sample_fractions)
                 else [float(v) for v in sample_fractions])  # type: ignore[union-attr]
    if len(fractions) != len(models):
        raise ScenarioError(f"trajectory: expected {len(models)} sample fractions, got {len(fractions)}")
    out = []
    prev = previous_model
    for k, model in enumerate(models):
        out.append(LossObservation(first_round + k, model, prev, float(losses[k]),
                                   float(losses[k + 1]), fractions[k]))
        prev = model
    return out


# ---------------------------------------------------------------------------
# Shared numerics
# ---------------------------------------------------------------------------
def hat_basis(loss: np.ndarray, levels: Sequence[float]) -> np.ndarray:
    """Piecewise-linear interpolation weights, shape ``(len(loss), len(levels))``.

    Row ``i`` holds the weights with which ``np.interp(loss[i], levels, values)``
    combines ``values``; loss values outside the levels are clamped, as in
    :class:`~depl_fl.contract.scenario.RunProfile`.
    """
    loss = np.asarray(loss, dtype=float)
    eye = np.eye(len(levels))
    return np.stack([np.interp(loss, levels, eye[j]) for j in range(len(levels))], axis=-1)


def _ridge_solve(gram: np.ndarray, rhs: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Solve ``gram x = rhs`` with a tiny ridge towards ``anchor`` (keeps it non-singular)."""
    lam = 1e-8 * max(float(np.mean(np.diag(gram))), 1e-300)
    return np.linalg.solve(gram + lam * np.eye(len(rhs)), rhs + lam * anchor)


def run_arrays(obs: Sequence[LossObservation], a: float, b: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loss before, normalised decrease ``y = d / r**a`` and noise scale ``s = r**-(a+b)``."""
    loss = np.array([o.loss_before for o in obs], dtype=float)
    dec = np.array([o.loss_before - o.loss_after for o in obs], dtype=float)
    r = np.array([o.sample_fraction for o in obs], dtype=float)
    return loss, dec / r**a, r ** (-(a + b))


def switch_estimates(obs: Sequence[LossObservation], profile: RunProfile, a: float, b: float,
                      iterations: int = 20) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-round jump estimates ``Y_i``, the run variance each carries, and their mean."""
    loss = np.array([o.loss_before for o in obs], dtype=float)
    dec = np.array([o.loss_before - o.loss_after for o in obs], dtype=float)
    r = np.array([o.sample_fraction for o in obs], dtype=float)
    ybar = 0.0
    jumps = profile.mean_at(loss) * r**a - dec
    for _ in range(iterations):
        jumps = profile.mean_at(np.maximum(loss + ybar, 0.0)) * r**a - dec
        new = float(np.mean(jumps))
        if abs(new - ybar) < 1e-12:
            break
        ybar = new
    run_var = (profile.std_at(np.maximum(loss + ybar, 0.0)) * r ** (-b)) ** 2
    return jumps, run_var, ybar


def _validate_observations(observations: Iterable[LossObservation],
                           model_ids: Iterable[str]) -> tuple[list[LossObservation], list[str]]:
    models = list(model_ids)
    if not models:
        raise ScenarioError("profile: no model ids given")
    known = set(models)
    obs = list(observations)
    for o in obs:
        if not isinstance(o, LossObservation):
            raise ScenarioError(f"profile: expected LossObservation records, got {type(o).__name__}")
        for name, ident in (("model", o.model), ("previous_model", o.previous_model)):
            if ident is not None and ident not in known:
                raise ScenarioError(f"observation round {o.round}: unknown {name} {ident!r} "
                                    f"(known: {', '.join(models)})")
    return obs, models


# ---------------------------------------------------------------------------
# Batch fit
# ---------------------------------------------------------------------------
def _auto_levels(loss: np.ndarray, max_levels: int, min_points: int) -> np.ndarray:
    count = int(np.clip(len(loss) // max(min_points, 1), 1, max_levels))
    if count == 1:
        return np.array([float(np.mean(loss))])
    return np.quantile(loss, np.linspace(0.0, 1.0, count))


def _strictly_ascending(levels: np.ndarray) -> np.ndarray:
    levels = np.unique(np.asarray(levels, dtype=float))
    keep = [levels[0]]
    for value in levels[1:]:
        if value - keep[-1] > 1e-9 * max(1.0, abs(value)):
            keep.append(value)
    return np.array(keep)


def _prune_levels(loss: np.ndarray, levels: np.ndarray, min_points: float) -> np.ndarray:
    """Drop the least-supported level until every level has ``min_points`` of basis weight."""
    while len(levels) > 1:
        support = hat_basis(loss, levels).sum(axis=0)
        worst = int(np.argmin(support))
        if support[worst] >= min_points:
            break
        levels = np.delete(levels, worst)
    return levels


def fit_run_profile(observations: Sequence[LossObservation], levels: Sequence[float] | None = None, *,
                    data_exponent_mean: float = 0.5, data_exponent_std: float = 0.5,
                    max_levels: int = 6, min_points_per_level: int = 10,
                    std_floor: float = DEFAULT_STD_FLOOR) -> RunProfile:
    """Fit one model's run profile from its run (non-switch) rounds.

    Parameters
    ----------
    observations : sequence of LossObservation
        Rounds of a single model without a switch.
    levels : sequence of float, optional
        Loss levels to use; by default up to ``max_levels`` quantiles of the
        observed ``loss_before``.  Levels with little support are dropped.
    data_exponent_mean, data_exponent_std : float
        The contract's ``a`` and ``b``.
    max_levels, min_points_per_level : int
        Level count limits (see module docstring).
    std_floor : float
        Smallest reported standard deviation.

    Returns
    -------
    RunProfile
    """
    if not observations:
        raise ScenarioError("profile: cannot fit a run profile without observations")
    a, b = float(data_exponent_mean), float(data_exponent_std)
    loss, y, s = run_arrays(observations, a, b)
    grid, phi = _run_levels(loss, levels, max_levels, min_points_per_level)
    return _fit_on_levels(loss, y, s, grid, phi, std_floor)


def _run_levels(loss: np.ndarray, levels: Sequence[float] | None, max_levels: int,
                min_points_per_level: int) -> tuple[np.ndarray, np.ndarray]:
    """The levels of a run profile fitted at the losses ``loss`` and their hat basis.

    They depend on the losses only, not on the data exponents, so a search over
    the exponents (:func:`fit_data_exponents`) computes them once.
    """
    if levels is None:
        grid = _auto_levels(loss, max_levels, min_points_per_level)
    else:
        grid = np.asarray(list(levels), dtype=float)
        if grid.size == 0 or not np.all(np.isfinite(grid)):
            raise ScenarioError("profile: levels must be a non-empty list of finite numbers, "
                                f"got {list(levels)}")
    grid = _prune_levels(loss, _strictly_ascending(grid), min(min_points_per_level, len(loss)))
    return grid, hat_basis(loss, grid)


def _fit_on_levels(loss: np.ndarray, y: np.ndarray, s: np.ndarray, grid: np.ndarray, phi: np.ndarray,
                   std_floor: float) -> RunProfile:
    """:func:`fit_run_profile` on given levels ``grid`` with hat basis ``phi`` (see there)."""
    n = len(loss)
    k = len(grid)
    pooled_mean = np.full(k, float(np.average(y, weights=1.0 / s**2)))

    sigma = np.full(k, max(float(np.std(y / s)), std_floor))
    mean = pooled_mean
    for _ in range(3):
        weights = 1.0 / (s * np.maximum(phi @ sigma, std_floor)) ** 2
        gram = phi.T @ (phi * weights[:, None])
        mean = _ridge_solve(gram, phi.T @ (weights * y), pooled_mean)
        abs_res = np.abs(y - phi @ mean) / s * _SQRT_PI_OVER_2 * math.sqrt(n / max(n - k, 1))
        if n > k:
            sigma = _ridge_solve(phi.T @ phi, phi.T @ abs_res, np.full(k, float(np.mean(abs_res))))
        sigma = np.maximum(sigma, std_floor)
    return RunProfile(tuple(float(v) for v in grid), tuple(float(v) for v in mean),
                      tuple(float(v) for v in sigma))


def fit_switch_profile(observations: Sequence[LossObservation], target_profile: RunProfile, *,
                       data_exponent_mean: float = 0.5, data_exponent_std: float = 0.5,
                       std_floor: float = DEFAULT_STD_FLOOR) -> tuple[float, float]:
    """Estimate one switch pair's jump ``(mean, std)`` from its switch rounds.

    With fewer than :data:`SWITCH_MIN_POINTS` observations the spread cannot
    be estimated (the sample variance minus the run variance is then often
    0, and a plan would take the jump as certain); the std is then at least
    the new model's run std at those losses (a conservative guess). Measured:
    exploration profiles with 2 switch rounds fitted jumps of -0.2 to -0.8
    with the floor std, and plans ended with a "certain" switch and missed.
    """
    if not observations:
        raise ScenarioError("profile: cannot fit a switch without observations")
    jumps, run_var, ybar = switch_estimates(observations, target_profile,
                                             data_exponent_mean, data_exponent_std)
    guess = float(math.sqrt(np.mean(run_var)))
    if len(jumps) == 1:
        return ybar, max(guess, std_floor)
    var = float(np.var(jumps, ddof=1) - np.mean(run_var))
    std = math.sqrt(max(var, 0.0))
    if len(jumps) < SWITCH_MIN_POINTS:
        std = max(std, guess)
    return ybar, max(std, std_floor)


def run_segments(observations: Iterable[LossObservation]) -> list[list[LossObservation]]:
    """Split observations into trajectories of consecutive run rounds of one model.

    A segment continues while the model, the sample fraction and the round
    number (+1) carry on and each round starts from the previous round's loss;
    a switch round ends it.
    """
    segments: list[list[LossObservation]] = []
    current: list[LossObservation] = []
    for o in observations:
        if current:
            last = current[-1]
            if (o.is_switch or o.model != last.model or o.round != last.round + 1
                    or o.loss_before != last.loss_after or o.sample_fraction != last.sample_fraction):
                segments.append(current)
                current = []
        if not o.is_switch:
            current.append(o)
    if current:
        segments.append(current)
    return segments


def fit_spread_factors(observations: Sequence[LossObservation], profile: RunProfile, horizon: int, *,
                       data_exponent_mean: float = 0.5, data_exponent_std: float = 0.5,
                       prior_windows: float = 2.0, bounds: tuple[float, float] = (0.2, 2.0)) -> np.ndarray:
    """Per-level factors on ``sigma`` that make the random walk match ``horizon``-round spread.

    The contract adds independent per-round draws, so the spread of the loss
    change over ``h`` rounds grows like ``h * sigma**2``. Observed losses are
    not like that: a round that happens to evaluate badly is mostly made up
    in the next one (negative correlation of successive decreases), so the
    per-round ``sigma`` over-states the spread over many rounds. With the
    standardised residuals ``z_k = (y_k - mu(L_k)) / (s_k sigma(L_k))`` of one
    trajectory, the variance ratio ``VR(h) = E[(z_k + ... + z_{k+h-1})**2] / h``
    is 1 for a true random walk and below 1 under such mean reversion. Every
    window of ``horizon`` rounds is attributed to the levels by the hat basis
    at its mean loss; a level's ratio is the weighted mean of the windows'
    ``sum(z)**2 / h``, shrunk towards 1 by ``prior_windows`` pseudo-windows.
    The factor is ``sqrt(ratio)``, clipped to ``bounds``.

    The calibrated random walk matches the observed spread over ``horizon``
    rounds; over longer plans it stays conservative, over much shorter ones
    (a re-plan with a few rounds left) it can be narrower than the truth.

    Parameters
    ----------
    observations : sequence of LossObservation
        Run rounds of one model (several trajectories; see :func:`run_segments`).
    profile : RunProfile
        The model's profile fitted from the same rounds (per-round ``sigma``).
    horizon : int
        Window length ``h`` (>= 2); trajectories shorter than it are not used.
    data_exponent_mean, data_exponent_std : float
        ``a`` and ``b``.
    prior_windows : float
        Pseudo-windows with ratio 1 per level (few windows: factor near 1).
    bounds : (float, float)
        Smallest and largest factor.

    Returns
    -------
    numpy.ndarray
        One factor per level of ``profile``.
    """
    if int(horizon) != horizon or horizon < 2:
        raise ScenarioError(f"profile: spread horizon must be an integer >= 2, got {horizon!r}")
    h = int(horizon)
    levels = profile.levels
    num = np.full(len(levels), float(prior_windows))
    den = np.full(len(levels), float(prior_windows))
    for segment in run_segments(observations):
        if len(segment) < h:
            continue
        loss, y, s = run_arrays(segment, data_exponent_mean, data_exponent_std)
        z = (y - profile.mean_at(loss)) / (s * profile.std_at(loss))
        window_sums = np.convolve(z, np.ones(h), mode="valid")
        window_loss = np.convolve(loss, np.ones(h) / h, mode="valid")
        phi = hat_basis(window_loss, levels)
        num += phi.T @ (window_sums**2 / h)
        den += phi.sum(axis=0)
    return np.clip(np.sqrt(num / den), bounds[0], bounds[1])


def fit_loss_profile(observations: Iterable[LossObservation], model_ids: Iterable[str],
                     levels: Sequence[float] | Mapping[str, Sequence[float]] | None = None, *,
                     initial: float | None = None, reference_samples: float | None = None,
                     data_exponent_mean: float = 0.5, data_exponent_std: float = 0.5,
                     max_levels: int = 6, min_points_per_level: int = 10,
                     std_floor: float = DEFAULT_STD_FLOOR,
                     spread_horizon: int | None = None) -> dict[str, Any]:
    """Fit the contract's ``loss`` sub-document from observed rounds.

    Parameters
    ----------
    observations : iterable of LossObservation
        Rounds from one or more profiling runs.
    model_ids : iterable of str
        Every model of the scenario; each needs at least one run round.
    levels : sequence of float or mapping model id -> sequence, optional
        Loss levels (shared or per model); automatic by default.
    initial : float, optional
        ``loss.initial``; by default the mean ``loss_before`` of first rounds
        (``previous_model is None``), else the largest observed loss.
    reference_samples : float, optional
        Written only when given (the contract defaults it to all samples).
    data_exponent_mean, data_exponent_std : float
        ``a`` and ``b`` (taken as given, not estimated).
    max_levels, min_points_per_level, std_floor
        See :func:`fit_run_profile`.
    spread_horizon : int, optional
        When given, every run profile's ``std`` is calibrated to the spread
        over this many rounds (:func:`fit_spread_factors`) and the factors are
        recorded as ``spread_factor``. Switch jumps are fitted with the
        per-round (uncalibrated) run spread, which their single rounds carry.

    Returns
    -------
    dict
        ``{"initial", ["reference_samples"], "data_exponent_mean",
        "data_exponent_std", "run": {model: {levels, mean, std[, spread_factor]}},
        "switch": [{from, to, mean, std}]}``, accepted by
        :func:`depl_fl.contract.scenario.scenario_from_dict`.

    Raises
    ------
    ScenarioError
        When a model has no run round or an observation names an unknown model.
    """
    obs, models = _validate_observations(observations, model_ids)
    if not obs:
        raise ScenarioError("profile: no observations to fit")
    exps = {"data_exponent_mean": data_exponent_mean, "data_exponent_std": data_exponent_std}
    run_rounds = _run_rounds_by_model(obs, models)
    run = {model: fit_run_profile(own, levels.get(model) if isinstance(levels, Mapping) else levels,
                                  max_levels=max_levels, min_points_per_level=min_points_per_level,
                                  std_floor=std_floor, **exps)
           for model, own in run_rounds.items()}
    # Switches are fitted before the spread calibration: a switch round carries one round of run noise.
    switches = _fit_switches(obs, run, std_floor, exps)
    if spread_horizon is not None:
        run = {model: _calibrated(profile, run_rounds[model], spread_horizon, std_floor, exps)
               for model, profile in run.items()}
    doc: dict[str, Any] = {"initial": float(_initial_loss(obs) if initial is None else initial)}
    if reference_samples is not None:
        doc["reference_samples"] = float(reference_samples)
    doc.update({key: float(value) for key, value in exps.items()})
    doc["run"] = {model: _run_profile_doc(profile) for model, profile in run.items()}
    doc["switch"] = switches
    return doc


def _run_rounds_by_model(obs: Sequence[LossObservation],
                         models: Sequence[str]) -> dict[str, list[LossObservation]]:
    """The run (non-switch) rounds of every model; each model needs at least one."""
    out = {}
    for model in models:
        own = out[model] = [o for o in obs if o.model == model and not o.is_switch]
        if not own:
            raise ScenarioError(f"profile: model {model!r} has no observed run round (only switches or none)")
    return out


def _fit_switches(obs: Sequence[LossObservation], run: Mapping[str, RunProfile], std_floor: float,
                  exps: Mapping[str, float]) -> list[dict[str, Any]]:
    """One ``{from, to, mean, std}`` entry per observed switch pair, in sorted pair order."""
    switches = []
    for source, target in sorted({(o.previous_model, o.model) for o in obs if o.is_switch}):
        own = [o for o in obs if o.is_switch and (o.previous_model, o.model) == (source, target)]
        mean, std = fit_switch_profile(own, run[target], std_floor=std_floor, **exps)
        switches.append({"from": source, "to": target, "mean": mean, "std": std})
    return switches


def _calibrated(profile: RunProfile, rounds: Sequence[LossObservation], horizon: int,
                std_floor: float, exps: Mapping[str, float]) -> RunProfile:
    """``profile`` with its std scaled to the spread over ``horizon`` rounds (and the factors kept)."""
    factor = fit_spread_factors(rounds, profile, horizon, **exps)
    std = np.maximum(np.asarray(profile.std) * factor, std_floor)
    return RunProfile(profile.levels, profile.mean, tuple(float(v) for v in std),
                      tuple(float(v) for v in factor))


def _initial_loss(obs: Sequence[LossObservation]) -> float:
    """Mean loss before the first rounds, else the largest observed loss."""
    first = [o.loss_before for o in obs if o.previous_model is None]
    return float(np.mean(first)) if first else max(o.loss_before for o in obs)


def _run_profile_doc(profile: RunProfile) -> dict[str, Any]:
    doc: dict[str, Any] = {"levels": list(profile.levels), "mean": list(profile.mean),
                           "std": list(profile.std)}
    if profile.spread_factor:
        doc["spread_factor"] = list(profile.spread_factor)
    return doc


def _run_log_likelihood(observations: Sequence[LossObservation], profile: RunProfile,
                        a: float, b: float) -> float:
    """Gaussian log-likelihood of run rounds under the contract's run semantics."""
    return _log_likelihood(*_round_arrays(observations), profile, a, b)


def _round_arrays(observations: Sequence[LossObservation]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loss before, decrease and sample fraction of each round."""
    loss = np.array([o.loss_before for o in observations], dtype=float)
    dec = np.array([o.loss_before - o.loss_after for o in observations], dtype=float)
    r = np.array([o.sample_fraction for o in observations], dtype=float)
    return loss, dec, r


def _log_likelihood(loss: np.ndarray, dec: np.ndarray, r: np.ndarray, profile: RunProfile,
                    a: float, b: float) -> float:
    mean = profile.mean_at(loss) * r**a
    std = profile.std_at(loss) * r ** (-b)
    return float(np.sum(-np.log(std) - 0.5 * ((dec - mean) / std) ** 2))


def fit_data_exponents(observations: Iterable[LossObservation], model_ids: Iterable[str], *,
                       exponent_grid: Sequence[float] = tuple(np.round(np.arange(0.0, 1.51, 0.05), 2)),
                       max_levels: int = 6, min_points_per_level: int = 10,
                       std_floor: float = DEFAULT_STD_FLOOR) -> tuple[float, float]:
    """Estimate the data exponents ``a`` and ``b`` by profile likelihood.

    For every pair ``(a, b)`` of ``exponent_grid`` the run profiles are fitted
    with :func:`fit_run_profile` and scored by the Gaussian log-likelihood of
    all run rounds, ``d ~ Normal(mu_m(L) r**a, sigma_m(L) r**-b)``; the best
    pair wins.  The exponents are only identified by rounds with different
    sample fractions ``r`` (pilots over client subsets), so at least two
    distinct fractions are required.

    Parameters
    ----------
    observations : iterable of LossObservation
        Rounds from profiling runs, including rounds with ``sample_fraction < 1``.
    model_ids : iterable of str
        Every model of the scenario.
    exponent_grid : sequence of float
        Candidate values for both ``a`` and ``b`` (non-negative).
    max_levels, min_points_per_level, std_floor
        See :func:`fit_run_profile`.

    Returns
    -------
    (float, float)
        ``(a, b)``.

    Raises
    ------
    ScenarioError
        When the run rounds do not cover two distinct sample fractions, or the
        grid is empty or has a negative or non-finite value.
    """
    obs, models = _validate_observations(observations, model_ids)
    grid = [float(v) for v in exponent_grid]
    if not grid or not all(math.isfinite(v) and v >= 0.0 for v in grid):
        raise ScenarioError(f"profile: exponent_grid must be non-negative finite numbers, got {grid}")
    per_model = {m: [o for o in obs if o.model == m and not o.is_switch] for m in models}
    per_model = {m: own for m, own in per_model.items() if own}
    fractions = {round(o.sample_fraction, 9) for own in per_model.values() for o in own}
    if len(fractions) < 2:
        raise ScenarioError("profile: the data exponents need run rounds with at least two different "
                            "sample fractions (pilots over client subsets)")
    # A model's levels and hat basis depend on its losses only: computed once, not per (a, b).
    # (the arrays are run_arrays' and _run_log_likelihood's, the same arithmetic)
    rounds = {m: _round_arrays(own) for m, own in per_model.items()}
    bases = {m: _run_levels(loss, None, max_levels, min_points_per_level)
             for m, (loss, _, _) in rounds.items()}
    best: tuple[float, float, float] | None = None
    for a in grid:
        for b in grid:
            total = 0.0
            for m, (loss, dec, r) in rounds.items():
                profile = _fit_on_levels(loss, dec / r**a, r ** (-(a + b)), *bases[m], std_floor)
                total += _log_likelihood(loss, dec, r, profile, a, b)
            if best is None or total > best[0]:
                best = (total, a, b)
    assert best is not None
    return best[1], best[2]
