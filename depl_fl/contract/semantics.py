"""Contract semantics (docs/FORMATS.md): cost model and loss Monte Carlo.

This module is the single executable definition of what a plan *means*:

* the **cost model** -- per-client time and energy of one round, round time
  (maximum over the participating clients) and round energy (sum of client
  energies plus the activation energy of every active cluster);
* the **validity rules** of a plan (:func:`plan_errors`);
* the **loss semantics** -- a vectorised Monte Carlo of the final loss
  (:func:`simulate_final_losses`), looping over rounds with numpy arrays over
  trajectories;
* :func:`evaluate_plan`, which combines both into the figures that
  ``depl-fl evaluate`` prints.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr, stdtrit

from depl_fl.contract import coverage as coverage_math
from depl_fl.contract import draws
from depl_fl.contract.plan import RoundDecision, Targets
from depl_fl.contract.scenario import Scenario
from depl_fl.errors import ScenarioError

# Relative slack when comparing a plan's total time with the deadline, so that
# a plan built to end exactly at the deadline is not rejected by rounding.
_DEADLINE_RTOL = 1e-9


# ---------------------------------------------------------------------------
# Cost model
# ---------------------------------------------------------------------------
def _lookup(scenario: Scenario, kind: str, ident: str) -> Any:
    getter = getattr(scenario, kind)
    try:
        return getter(ident)
    except KeyError:
        raise ScenarioError(f"unknown {kind} id {ident!r}") from None


def client_time(scenario: Scenario, client_id: str, model_id: str, level: int) -> float:
    """Time in seconds of one client's part of a round.

    ``W / flops_per_s + 2 * size_bytes / bytes_per_s + overhead_s`` with
    ``W = local_epochs * num_samples * flops_per_sample`` (download and upload
    of the model).

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    client_id : str
        The client.
    model_id : str
        The model variant trained in the round.
    level : int
        Index into the ``levels`` list of the client's cluster.

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ScenarioError
        If an id is unknown or ``level`` is out of range.
    """
    client = _lookup(scenario, "client", client_id)
    model = _lookup(scenario, "model", model_id)
    cluster = scenario.cluster(client.cluster)
    lv = _level(cluster, level)
    work = scenario.local_epochs * client.num_samples * model.flops_per_sample
    return work / lv.flops_per_s + 2.0 * model.size_bytes / cluster.bytes_per_s + cluster.overhead_s


def client_energy(scenario: Scenario, client_id: str, model_id: str, level: int) -> float:
    """Energy in joules of one client's part of a round.

    ``W * joules_per_flop + 2 * size_bytes * joules_per_byte`` (see
    :func:`client_time` for ``W`` and the parameters).
    """
    client = _lookup(scenario, "client", client_id)
    model = _lookup(scenario, "model", model_id)
    cluster = scenario.cluster(client.cluster)
    lv = _level(cluster, level)
    work = scenario.local_epochs * client.num_samples * model.flops_per_sample
    return work * lv.joules_per_flop + 2.0 * model.size_bytes * cluster.joules_per_byte


def _level(cluster: Any, level: int) -> Any:
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) \
            or not 0 <= level < len(cluster.levels):
        raise ScenarioError(
            f"cluster {cluster.id!r}: level {level!r} out of range "
            f"(valid: 0..{len(cluster.levels) - 1})")
    return cluster.levels[int(level)]


def _decision_level(scenario: Scenario, decision: RoundDecision, client_id: str) -> int:
    cluster_id = _lookup(scenario, "client", client_id).cluster
    if cluster_id not in decision.levels:
        raise ScenarioError(f"round has no level for active cluster {cluster_id!r}")
    return decision.levels[cluster_id]


def round_time(scenario: Scenario, decision: RoundDecision) -> float:
    """Duration of one round: the maximum client time over the round's clients.

    Raises
    ------
    ScenarioError
        If the round has no clients, an id is unknown, or an active cluster has
        no (or an out-of-range) level.
    """
    if not decision.clients:
        raise ScenarioError("round has no clients")
    return max(client_time(scenario, cid, decision.model,
                           _decision_level(scenario, decision, cid))
               for cid in decision.clients)


def round_energy(scenario: Scenario, decision: RoundDecision) -> float:
    """Cost of one round in joules: client energies plus active clusters' activation energy.

    Raises
    ------
    ScenarioError
        As :func:`round_time`.
    """
    if not decision.clients:
        raise ScenarioError("round has no clients")
    energy = sum(client_energy(scenario, cid, decision.model,
                               _decision_level(scenario, decision, cid))
                 for cid in decision.clients)
    active = {_lookup(scenario, "client", cid).cluster for cid in decision.clients}
    return energy + sum(scenario.cluster(c).activation_joules for c in active)


def data_ratio(scenario: Scenario, clients: Sequence[str]) -> float:
    """``r = sum(num_samples of clients) / loss.reference_samples`` of the loss semantics."""
    total = sum(_lookup(scenario, "client", cid).num_samples for cid in clients)
    return total / scenario.loss.reference_samples


def set_coverage(scenario: Scenario, clients: Sequence[str]) -> tuple[float, float] | None:
    """``(c_S, u_S)`` of a round's client set under version 2 (docs/CONTRACT_V2.md).

    None -- the version-1 meaning for that round -- when the scenario is
    version 1, has no reference label shares, or some client of the set
    reports no label histogram. Computed once per set and scenario.
    """
    loss = scenario.loss
    if scenario.version < 2 or loss.label_shares is None:
        return None
    cache = scenario.__dict__.setdefault("_coverage", {})
    key = tuple(clients)
    if key not in cache:
        hists = {cid: _lookup(scenario, "client", cid).label_histogram for cid in key}
        known = {cid: h for cid, h in hists.items() if h is not None}
        cache[key] = coverage_math.set_coverage(key, known, loss.label_shares, loss.coverage_threshold)
    return cache[key]


def effective_ratio(scenario: Scenario, clients: Sequence[str]) -> float:
    """The data ratio step 2 of the loss semantics uses: ``r_eff = c_S * r`` for a covered set, else ``r``."""
    r = data_ratio(scenario, clients)
    cov = set_coverage(scenario, clients)
    return r if cov is None else cov[0] * r


def coverage_gap(scenario: Scenario, clients: Sequence[str]) -> float:
    """``1 - c_S`` of a round's client set (0 when its coverage is not known, see :func:`set_coverage`)."""
    cov = set_coverage(scenario, clients)
    return 0.0 if cov is None else min(max(1.0 - cov[0], 0.0), 1.0)


def coverage_error(scenario: Scenario, clients: Sequence[str]) -> str | None:
    """Why the set's loss lies outside the profile's measured coverage range (None: it does not)."""
    cov = set_coverage(scenario, clients)
    loss = scenario.loss
    if coverage_math.is_predictable(cov, loss.min_coverage, loss.max_uncovered):
        return None
    c_s, u_s = cov  # type: ignore[misc]  # not predictable implies known
    if loss.min_coverage is not None and c_s < loss.min_coverage - 1e-12:
        return (f"label coverage c_S={c_s:.4g} outside the profile's measured range "
                f"[{loss.min_coverage:.4g}, 1]")
    return (f"uncovered label share u_S={u_s:.4g} above the profile's measured "
            f"max_uncovered {loss.max_uncovered:.4g}")


def plan_totals(scenario: Scenario, rounds: Sequence[RoundDecision]) -> tuple[float, float]:
    """Total ``(cost_joules, time_s)`` of a round sequence (errors as :func:`round_time`)."""
    return (float(sum(round_energy(scenario, d) for d in rounds)),
            float(sum(round_time(scenario, d) for d in rounds)))


# ---------------------------------------------------------------------------
# Validity
# ---------------------------------------------------------------------------
def _round_errors(scenario: Scenario, index: int, decision: RoundDecision,
                  previous: str | None) -> list[str]:
    where = f"round {index}"
    counts = Counter(decision.clients)
    per_cluster: Counter[str] = Counter()
    errors = _model_errors(scenario, where, decision, previous)
    if not decision.clients:
        errors.append(f"{where}: no clients")
    errors += [f"{where}: client {cid!r} listed {count} times" for cid, count in counts.items() if count > 1]
    for cid in counts:
        try:
            per_cluster[scenario.client(cid).cluster] += 1
        except KeyError:
            errors.append(f"{where}: unknown client id {cid!r}")
    if decision.clients and len(per_cluster) and sum(per_cluster.values()) == len(counts):
        problem = coverage_error(scenario, decision.clients)
        if problem is not None:
            errors.append(f"{where}: {problem}")
    return errors + _cluster_errors(scenario, where, decision, per_cluster)


def _model_errors(scenario: Scenario, where: str, decision: RoundDecision,
                  previous: str | None) -> list[str]:
    """Unknown model id, or a change of model that is not an allowed switch."""
    try:
        scenario.model(decision.model)
    except KeyError:
        return [f"{where}: unknown model id {decision.model!r}"]
    if previous is not None and previous != decision.model and previous in scenario.loss.run \
            and (previous, decision.model) not in scenario.loss.switch:
        return [f"{where}: switch {previous!r} -> {decision.model!r} is not allowed "
                "(no such pair in loss.switch)"]
    return []


def _cluster_errors(scenario: Scenario, where: str, decision: RoundDecision,
                    per_cluster: Counter[str]) -> list[str]:
    """Capacity of the active clusters, and a valid level for exactly the active clusters."""
    errors = []
    for cluster_id, count in per_cluster.items():
        cluster = scenario.cluster(cluster_id)
        if count > cluster.max_clients:
            errors.append(f"{where}: cluster {cluster_id!r} has {count} clients, "
                          f"capacity is {cluster.max_clients}")
        if cluster_id not in decision.levels:
            errors.append(f"{where}: no level for active cluster {cluster_id!r}")
    for cluster_id, level in decision.levels.items():
        try:
            cluster = scenario.cluster(cluster_id)
        except KeyError:
            errors.append(f"{where}: levels names unknown cluster {cluster_id!r}")
            continue
        if cluster_id not in per_cluster:
            errors.append(f"{where}: levels names cluster {cluster_id!r}, "
                          "which has no client in this round")
        try:
            _level(cluster, level)
        except ScenarioError as exc:
            errors.append(f"{where}: {exc}")
    return errors


def plan_errors(scenario: Scenario, rounds: Sequence[RoundDecision], targets: Targets, *,
                previous_model: str | None = None, elapsed_s: float = 0.0,
                rounds_done: int = 0) -> list[str]:
    """Every reason why a round sequence is not a valid plan (empty list = valid).

    Checked, per round: the model id exists; a change of model is a switch
    listed in ``loss.switch`` (a missing pair is a disallowed switch); the
    round has at least one client; client ids exist and are not repeated; at
    most ``max_clients`` clients per cluster; ``levels`` maps **every** active
    cluster (one with a client in the round) to a valid index into its
    ``levels`` list and names **no other** cluster (a level for a cluster
    without clients in the round is an error, as is an unknown cluster).
    Version 2: a round whose set's label coverage lies outside the profile's
    measured range (``c_S < loss.min_coverage`` or ``u_S >
    loss.max_uncovered``) is an error (:func:`coverage_error`).
    Overall: the total time is within ``targets.deadline_s`` and the number of
    rounds is at most ``targets.max_rounds`` (when given).

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    rounds : sequence of RoundDecision
        The plan's rounds, in order.
    targets : Targets
        Deadline and round limit to check.
    previous_model : str, optional
        Model used just before the first round (re-planning mid-run); the first
        round is then checked as a switch from it.
    elapsed_s : float, optional
        Time already spent (re-planning); counted against the deadline.
    rounds_done : int, optional
        Rounds already run (re-planning); counted against ``max_rounds``.

    Returns
    -------
    list of str
        One human-readable line per problem.
    """
    errors: list[str] = []
    if previous_model is not None and previous_model not in scenario.loss.run:
        errors.append(f"previous model: unknown model id {previous_model!r}")
    previous = previous_model
    structurally_ok = not errors
    for index, decision in enumerate(rounds):
        round_errs = _round_errors(scenario, index, decision, previous)
        structurally_ok = structurally_ok and not round_errs
        errors.extend(round_errs)
        previous = decision.model
    if targets.max_rounds is not None and rounds_done + len(rounds) > targets.max_rounds:
        errors.append(f"plan has {rounds_done + len(rounds)} rounds, "
                      f"max_rounds is {targets.max_rounds}")
    if structurally_ok:
        total = elapsed_s + sum(round_time(scenario, d) for d in rounds)
        if total > targets.deadline_s * (1.0 + _DEADLINE_RTOL):
            errors.append(f"total time {total:.6g} s exceeds the deadline "
                          f"{targets.deadline_s:.6g} s")
    return errors


# ---------------------------------------------------------------------------
# Loss Monte Carlo
# ---------------------------------------------------------------------------
def simulate_final_losses(scenario: Scenario, rounds: Sequence[RoundDecision], n: int,
                          rng: np.random.Generator | int | None,
                          start_loss: float | np.ndarray | None = None,
                          previous_model: str | None = None, judged: bool = True,
                          previous_clients: Sequence[str] | None = None) -> np.ndarray:
    """Sample the final loss of ``n`` independent trajectories of a round sequence.

    Exactly the contract's loss semantics: per round with model ``m`` after
    model ``p``, (1) if ``p != m``, ``L += Y ~ Normal(switch[p->m])``; (2)
    ``L -= X ~ Normal(mu_m(L) r**a, sigma_m(L) r**(-b))`` with
    ``r = sum(num_samples in S) / reference_samples``; (3) ``L = max(L, 0)``.
    Loops over rounds, with arrays over trajectories.

    Version 2 (docs/CONTRACT_V2.md): ``r`` is ``r_eff = c_S * r`` on a set
    whose clients all report label histograms, ``sigma_m`` is the walk's
    ``sqrt(std**2 - 2 eval_std**2)``, and the final loss goes through
    :func:`judged_losses` (unseen-class term of the last set, one draw of
    evaluation noise) -- unless ``judged`` is False, which returns the walk
    (to continue it round by round). A version-1 scenario has no final map.
    With ``loss.set_shift`` a round whose client set differs from the
    previous round's (the first round: from ``previous_clients``) first adds
    ``Y = (1 - c_S) * Normal(set_shift.mean, set_shift.std)``, after a model
    switch's jump.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    rounds : sequence of RoundDecision
        The rounds to simulate (only ``model`` and ``clients`` matter).
    n : int
        Number of trajectories (>= 1).
    rng : numpy.random.Generator or int or None
        Random source (an int is used as a seed).
    start_loss : float or numpy.ndarray, optional
        Initial loss: a scalar for all trajectories or an array of shape
        ``(n,)`` with one initial loss per trajectory (re-planning with an
        uncertain current loss). Default ``loss.initial``.
    previous_model : str, optional
        Model of the round before the first one (re-planning); the first
        round then switches from it if it differs.
    judged : bool, optional
        Apply the final map (default); False returns the walk's last losses.
    previous_clients : sequence of str, optional
        Client set the model was last trained on (re-planning, or continuing
        a walk); default every client of the scenario (the federated
        exploration's set). Only read with ``loss.set_shift``.

    Returns
    -------
    numpy.ndarray
        Shape ``(n,)``, the final losses (>= 0).

    Raises
    ------
    ScenarioError
        On unknown ids, an empty round, a disallowed switch or a bad
        ``start_loss`` shape.
    """
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    final = None
    for losses in iter_round_losses(scenario, rounds, n, rng, start_loss, previous_model,
                                    previous_clients=previous_clients):
        final = losses
    if final is None:  # no round: the start loss is judged (version 2: with its judged error)
        start = _start_array(scenario, n, start_loss)
        return judged_losses(scenario, None, start, rng) if judged else start
    return judged_losses(scenario, rounds[-1], final, rng) if judged else final


#: Quantile points of the Student-t oscillation that :func:`judged_probability` averages over.
T_QUADRATURE = 32


@dataclass(frozen=True)
class FinalMap:
    """What turns the walk's last loss ``L_K`` into the loss the targets judge (version 2).

    ``max(J + O + E, 0)`` with ``J = (1 - u_S) * L_K + u_S * F``, the
    oscillation ``O`` of standard deviation ``eval_std_m(L_K) * r_S**-b``
    (normal, or Student-t with ``eval_dof`` degrees of freedom scaled to that
    standard deviation) and the judged error ``E ~ Normal(0, judged_error *
    max(J, 0))`` (``S`` and ``m`` the last round's set and model, ``r_S`` its
    effective data ratio; docs/CONTRACT_V2.md).
    """

    uncovered: float
    floor: float
    eval_profile: Any | None  # RunProfile with eval_std, or None (no oscillation)
    eval_scale: float = 1.0   # r_S**-b of the last round's set
    judged_error: float = 0.0
    dof: float | None = None  # Student-t oscillation (None: normal)

    def mean_part(self, walk: np.ndarray) -> np.ndarray:
        """``(1 - u_S) * L_K + u_S * F`` (a new array)."""
        return coverage_math.with_unseen_classes(walk, self.uncovered, self.floor)

    def oscillation_std(self, walk: np.ndarray) -> np.ndarray | None:
        """Standard deviation of ``O`` per trajectory (None without oscillation)."""
        if self.eval_profile is None:
            return None
        profile = self.eval_profile
        return _interp(walk, profile.levels, profile.eval_std) * self.eval_scale

    def judged_std(self, walk: np.ndarray) -> np.ndarray | None:
        """Standard deviation of ``E`` per trajectory (None without a judged error)."""
        if self.judged_error <= 0.0:
            return None
        return np.sqrt(self.judged_error * np.maximum(self.mean_part(walk), 0.0))

    def noise_std(self, walk: np.ndarray) -> np.ndarray | None:
        """Standard deviation of ``O + E`` per trajectory (None when there is no noise term)."""
        parts = [v for v in (self.oscillation_std(walk), self.judged_std(walk)) if v is not None]
        if not parts:
            return None
        return np.sqrt(sum(v * v for v in parts))

    def standard_oscillation(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Draws of ``O / std(O)``: standard normal (read-only, see :mod:`.draws`), or Student-t
        scaled to variance 1."""
        if self.dof is None:
            return draws.standard_normal(rng, shape)
        return draws.standard_t(rng, self.dof, shape) * math.sqrt((self.dof - 2.0) / self.dof)


def final_map(scenario: Scenario, last: RoundDecision | None) -> FinalMap | None:
    """The final map after a plan whose last round is ``last`` (None: a plan of no round);
    None when it is the identity (version 1)."""
    loss = scenario.loss
    judged = float(loss.judged_error or 0.0)
    if last is None:
        return FinalMap(0.0, 0.0, None, 1.0, judged) if judged > 0.0 else None
    profile = loss.run.get(last.model)
    noisy = profile is not None and profile.eval_std is not None and any(v > 0 for v in profile.eval_std)
    cov = set_coverage(scenario, last.clients)
    unseen = cov is not None and loss.coverage_floor_loss is not None and cov[1] > 0.0
    if not (noisy or unseen or judged > 0.0):
        return None
    scale = effective_ratio(scenario, last.clients) ** (-loss.data_exponent_std) if noisy else 1.0
    return FinalMap(min(max(cov[1], 0.0), 1.0) if unseen else 0.0,  # type: ignore[index]
                    float(loss.coverage_floor_loss) if unseen else 0.0,
                    profile if noisy else None, float(scale), judged, loss.eval_dof if noisy else None)


def judged_losses(scenario: Scenario, last: RoundDecision | None, walk: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """The judged final losses of trajectories whose walk ended at ``walk`` (see :class:`FinalMap`).

    ``walk`` itself when the map is the identity (version 1: no draw is
    taken from ``rng``), else a new array. A normal oscillation and the judged
    error take one standard-normal draw per trajectory together; a Student-t
    oscillation takes its own draw, then the judged error one normal draw.
    """
    fmap = final_map(scenario, last)
    if fmap is None:
        return walk
    out = fmap.mean_part(walk)
    if fmap.dof is None:
        std = fmap.noise_std(walk)
        if std is not None:
            out += std * draws.standard_normal(rng, walk.shape)
    else:
        out += fmap.oscillation_std(walk) * fmap.standard_oscillation(rng, walk.shape)
        judged = fmap.judged_std(walk)
        if judged is not None:
            out += judged * draws.standard_normal(rng, walk.shape)
    return np.maximum(out, 0.0, out=out)


def judged_probability(scenario: Scenario, last: RoundDecision | None, walk: np.ndarray,
                       target: float) -> float:
    """``P[judged loss <= target]`` given the walk's last losses, without drawing the noise.

    The mean over trajectories of ``P[O + E <= target - J]`` (see
    :class:`FinalMap`): ``Phi`` of the standardised gap for normal noise, and
    for a Student-t oscillation the mean of that over ``T_QUADRATURE`` quantile
    points of the t distribution (an unbiased, lower-variance estimate of the
    probability :func:`judged_losses` samples, up to the quadrature's error).
    """
    return float(judged_probabilities(scenario, last, np.reshape(walk, (1, -1)), target)[0])


def judged_probabilities(scenario: Scenario, last: RoundDecision | None, walks: np.ndarray,
                         target: float) -> np.ndarray:
    """:func:`judged_probability` of every row of ``walks`` (2-D), the final map built once.

    Each row's figure equals :func:`judged_probability` of that row bit for
    bit (the same operations on the same row); only the final map and the
    quadrature points, which depend on ``last`` alone, are shared.
    """
    fmap = final_map(scenario, last)
    if fmap is None:
        return np.array([float(np.mean(walk <= target)) for walk in walks])
    if target < 0.0:
        return np.zeros(len(walks))
    points = _quadrature_points(fmap)
    return np.array([float(np.mean(_judged_terms(fmap, walk, target, points))) for walk in walks])


def judged_reaches(scenario: Scenario, last: RoundDecision | None, walks: np.ndarray, target: float,
                   need: float) -> np.ndarray:
    """``judged_probabilities(scenario, last, walks, target) >= need``, row by row, deciding early.

    Each row's probability is a mean of terms ``ndtr(z)`` in [0, 1] (one per
    trajectory, or per trajectory and quadrature point). The terms are
    computed a slice of trajectories at a time (``DECIDE_SLICES`` slices),
    ``ndtr`` only off its exact tails (:func:`_ndtr`); once the terms summed
    so far put the mean at least ``DECIDE_MARGIN`` above ``need`` (the rest
    counted as 0) or below it (the rest counted as 1), the row is decided. A
    row the bounds leave open is judged on the mean of all its terms, the
    same numbers :func:`judged_probabilities` averages, so every answer
    equals that comparison's.
    """
    fmap = final_map(scenario, last)
    if fmap is None or target < 0.0:
        return judged_probabilities(scenario, last, walks, target) >= need
    points = _quadrature_points(fmap)
    return np.array([_row_reaches(fmap, walk, target, points, need) for walk in walks], dtype=bool)


#: Slices of a row's trajectories between the early decisions of :func:`judged_reaches`.
DECIDE_SLICES = 8
#: How far a bound must clear the threshold to decide a row early: far above the rounding
#: error of a sum in another order (about 1e-16 times the number of terms).
DECIDE_MARGIN = 1e-9


def _row_reaches(fmap: FinalMap, walk: np.ndarray, target: float, points: np.ndarray | None,
                 need: float) -> bool:
    """Whether one walk's judged probability reaches ``need`` (see :func:`judged_reaches`)."""
    n = walk.size
    count = n * (1 if points is None else points.size)
    step = max(1, -(-n // DECIDE_SLICES))
    band = _open_bands(fmap, walk, target, points)
    low, high = (0.0, float(count)) if band is None else (float(band.first.sum()), float(band.stop.sum()))
    for lo in range(0, n + 1, step):
        if low / count >= need + DECIDE_MARGIN:
            return True
        if high / count < need - DECIDE_MARGIN:
            return False
        if lo >= n:
            break
        if band is None:
            z = _judged_scores(fmap, walk[lo:lo + step], target, points)
            ones = z >= NDTR_ONE
            values = ndtr(z[~(ones | (z <= NDTR_ZERO))])  # a NaN makes the bounds NaN
            low += float(np.count_nonzero(ones))
            high -= z.size - float(np.count_nonzero(ones))
        else:
            values = ndtr(band.scores(lo, lo + step, points))
            high -= values.size
        total = float(values.sum())
        low += total
        high += total
    # Within the margin of need: the mean of the terms, as judged_probabilities takes it.
    return float(np.mean(_judged_terms(fmap, walk, target, points))) >= need


#: How much larger than the judged spread a trajectory's gaps may be for :func:`_open_bands`: the
#: split then moves by less than 1e-6 in the standardised gap, far inside the margins of
#: NDTR_ONE and NDTR_ZERO (NaN and infinite gaps fail the test too).
SPLIT_SCALE = 1e9


@dataclass(frozen=True)
class _Bands:
    """Per trajectory of a walk, the quadrature points whose judged term is open (see :func:`_open_bands`)."""

    gap: np.ndarray
    osc: np.ndarray
    judged: np.ndarray
    first: np.ndarray   # terms before it are exactly 1
    stop: np.ndarray    # terms from it on are exactly 0

    def scores(self, lo: int, hi: int, points: np.ndarray) -> np.ndarray:
        """The standardised gaps of the open terms of trajectories ``lo:hi``, as :func:`_judged_scores`
        computes them (the same operations on the same numbers)."""
        first, sizes = self.first[lo:hi], self.stop[lo:hi] - self.first[lo:hi]
        rows = np.repeat(np.arange(lo, lo + first.size), sizes)
        starts = np.cumsum(sizes) - sizes
        cols = np.arange(rows.size) - np.repeat(starts - first, sizes)
        shifted = self.gap[rows] - self.osc[rows] * points[cols]
        return shifted / self.judged[rows]


def _open_bands(fmap: FinalMap, walk: np.ndarray, target: float, points: np.ndarray | None
                ) -> _Bands | None:
    """Where each trajectory's Student-t terms are neither exactly 1 nor exactly 0 (None: not known).

    With a positive oscillation and judged-error spread, a trajectory's
    standardised gap ``(gap - osc * p_j) / judged`` falls with the quadrature
    point ``p_j`` (ascending), so its terms are 1 up to a point, then open,
    then 0. Where a term's gap lies within rounding of :data:`NDTR_ONE` or
    :data:`NDTR_ZERO`, ``ndtr`` gives the same 1 or 0 on either side, so the
    split may be found by solving for ``p`` instead of computing every gap.
    The few trajectories without both spreads (a walk at loss 0 has none)
    are split by :func:`_split_unspread`.
    """
    if points is None or fmap.judged_error <= 0.0:
        return None
    gap = target - fmap.mean_part(walk)
    osc = fmap.oscillation_std(walk)
    judged = fmap.judged_std(walk)
    if osc is None or judged is None or not (np.all(osc >= 0.0) and np.all(judged >= 0.0)):  # NaN too
        return None
    spread = (osc > 0.0) & (judged > 0.0)
    every = bool(spread.all())
    # Rounding moves a solved split by a few ulps of these magnitudes: far below a judged spread.
    fits = np.abs(gap) + osc * float(np.abs(points).max()) < SPLIT_SCALE * judged
    if not (fits.all() if every else (fits | ~spread).all()):
        return None
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # the unspread are set apart
        first = np.searchsorted(points, (gap - NDTR_ONE * judged) / osc, side="right")
        stop = np.maximum(np.searchsorted(points, (gap - NDTR_ZERO * judged) / osc, side="left"), first)
    if not every and not _split_unspread(gap, osc, judged, points, spread, first, stop):
        return None
    return _Bands(gap, osc, judged, first, stop)


def _split_unspread(gap: np.ndarray, osc: np.ndarray, judged: np.ndarray, points: np.ndarray,
                    spread: np.ndarray, first: np.ndarray, stop: np.ndarray) -> bool:
    """Set ``first`` and ``stop`` of the trajectories without both spreads (:func:`_open_bands`), in
    place; False where a step's ones do not come first.

    Without a judged spread a term is the step ``gap - osc * p_j >= 0``
    (:func:`_standard_scores`), computed here as :func:`_judged_scores` does;
    it falls with ``p_j`` (``osc >= 0``), so its ones come first (checked)
    and no term is open. Without an oscillation but with a judged spread
    every term is left open (computed as before).
    """
    rows = np.nonzero(~spread)[0]
    first[rows], stop[rows] = 0, points.size
    steps = rows[judged[rows] == 0.0]
    if steps.size:
        ones = (gap[steps, None] - osc[steps, None] * points[None, :]) >= 0.0
        count = np.count_nonzero(ones, axis=1)
        if not np.array_equal(ones, np.arange(points.size)[None, :] < count[:, None]):
            return False
        first[steps] = stop[steps] = count
    return True


def _quadrature_points(fmap: FinalMap) -> np.ndarray | None:
    """The Student-t oscillation's standardised quantile points (None: normal noise)."""
    if fmap.dof is None:
        return None
    points = stdtrit(fmap.dof, (np.arange(T_QUADRATURE) + 0.5) / T_QUADRATURE)
    return points * math.sqrt((fmap.dof - 2.0) / fmap.dof)


def _judged_terms(fmap: FinalMap, walk: np.ndarray, target: float, points: np.ndarray | None) -> np.ndarray:
    """The terms whose mean is ``P[judged loss <= target]`` of one walk under a non-identity final map:
    one per trajectory, or per quadrature point (rows) and trajectory (columns)."""
    return _ndtr(_judged_scores(fmap, walk, target, points))


def _judged_scores(fmap: FinalMap, walk: np.ndarray, target: float, points: np.ndarray | None) -> np.ndarray:
    """The standardised gaps ``z`` of :func:`_judged_terms` (the terms are ``ndtr(z)``)."""
    gap = target - fmap.mean_part(walk)
    if points is None:
        return _standard_scores(gap, fmap.noise_std(walk))
    osc = fmap.oscillation_std(walk)
    judged = fmap.judged_std(walk)
    shifted = gap[None, :] - osc[None, :] * points[:, None]
    return _standard_scores(shifted, None if judged is None else judged[None, :])


def _normal_below(gap: np.ndarray, std: np.ndarray | None) -> np.ndarray:
    """``P[N(0, std**2) <= gap]`` elementwise (a step function where ``std`` is 0 or None)."""
    return _ndtr(_standard_scores(gap, std))


def _standard_scores(gap: np.ndarray, std: np.ndarray | None) -> np.ndarray:
    """``gap / std``, and +-inf by the sign of ``gap`` (NaN: -inf) where ``std`` is 0 or None."""
    if std is None:
        return np.where(gap >= 0.0, np.inf, -np.inf)
    positive = std > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        if positive.all():
            return np.asarray(gap / std)
        z = np.asarray(gap / np.where(positive, std, 1.0))
    # Only the few elements without spread get the step, not a whole array of infinities.
    step = np.broadcast_to(~positive, z.shape)
    z[step] = np.where(np.broadcast_to(gap, z.shape)[step] >= 0.0, np.inf, -np.inf)
    return z


#: ``ndtr`` is exactly 1.0 from about 8.29 up and exactly 0.0 from about -37.68 down (the
#: complement underflows): beyond these, with a margin, the step gives the same doubles.
NDTR_ONE = 8.5
NDTR_ZERO = -38.5


def _ndtr(z: np.ndarray) -> np.ndarray:
    """``scipy.special.ndtr(z)`` bit for bit, evaluated only where it is neither exactly 0 nor 1.

    A judged error far smaller than the gaps puts most terms of
    :func:`_judged_terms` deep in the tails, where the step is the answer.
    """
    inside = ~((z >= NDTR_ONE) | (z <= NDTR_ZERO))  # NaN stays inside: ndtr gives it back
    count = int(np.count_nonzero(inside))
    if 2 * count > z.size:
        return ndtr(z)
    out = (z >= NDTR_ONE).astype(float)
    if count:
        out[inside] = ndtr(z[inside])
    return out


#: Fewer values than this are interpolated by ``np.interp`` (its search beats the fused form's passes).
FUSED_MIN_SIZE = 4096


def _interp(x: np.ndarray, xp: Sequence[float], fp: Sequence[float]) -> np.ndarray:
    """``np.interp(x, xp, fp)`` (the same numbers): ``slope_j * (x - x_j) + y_j`` of each ``x``'s
    segment (see :class:`_InterpTable`), by that one formula where every ``x`` lies in one
    segment, with a segment search over the levels ``x`` spans for many values; few or 2-d
    ``x``, NaN, or levels with a non-finite slope go to ``np.interp`` itself."""
    x = np.asarray(x, dtype=float)
    if x.ndim == 1 and x.size >= 64 and len(xp) > 1:
        lv, values, slope = _slopes(tuple(xp), tuple(fp))
        xc = np.clip(x, lv[0], lv[-1])
        span = _span(xc, lv) if slope is not None else None
        if span is not None and span[0] == span[1]:
            return slope[span[0]] * (xc - lv[span[0]]) + values[span[0]]
        if span is not None and x.size >= FUSED_MIN_SIZE:
            seg = _segments(xc, lv, span)
            out = slope.take(seg)
            out *= xc - lv.take(seg)
            out += values.take(seg)
            return out
    return np.interp(x, xp, fp)


@functools.lru_cache(maxsize=64)
def _slopes(xp: tuple[float, ...], fp: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The levels, the values and ``np.interp``'s slope of every segment (0 after the last level;
    None where a slope is not finite), read only."""
    lv, values = np.asarray(xp, dtype=float), np.asarray(fp, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.append((values[1:] - values[:-1]) / (lv[1:] - lv[:-1]), 0.0)
    for shared in (lv, values, slope):  # kept and shared between calls: read only
        shared.flags.writeable = False
    return lv, values, (slope if np.all(np.isfinite(slope)) else None)


def _span(xc: np.ndarray, lv: np.ndarray) -> tuple[int, int] | None:
    """The segments of the smallest and largest ``xc`` (clamped to the ascending levels ``lv``;
    segment ``j`` holds ``lv[j] <= xc < lv[j+1]``, the last level its own); None when ``xc`` is
    empty or holds NaN."""
    if xc.size == 0:
        return None
    low, high = xc.min(), xc.max()
    if np.isnan(low) or np.isnan(high):
        return None
    return int(np.searchsorted(lv, low, side="right")) - 1, int(np.searchsorted(lv, high, side="right")) - 1


def _segments(xc: np.ndarray, lv: np.ndarray, span: tuple[int, int]) -> np.ndarray:
    """The segment of every clamped ``xc`` within ``span`` (:func:`_span`), compared only with the
    levels between its smallest and largest value."""
    first, last = span
    if last > np.iinfo(np.uint8).max:
        seg = np.full(xc.shape, first, dtype=np.intp)
        for k in range(first + 1, last + 1):
            seg += xc >= lv[k]
        return seg
    # Counted in bytes into one reused mask: a quarter of the memory traffic of intp counts.
    count = np.full(xc.shape, first, dtype=np.uint8)
    above = np.empty(xc.shape, dtype=bool)
    for k in range(first + 1, last + 1):
        np.greater_equal(xc, lv[k], out=above)
        np.add(count, above.view(np.uint8), out=count)
    return count.astype(np.intp)  # take() is faster with intp indices


class _InterpTable:
    """``np.interp`` of a run profile's mean and std at once, with the same results bit for bit.

    ``np.interp`` returns the end values outside ``levels``, the node value on
    a node and ``slope_j * (x - x_j) + y_j`` inside segment ``j``, with
    ``slope_j = (y_{j+1} - y_j) / (x_{j+1} - x_j)``. Clamping ``x`` to the
    levels and giving the last node a zero slope reproduces all three cases
    with one segment search for every profile. The search compares ``x`` only
    with the levels between its smallest and largest value: a walk's losses
    crowd into a few segments, so that costs a few passes whatever the
    number of levels (a binary search per element costs more than the whole
    interpolation).
    """

    def __init__(self, levels: Sequence[float], mean: Sequence[float], std: Sequence[float],
                 eval_std: Sequence[float] | None = None) -> None:
        self.levels = np.asarray(levels, dtype=float)
        self.mean = np.asarray(mean, dtype=float)
        self.std = np.asarray(std, dtype=float)
        dx = self.levels[1:] - self.levels[:-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.mean_slope = np.append((self.mean[1:] - self.mean[:-1]) / dx, 0.0)
            self.std_slope = np.append((self.std[1:] - self.std[:-1]) / dx, 0.0)
        # Version 2: the walk's spread sqrt(std**2 - 2 eval_std**2) (None: eval_std is 0).
        self.eval = None
        if eval_std is not None and any(v > 0 for v in eval_std):
            self.eval = np.asarray(eval_std, dtype=float)
            with np.errstate(divide="ignore", invalid="ignore"):
                self.eval_slope = np.append((self.eval[1:] - self.eval[:-1]) / dx, 0.0)
        # np.interp steps around a non-finite slope (equal levels); the fused form does not.
        slopes = [self.mean_slope, self.std_slope] + ([self.eval_slope] if self.eval is not None else [])
        self.fused = bool(all(np.all(np.isfinite(v)) for v in slopes))

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inside = self._one_segment(x)
        if inside is not None:
            return inside
        if x.size < FUSED_MIN_SIZE:  # np.interp's search costs less than the fused form's passes
            return self._interp_each(x)
        lv = self.levels
        xc = np.clip(x, lv[0], lv[-1])
        seg = self._segments(xc)
        if seg is None:  # NaN among the losses, or levels np.interp treats apart
            return self._interp_each(x)
        t = xc - lv.take(seg)
        mu = self.mean_slope.take(seg)
        mu *= t
        mu += self.mean.take(seg)
        sigma = self.std_slope.take(seg)
        sigma *= t
        sigma += self.std.take(seg)
        if self.eval is not None:
            ev = self.eval_slope.take(seg) * t + self.eval.take(seg)
            sigma = np.sqrt(np.maximum(sigma * sigma - 2.0 * ev * ev, 0.0))
        return mu, sigma

    def _segments(self, xc: np.ndarray) -> np.ndarray | None:
        """:func:`_segments` of the clamped ``xc``; None on NaN or levels with a non-finite slope."""
        span = _span(xc, self.levels) if self.fused else None
        return None if span is None else _segments(xc, self.levels, span)

    def _interp_each(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``np.interp`` per profile (NaN among the losses, or levels with a non-finite slope)."""
        mu = np.interp(x, self.levels, self.mean)
        sigma = np.interp(x, self.levels, self.std)
        if self.eval is not None:
            ev = np.interp(x, self.levels, self.eval)
            sigma = np.sqrt(np.maximum(sigma * sigma - 2.0 * ev * ev, 0.0))
        return mu, sigma

    def _one_segment(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``np.interp``'s ``slope_j * (x - x_j) + y_j`` of segment ``j`` when every ``x`` lies in
        ``[x_j, x_{j+1})`` (on ``x_j`` it is ``y_j``, as ``np.interp`` returns); else None (NaN too)."""
        if x.size == 0 or not self.fused:
            return None
        lv = self.levels
        low, high = x.min(), x.max()
        j = int(np.searchsorted(lv, low, side="right")) - 1
        if not (0 <= j < lv.size - 1 and lv[j] <= low and high < lv[j + 1]):
            return None
        t = x - lv[j]
        mu = self.mean_slope[j] * t + self.mean[j]
        sigma = self.std_slope[j] * t + self.std[j]
        if self.eval is not None:
            ev = self.eval_slope[j] * t + self.eval[j]
            sigma = np.sqrt(np.maximum(sigma * sigma - 2.0 * ev * ev, 0.0))
        return mu, sigma


def walk_moments(profile: Any, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``profile.mean_at(losses)`` and ``profile.walk_std_at(losses)``, the same numbers, from one
    segment search (:class:`_InterpTable`, kept per profile)."""
    table = _profile_table(profile)
    if table is None:
        return profile.mean_at(losses), profile.walk_std_at(losses)
    return table(np.asarray(losses, dtype=float))


@functools.lru_cache(maxsize=64)
def _profile_table(profile: Any) -> _InterpTable | None:
    """The profile's table; None for an all-zero ``eval_std`` (the walk's spread is then
    ``sqrt(std**2)``, which the table does not compute)."""
    if profile.eval_std is not None and not any(v > 0 for v in profile.eval_std):
        return None
    return _InterpTable(profile.levels, profile.mean, profile.std, profile.eval_std)


def _start_array(scenario: Scenario, n: int,
                 start_loss: float | np.ndarray | None) -> np.ndarray:
    """A fresh array of the ``n`` initial losses (see :func:`simulate_final_losses`)."""
    if start_loss is None:
        return np.full(n, scenario.loss.initial, dtype=float)
    if np.ndim(start_loss) == 0 or np.shape(start_loss) == (n,):
        return np.array(np.broadcast_to(np.asarray(start_loss, dtype=float), (n,)))
    raise ScenarioError(f"start_loss: expected a scalar or shape ({n},), "
                        f"got shape {np.shape(start_loss)}")


def iter_round_losses(scenario: Scenario, rounds: Sequence[RoundDecision], n: int,
                      rng: np.random.Generator | int | None,
                      start_loss: float | np.ndarray | None = None,
                      previous_model: str | None = None,
                      tables: dict[tuple[str, tuple[str, ...]], tuple[Any, ...]] | None = None,
                      previous_clients: Sequence[str] | None = None) -> Iterator[np.ndarray]:
    """The walk's losses of ``n`` trajectories after each round (see :func:`simulate_final_losses`).

    These are the losses before the final map (:func:`judged_losses`, version 2).

    Yields one array per round: the **same** array, updated in place, so a
    caller that keeps a round's losses must copy them. Same parameters,
    random stream and errors as :func:`simulate_final_losses`, which is this
    generator run to its end. Per distinct ``(model, clients)`` the
    interpolation table and the data-ratio scales are computed once and kept
    in ``tables`` (pass the same dict to later calls **on the same scenario**
    to reuse them).
    """
    if n < 1:
        raise ScenarioError(f"number of trajectories must be >= 1, got {n!r}")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    losses = _start_array(scenario, n, start_loss)
    if tables is None:
        tables = {}
    previous = previous_model
    shift = scenario.loss.set_shift
    trained_on = frozenset(c.id for c in scenario.clients) if previous_clients is None \
        else frozenset(previous_clients)
    # Every trajectory starts from one known loss: until a draw is added they are all equal.
    equal = start_loss is None or np.ndim(start_loss) == 0
    for index, decision in enumerate(rounds):
        model = decision.model
        jump = _model_jump(scenario, index, decision, previous)
        if jump is not None:
            _add_normal(losses, jump.mean, jump.std, rng)
        interp, mean_scale, std_scale, members, gap = _round_table(scenario, model, decision.clients, tables)
        if shift is not None and members != trained_on:
            if gap > 0.0:
                _add_normal(losses, shift.mean * gap, shift.std * gap, rng)
            trained_on = members
        mu, sigma = _profile_at(interp, losses, equal and jump is None and shift is None)
        equal = False
        # L -= mu * r**a + sigma * r**-b * X, in place, same operation order.
        x = draws.standard_normal(rng, len(losses))
        sigma *= std_scale
        sigma *= x
        mu *= mean_scale
        mu += sigma
        losses -= mu
        np.maximum(losses, 0.0, out=losses)
        previous = model
        yield losses


def _profile_at(interp: Any, losses: np.ndarray, equal: bool) -> tuple[np.ndarray, np.ndarray]:
    """``interp(losses)`` (new arrays); where every loss is ``equal``, from the first one alone
    (interpolation is elementwise: the same numbers)."""
    if not equal:
        return interp(losses)
    mu, sigma = interp(losses[:1])
    return np.full(losses.shape, mu[0]), np.full(losses.shape, sigma[0])


def _model_jump(scenario: Scenario, index: int, decision: RoundDecision, previous: str | None) -> Any:
    """The switch profile of round ``index`` (None: no switch); a broken round raises ScenarioError."""
    if not decision.clients:
        raise ScenarioError(f"round {index}: no clients")
    model = decision.model
    if model not in scenario.loss.run:
        raise ScenarioError(f"round {index}: unknown model id {model!r}")
    if previous is None or previous == model:
        return None
    jump = scenario.loss.switch.get((previous, model))
    if jump is None:
        raise ScenarioError(f"round {index}: switch {previous!r} -> {model!r} "
                            "is not allowed (no such pair in loss.switch)")
    return jump


def _add_normal(losses: np.ndarray, mean: float, std: float, rng: np.random.Generator) -> None:
    """``L += mean + std * Y`` in place, ``Y`` standard normal (same operations as the formula)."""
    y = draws.standard_normal(rng, len(losses)) * std
    y += mean
    losses += y


def _round_table(scenario: Scenario, model: str, clients: Sequence[str],
                 tables: dict[tuple[str, tuple[str, ...]], tuple[Any, ...]]) -> tuple[Any, ...]:
    """Per ``(model, clients)``, computed once: the profile's interpolation table, ``r**a``,
    ``r**-b``, the set (to detect a change of set) and its coverage gap ``1 - c_S``."""
    key = (model, clients if isinstance(clients, tuple) else tuple(clients))
    table = tables.get(key)
    if table is None:
        profile = scenario.loss.run[model]
        r = effective_ratio(scenario, clients)
        a, b = scenario.loss.data_exponent_mean, scenario.loss.data_exponent_std
        table = (_InterpTable(profile.levels, profile.mean, profile.std, profile.eval_std),
                 r ** a, r ** (-b), frozenset(key[1]), coverage_gap(scenario, key[1]))
        tables[key] = table
    return table


def empirical_quantile(losses: np.ndarray, prob: float, axis: int = -1) -> np.ndarray:
    """Empirical ``prob``-quantile along ``axis``: the smallest ``q`` with ``mean(losses <= q) >= prob``.

    The inverted-CDF definition (no interpolation) makes quantile and
    probability agree exactly: ``quantile <= L*`` if and only if the share of
    losses ``<= L*`` is at least ``prob``. NaN losses count as +inf (failures).
    """
    values = np.where(np.isnan(losses), np.inf, np.asarray(losses, dtype=float))
    return np.quantile(values, prob, axis=axis, method="inverted_cdf")


def evaluate_plan(scenario: Scenario, rounds: Sequence[RoundDecision], targets: Targets,
                  n: int = 20000, seed: int = 0) -> dict[str, Any]:
    """Check a plan and estimate its dependability by Monte Carlo.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    rounds : sequence of RoundDecision
        The plan's rounds.
    targets : Targets
        Target loss, probability, deadline and round limit.
    n : int, optional
        Monte Carlo trajectories (the contract requires >= 20,000 to call a
        plan dependable).
    seed : int, optional
        Seed of the Monte Carlo.

    Returns
    -------
    dict
        ``valid`` (no errors), ``errors`` (see :func:`plan_errors`),
        ``probability`` (empirical ``P[L_K <= target_loss]``),
        ``probability_stderr`` (its Monte Carlo standard error),
        ``loss_quantile`` (empirical ``target_prob``-quantile of the final
        loss, see :func:`empirical_quantile`), ``cost_joules``, ``time_s``,
        ``rounds`` (number of rounds), ``dependable`` (valid and probability
        >= target_prob) and ``trajectories``. When the rounds are structurally
        broken (unknown ids, disallowed switch, missing level, ...) the figures
        that cannot be computed are ``None``; deadline and ``max_rounds``
        violations still get all figures.
    """
    if n < 1:
        raise ScenarioError(f"number of trajectories must be >= 1, got {n!r}")
    errors = plan_errors(scenario, rounds, targets)
    result: dict[str, Any] = {
        "valid": not errors, "errors": errors, "probability": None, "loss_quantile": None,
        "cost_joules": None, "time_s": None, "rounds": len(rounds),
        "dependable": False, "trajectories": n,
    }
    try:
        cost, time_s = plan_totals(scenario, rounds)
        losses = simulate_final_losses(scenario, rounds, n, np.random.default_rng(seed))
    except ScenarioError:
        return result
    probability = float(np.mean(losses <= targets.target_loss))
    quantile = float(empirical_quantile(losses, targets.target_prob))
    result.update(probability=probability,
                  probability_stderr=math.sqrt(probability * (1.0 - probability) / n),
                  loss_quantile=quantile if math.isfinite(quantile) else None,
                  cost_joules=cost, time_s=time_s,
                  dependable=bool(not errors and probability >= targets.target_prob))
    return result
