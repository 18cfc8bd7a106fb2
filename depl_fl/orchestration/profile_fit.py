"""The loss profile assembled from the exploration's fit: plan regime, evaluation noise, set shift.

Pure functions on the loss document of the contract (``scenario["loss"]``),
shared by the federated exploration
(:class:`strategies.federated_profiling.FederatedProfiler`) and the in-process
pilots (:mod:`depl_fl.orchestration.profiling`).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import numpy as np

from depl_fl.tracking.estimation import DEFAULT_STD_FLOOR

LOG = logging.getLogger("depl_fl.server")


def plan_regime_of(cfg: Mapping[str, Any]) -> Any:
    """The ``profile.plan_regime`` constants of ``cfg`` (None when the section is absent or disabled)."""
    from depl_fl.tracking.learning_curve import PlanRegime

    raw = (cfg.get("profile") or {}).get("plan_regime")
    if not raw or not raw.get("enabled", True):
        return None
    return PlanRegime.from_config(raw)


def reads_rate_at_full(regime: Any, cfg: Mapping[str, Any]) -> bool:
    """Whether a plan reads the exploration's rate at ``r = 1`` (``regime.rate_at_full``).

    ``always``: every exploration's (the factor is exactly 1 when its rounds trained every client);
    ``cheapest``: only an exploration on the cheapest clusters (``profile.explore.clients: cheapest``
    in ``cfg``, the job's configuration), a ``max_clients`` exploration's rate then counts as measured
    at ``r = 1``.
    """
    explore = (cfg.get("profile") or {}).get("explore") or {}
    return regime.rate_at_full == "always" or explore.get("clients", "all") == "cheapest"


def local_steps(cfg: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]]) -> float:
    """Local SGD steps of a client of average size in one round: ``epochs * mean samples / batch``."""
    train = cfg.get("train") or {}
    samples = [int(p["num-samples"]) for p in properties.values()] or [0]
    return float(train.get("local_epochs", 1)) * float(np.mean(samples)) / float(train.get("batch_size", 32))


def rate_span(losses: Sequence[float], rounds: int, window: float) -> tuple[float, float, int]:
    """``(first loss, last loss, rounds between)`` of the trajectory part the learning curve's rate is
    measured on: its last ``ceil(window * rounds)`` rounds (at least one; ``window`` 1: all of it).

    The first exploration rounds of a fresh model sit on a plateau the power-law curve does not have;
    a rate measured from the fresh loss then predicts the plan's rounds too slow, the more so the
    shorter the exploration.

    The first loss is at most the fresh model's (``losses[0]``): a loss above it is a rise (a learning
    rate too large), not a point of the learning curve, and a rate read from there down (a partial
    recovery from the rise, 924 to 17.9 in three rounds on 20 synthetic clients at lr 0.5) predicted
    the plan's loss to fall to 0 in one round. From the fresh loss such a window shows the progress
    it really made: none when it ends above the fresh loss (the rate's minimum, no dependable plan).
    """
    rounds = min(int(rounds), len(losses) - 1)
    span = max(1, min(rounds, math.ceil(float(window) * rounds - 1e-9)))
    return min(float(losses[-1 - span]), float(losses[0])), float(losses[-1]), span


def with_plan_regime(fitted: Mapping[str, Any], trajectories: Mapping[str, tuple[Sequence[float], Any]],
                     rounds: int, regime: Any, steps: float,
                     sem_points: Mapping[str, Sequence[tuple[float, float]]],
                     rate_window: float = 1.0, rate_at_full: bool = False,
                     oscillation: float | None = None,
                     trends: Mapping[str, Any] | None = None,
                     rates: Mapping[str, float] | None = None) -> dict[str, Any]:
    """``fitted`` with every variant's plan regime (:mod:`depl_fl.tracking.learning_curve`).

    Below ``1.25 L_e`` each variant's run profile is its learning curve through
    its own exploration trajectory (its last ``rate_window`` share of rounds,
    :func:`rate_span`; with ``rate_at_full`` the rate at ``r = 1``, over the
    mean ``r_eff**a`` of those rounds, as an exploration on less than the whole
    federation needs, :func:`reads_rate_at_full`; without it the rate as
    measured), the
    data exponents are the regime's, the judged loss carries ``judged_error``
    (the measured ``sem**2 / L`` times the regime's factor), and a set that
    leaves a class unseen is outside the measured range (``max_uncovered`` 0:
    on the trajectory bank such sets end above their predicted 0.95-quantile three times as often).
    The oscillation is the regime's, widened by what the trajectories show beyond
    ``regime.explored_oscillation`` (:func:`plan_oscillation`; ``oscillation``
    when given). With ``regime.anchor`` ``"trend"`` a variant's curve starts
    at its trajectory's fitted trend (``trends``, else :func:`exploration_trends`),
    where one is fitted; its rate is read between the fresh loss and that trend,
    as the constants were fitted with the rate between two trajectory points.
    Above the curve the exploration's measured levels are kept as measured, a
    measured rise included: lifting them to the curve's top rate
    (``plan_regime_run(..., no_rise_above=True)``) gave plans where two jobs
    found none, but made static plans bolder than their predictions on new seeds
    (docs/MODELS.md); a job the rise caps ends with no dependable plan and names
    the probability it can reach. ``rates`` (``{model: c}``) gives a variant's curve rate read
    elsewhere (another federation's trajectory, :mod:`depl_fl.orchestration.prior_regime`); its
    curve still starts at its own last loss. With ``regime.switch_cycles`` ``"no_gain"`` the measured
    switch jumps are raised until no cycle of switches gains (:mod:`depl_fl.tracking.switch_cycles`).
    """
    from depl_fl.tracking.learning_curve import plan_regime_run, ratio_factor
    from depl_fl.tracking.noise import sem_coefficient

    if oscillation is None:
        oscillation = plan_oscillation(trajectories, regime, steps)
    if trends is None and regime.anchor == "trend":
        trends = exploration_trends(trajectories, regime, oscillation, rate_at_full)
    run = {}
    for model, profile in fitted["run"].items():
        losses, ratios = (list(t) for t in trajectories.get(model, ([], [])))
        if len(losses) < 2 or rounds < 1:
            run[model] = dict(profile)
            continue
        first, last, span = rate_span(losses, rounds, rate_window)
        trend = (trends or {}).get(model)
        factor = ratio_factor(ratios[-span:], regime.rate_exponent) if rate_at_full else 1.0
        if trend is not None:
            run[model] = plan_regime_run(profile, first, trend.level, span, regime, oscillation, factor,
                                         floor=trend.floor)
            continue
        run[model] = plan_regime_run(profile, first, last, span, regime, oscillation, factor,
                                     rate=(rates or {}).get(model))
    out = {**fitted, "run": run, "data_exponent_mean": regime.rate_exponent,
           "data_exponent_std": regime.noise_exponent}
    if regime.oscillation_dof is not None:
        out["eval_dof"] = regime.oscillation_dof
    coefficient = sem_coefficient([tuple(p) for pts in sem_points.values() for p in pts])
    if coefficient is not None:
        out["judged_error"] = regime.judged_error_factor * coefficient
    if "max_uncovered" in out:
        out["max_uncovered"] = 0.0
    if regime.switch_cycles == "no_gain" and out.get("switch"):
        out["switch"] = switch_jumps_without_cycle_gain(out["switch"])
    LOG.info("loss profile: plan regime from the exploration's last losses (floor %.3g, %.3g local steps, "
             "oscillation %.3g, judged error %.3g)", regime.floor, steps, oscillation,
             out.get("judged_error", 0.0))
    return out


def switch_jumps_without_cycle_gain(switch: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``switch`` with every mean raised until no cycle of switches gains
    (:func:`depl_fl.tracking.switch_cycles.without_cycle_gain`), the shift logged when there is one."""
    from depl_fl.tracking.switch_cycles import without_cycle_gain

    out = without_cycle_gain(switch)
    shift = max((float(a["mean"]) - float(b["mean"]) for a, b in zip(out, switch, strict=True)), default=0.0)
    if shift > 0.0:
        LOG.info("loss profile: the measured switch jumps gain %.3g a switch around a cycle: every jump "
                 "raised by that much", shift)
    return out


def exploration_trends(trajectories: Mapping[str, tuple[Sequence[float], Any]], regime: Any,
                       oscillation: float, rate_at_full: bool = False) -> dict[str, Any]:
    """Every variant's trend at the exploration's end (:mod:`depl_fl.tracking.exploration_trend`).

    ``{model: ExplorationTrend}`` for the variants whose trajectory
    (``{model: (losses, ratios)}``) is long enough to fit; the floor is the
    regime's at the trajectory's last loss, the residuals are in units of the
    job's ``oscillation``; with ``rate_at_full`` the rate holds at ``r = 1``.
    """
    from depl_fl.tracking.exploration_trend import fit_exploration_trend
    from depl_fl.tracking.learning_curve import effective_floor

    out = {}
    for model, (losses, ratios) in trajectories.items():
        if len(losses) < 2:
            continue
        floor = effective_floor(regime.floor, float(losses[-1]))
        trend = fit_exploration_trend(losses, regime.power, floor, oscillation,
                                      ratios if rate_at_full else None, regime.rate_exponent)
        if trend is not None:
            out[model] = trend
            LOG.info("loss profile: %s's trend at the exploration's end %.4g +- %.3g (last loss %.4g), "
                     "rate %.3g from round %d", model, trend.level, trend.level_std, float(losses[-1]),
                     trend.rate, trend.window_start)
    return out


def plan_oscillation(trajectories: Mapping[str, tuple[Sequence[float], Any]], regime: Any,
                     steps: float) -> float:
    """The plan regime's oscillation coefficient at ``steps`` local steps for this job.

    ``regime.oscillation_at(steps)``, combined with the coefficient the
    exploration's merged trajectories (``{model: (losses, ratios)}``) measure
    (:mod:`depl_fl.tracking.oscillation`) when ``regime.explored_oscillation``
    is set; the constant alone without it or without a second difference.
    """
    from depl_fl.tracking.oscillation import combined_oscillation, difference_oscillation

    constant = regime.oscillation_at(steps)
    if regime.explored_oscillation is None:
        return constant
    estimate = difference_oscillation([(t[0], t[1]) for t in trajectories.values()], regime.noise_exponent)
    if estimate is None:
        return constant
    reference = regime.explored_oscillation * regime.steps_factor(steps)
    used = combined_oscillation(constant, estimate.coefficient, reference)
    LOG.info("loss profile: oscillation %.3g measured over %d second differences (reference %.3g, "
             "constant %.3g): plans use %.3g", estimate.coefficient, estimate.differences, reference,
             constant, used)
    return used


def with_eval_std(fitted: Mapping[str, Any],
                  trajectories: Sequence[tuple[str, Sequence[float], Sequence[float]]],
                  a: float, b: float) -> dict[str, Any]:
    """``fitted`` with ``run[m].eval_std`` per level (:func:`depl_fl.tracking.noise.fit_eval_std`).

    ``trajectories``: ``(model, losses, ratios)`` of the profile's global-model
    trajectories on the validation split. Unchanged when they are too short.
    """
    from depl_fl.contract.scenario import RunProfile
    from depl_fl.errors import ScenarioError
    from depl_fl.tracking.noise import fit_eval_std

    profiles = {m: RunProfile(tuple(r["levels"]), tuple(r["mean"]), tuple(r["std"]))
                for m, r in fitted["run"].items()}
    try:
        split, eval_std = fit_eval_std(trajectories, profiles, a, b)
    except ScenarioError:
        return dict(fitted)
    LOG.info("loss profile: lag-1 correlation of the decreases %.2f over %d pairs: evaluation noise "
             "%.0f%% of the per-round variance", split.rho, split.pairs,
             100 * 2 * split.eval_var / max(split.per_round_var, 1e-300))
    return {**fitted, "run": {m: {**r, "eval_std": eval_std[m]} for m, r in fitted["run"].items()}}


def with_measured_sem(loss: dict[str, Any],
                      sem_points: Mapping[str, Sequence[tuple[float, float]]]) -> dict[str, Any]:
    """Every variant's evaluation noise at least its measured standard error (see
    :func:`depl_fl.tracking.noise.with_evaluation_error`); unchanged for a variant without any."""
    from depl_fl.tracking.noise import sem_coefficient, with_evaluation_error

    out = {**loss, "run": dict(loss["run"])}
    for model, run in loss["run"].items():
        coefficient = sem_coefficient(sem_points.get(model, ()))
        if coefficient is not None:
            out["run"][model] = with_evaluation_error(run, coefficient)
    return out


def with_set_shift(loss: dict[str, Any], rounds: Sequence[Any]) -> dict[str, Any]:
    """``loss`` with ``set_shift`` fitted from the exploration's set-change rounds (unchanged: too few)."""
    from depl_fl.contract.scenario import RunProfile
    from depl_fl.tracking.set_shift import fit_set_shift

    run = {m: RunProfile(tuple(r["levels"]), tuple(r["mean"]), tuple(r["std"]))
           for m, r in loss["run"].items()}
    shift = fit_set_shift(rounds, run, float(loss["data_exponent_mean"]), float(loss["data_exponent_std"]))
    if shift is None:
        return loss
    LOG.info("loss profile: set shift %.3f +- %.3f per unit of coverage gap, from %d group rounds",
             shift["mean"], shift["std"], len(rounds))
    return {**loss, "set_shift": shift}


def anchor_at_zero(loss: dict[str, Any]) -> dict[str, Any]:
    """Add a level at loss 0 with zero mean decrease to every run profile (if it has none).

    The exploration rounds only see the early, high losses; the contract clamps a
    profile outside its levels, which would carry their large decrease down to
    the target (plans far too short). Anchoring at loss 0 (zero mean decrease,
    the std floor) makes the decrease and its spread shrink in proportion to
    the loss below the observed range (multiplicative dynamics; the loss cannot
    go below 0). The online tracker then refines both levels from the training
    rounds. ``eval_std`` keeps its share of the std at the new level (the
    contract needs ``2 eval_std**2 <= std**2``); the validation/test offset of
    a finite split is the controller's ``loss_sem``, not this.
    """
    out = {**loss, "run": {}}
    for model, run in loss["run"].items():
        levels, mean, std = list(run["levels"]), list(run["mean"]), list(run["std"])
        if levels[0] > 0.0:
            levels, mean, std = [0.0, *levels], [0.0, *mean], [DEFAULT_STD_FLOOR, *std]
            run = {**{k: v for k, v in run.items() if k != "spread_factor"},
                   "levels": levels, "mean": mean, "std": std}
            if "eval_std" in run:  # the same share of the (floor) spread at the anchor
                share = run["eval_std"][0] / max(std[1], 1e-300)
                run["eval_std"] = [min(share, 0.5**0.5) * DEFAULT_STD_FLOOR, *run["eval_std"]]
        out["run"][model] = run
    return out
