"""Predicted pi-quantile of the final loss: Gaussian moment propagation.

The contract's loss dynamics (DESIGN.md section 3) are, per round with model
``m`` after model ``p``::

    L += Y,  Y ~ N(sw_mean, sw_std**2)                       (only if p != m)
    L -= X,  X ~ N(mu_m(L) r**a, (sigma_m(L) r**-b)**2)
    L  = max(L, 0)

We track only the mean ``M`` and variance ``V`` of ``L`` and propagate them
round by round:

* **switch** -- exact: ``M += sw_mean``, ``V += sw_std**2`` (no clamp
  before the run, as in the contract);
* **run** -- ``mu_m`` and ``sigma_m`` are linearised around the current mean,
  ``mu(L) ~ mu(M) + mu'(M)(L - M)`` and ``sigma(L) ~ sigma(M) + sigma'(M)(L - M)``
  (``mu'``, ``sigma'`` are the slopes of the piecewise-linear profiles, 0
  outside their ``levels``), giving ``M' = M - mu(M) r**a`` and
  ``V' = (1 - mu'(M) r**a)**2 V + (sigma(M)**2 + sigma'(M)**2 V) r**(-2b)``;
* **clamp** -- exact moments of the rectified Gaussian ``max(N(M', V'), 0)``.

The pi-quantile is then ``q = M + kappa * sqrt(V)`` with
``kappa = Phi^-1(pi)`` (``guarantee="gaussian"``) or, distribution-free,
``kappa = sqrt(pi / (1 - pi))`` (``guarantee="cantelli"``: Cantelli's one-sided
inequality ``P[L - M >= t] <= V / (V + t**2)`` holds for any distribution
with these two moments). The propagation itself is an approximation
(linearisation, Gaussian closure of the clamp); the planner therefore checks
every plan by Monte Carlo of the exact semantics before returning it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from depl_fl.errors import ScenarioError
from depl_fl.plan import RoundDecision
from depl_fl.scenario import Scenario

GUARANTEES = ("gaussian", "cantelli")
_SQRT_2PI = math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class PlanStart:
    """Where (re-)planning starts: the current loss distribution and what was used so far.

    Parameters
    ----------
    loss_mean : float
        Mean of the current loss.
    loss_std : float
        Standard deviation of the current loss (0 for a known loss).
    previous_model : str or None
        Model of the last round run (the first planned round switches from it).
    elapsed_s : float
        Time already spent; the remaining deadline is ``deadline_s - elapsed_s``.
    rounds_done : int
        Rounds already run; the remaining rounds are ``max_rounds - rounds_done``.
    """

    loss_mean: float
    loss_std: float = 0.0
    previous_model: str | None = None
    elapsed_s: float = 0.0
    rounds_done: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.loss_mean) and self.loss_mean >= 0.0):
            raise ScenarioError(f"start: loss_mean must be a finite number >= 0, got {self.loss_mean!r}")
        if not (math.isfinite(self.loss_std) and self.loss_std >= 0.0):
            raise ScenarioError(f"start: loss_std must be a finite number >= 0, got {self.loss_std!r}")
        if self.elapsed_s < 0.0 or self.rounds_done < 0:
            raise ScenarioError("start: elapsed_s and rounds_done must be >= 0")


def kappa(prob: float, guarantee: str = "gaussian") -> float:
    """Quantile multiplier: ``q = mean + kappa * std``.

    Parameters
    ----------
    prob : float
        Probability in (0, 1).
    guarantee : {"gaussian", "cantelli"}
        Gaussian quantile ``Phi^-1(prob)`` or Cantelli's ``sqrt(prob / (1 - prob))``.

    Returns
    -------
    float
        The multiplier.
    """
    if not 0.0 < prob < 1.0:
        raise ScenarioError(f"probability must be in (0, 1), got {prob!r}")
    if guarantee == "gaussian":
        return float(ndtri(prob))
    if guarantee == "cantelli":
        return math.sqrt(prob / (1.0 - prob))
    raise ScenarioError(f"--guarantee: unknown guarantee {guarantee!r} (choose from {', '.join(GUARANTEES)})")


class LossPropagator:
    """Moment propagation of the loss for one scenario (scalar and vectorised forms)."""

    def __init__(self, scenario: Scenario) -> None:
        self.a = scenario.loss.data_exponent_mean
        self.b = scenario.loss.data_exponent_std
        self.initial = scenario.loss.initial
        self.switch = {key: (sw.mean, sw.std ** 2) for key, sw in scenario.loss.switch.items()}
        self._profiles: dict[str, tuple[list[float], list[float], list[float],
                                        list[float], list[float]]] = {}
        for mid, prof in scenario.loss.run.items():
            lv, mu, sd = list(prof.levels), list(prof.mean), list(prof.std)
            dmu = [(mu[i + 1] - mu[i]) / (lv[i + 1] - lv[i]) for i in range(len(lv) - 1)]
            dsd = [(sd[i + 1] - sd[i]) / (lv[i + 1] - lv[i]) for i in range(len(lv) - 1)]
            self._profiles[mid] = (lv, mu, sd, dmu, dsd)
        self._table_cache: dict[tuple[str, ...], tuple[np.ndarray, ...]] = {}

    # -- scalar form (used inside the expanded graph, where it is fastest) ------
    def run_scalar(self, model: str, mean: float, var: float, r: float) -> tuple[float, float]:
        """One round of ``model`` on data ratio ``r``: new ``(mean, var)`` (floats)."""
        lv, mu, sd, dmu, dsd = self._profiles[model]
        if mean <= lv[0]:
            m_mu, m_sd, g_mu, g_sd = mu[0], sd[0], 0.0, 0.0
        elif mean >= lv[-1]:
            m_mu, m_sd, g_mu, g_sd = mu[-1], sd[-1], 0.0, 0.0
        else:
            i = bisect_right(lv, mean) - 1
            t = mean - lv[i]
            g_mu, g_sd = dmu[i], dsd[i]
            m_mu, m_sd = mu[i] + g_mu * t, sd[i] + g_sd * t
        ra, rb = r ** self.a, r ** (-2.0 * self.b)
        new_mean = mean - m_mu * ra
        new_var = (1.0 - g_mu * ra) ** 2 * var + (m_sd * m_sd + g_sd * g_sd * var) * rb
        return _rectify_scalar(new_mean, new_var)

    def switch_scalar(self, source: str, target: str, mean: float, var: float) -> tuple[float, float]:
        """Loss jump of a switch ``source -> target`` (KeyError if not allowed)."""
        sw_mean, sw_var = self.switch[(source, target)]
        return mean + sw_mean, var + sw_var  # the contract clamps only after the run

    # -- vectorised form (many data ratios / states at once) --------------------
    def run_array(self, model: str, mean: np.ndarray, var: np.ndarray,
                  r: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`run_scalar` over arrays of states and data ratios."""
        lv, mu, sd, dmu, dsd = self._profiles[model]
        lv_a = np.asarray(lv)
        m_mu = np.interp(mean, lv_a, mu)
        m_sd = np.interp(mean, lv_a, sd)
        if len(lv) > 1:
            seg = np.clip(np.searchsorted(lv_a, mean, side="right") - 1, 0, len(lv) - 2)
            inside = (mean > lv[0]) & (mean < lv[-1])
            g_mu = np.where(inside, np.asarray(dmu)[seg], 0.0)
            g_sd = np.where(inside, np.asarray(dsd)[seg], 0.0)
        else:
            g_mu = g_sd = np.zeros_like(mean)
        r = np.asarray(r, dtype=float)
        ra, rb = r ** self.a, r ** (-2.0 * self.b)
        new_mean = mean - m_mu * ra
        new_var = (1.0 - g_mu * ra) ** 2 * var + (m_sd ** 2 + g_sd ** 2 * var) * rb
        return _rectify_array(new_mean, new_var)

    def run_many(self, models: Sequence[str], which: np.ndarray, mean: np.ndarray,
                 var: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`run_array` for many models at once: element ``i`` runs ``models[which[i]]``.

        Gives bit-for-bit what calling :meth:`run_array` on each model's
        elements separately gives (same floating-point operations, including
        the per-model "far from the clamp" shortcut of the rectification), in
        one numpy pass instead of one per model.
        """
        lv, mu, sd, dmu, dsd, n_lv = self._tables(tuple(models))
        rows = which
        lvr = lv[rows]                                         # (n, L), padded with +inf
        below = mean < lvr[:, 0]
        seg = np.sum(mean[:, None] >= lvr, axis=1) - 1         # searchsorted(right) - 1
        last = n_lv[rows] - 1
        above = seg >= last
        seg_c = np.clip(seg, 0, np.maximum(last - 1, 0))
        x0 = lvr[np.arange(rows.size), seg_c]
        mu0, sd0 = mu[rows, seg_c], sd[rows, seg_c]
        g_mu_seg, g_sd_seg = dmu[rows, seg_c], dsd[rows, seg_c]
        # np.interp: left value below, right value at/above the last level, the
        # node's value exactly on a node, else slope * (x - x_j) + y_j.
        on_node = mean == x0
        t = mean - x0
        m_mu = np.where(on_node, mu0, g_mu_seg * t + mu0)
        m_sd = np.where(on_node, sd0, g_sd_seg * t + sd0)
        m_mu = np.where(below, mu[rows, 0], np.where(above, mu[rows, last], m_mu))
        m_sd = np.where(below, sd[rows, 0], np.where(above, sd[rows, last], m_sd))
        inside = (mean > lvr[:, 0]) & ~above
        g_mu = np.where(inside, g_mu_seg, 0.0)
        g_sd = np.where(inside, g_sd_seg, 0.0)
        r_a = np.asarray(r, dtype=float)
        ra, rb = r_a ** self.a, r_a ** (-2.0 * self.b)
        new_mean = mean - m_mu * ra
        new_var = (1.0 - g_mu * ra) ** 2 * var + (m_sd ** 2 + g_sd ** 2 * var) * rb
        # _rectify_array decides "nothing to do" per call, i.e. per model here.
        far = new_mean > 8.0 * np.sqrt(np.maximum(new_var, 0.0))
        near_count = np.bincount(rows, weights=~far, minlength=len(models))
        if not near_count.any():
            return new_mean, new_var
        r_mean, r_var = _rectify_array(new_mean, new_var, force=True)
        shortcut = (near_count == 0)[rows]
        return np.where(shortcut, new_mean, r_mean), np.where(shortcut, new_var, r_var)

    def _tables(self, models: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """Padded per-model arrays (levels, mean, std, slopes, level count) for :meth:`run_many`."""
        cached = self._table_cache.get(models)
        if cached is not None:
            return cached
        width = max(len(self._profiles[m][0]) for m in models)
        shape = (len(models), width)
        lv = np.full(shape, np.inf)
        mu, sd, dmu, dsd = (np.zeros(shape) for _ in range(4))
        n_lv = np.zeros(len(models), dtype=np.int64)
        for i, m in enumerate(models):
            p_lv, p_mu, p_sd, p_dmu, p_dsd = self._profiles[m]
            n = len(p_lv)
            lv[i, :n], mu[i, :n], sd[i, :n] = p_lv, p_mu, p_sd
            dmu[i, :n - 1], dsd[i, :n - 1] = p_dmu, p_dsd
            n_lv[i] = n
        cached = (lv, mu, sd, dmu, dsd, n_lv)
        self._table_cache[models] = cached
        return cached

    def switch_array(self, source: str, target: str, mean: np.ndarray,
                     var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`switch_scalar`."""
        sw_mean, sw_var = self.switch[(source, target)]
        return mean + sw_mean, var + sw_var


def _rectify_scalar(mean: float, var: float) -> tuple[float, float]:
    """Mean and variance of ``max(N(mean, var), 0)``."""
    if var <= 0.0:
        return max(mean, 0.0), 0.0
    std = math.sqrt(var)
    alpha = mean / std
    if alpha > 8.0:
        return mean, var
    cdf = 0.5 * math.erfc(-alpha / math.sqrt(2.0))
    pdf = math.exp(-0.5 * alpha * alpha) / _SQRT_2PI
    m1 = mean * cdf + std * pdf
    m2 = (mean * mean + var) * cdf + mean * std * pdf
    return m1, max(m2 - m1 * m1, 0.0)


def _rectify_array(mean: np.ndarray, var: np.ndarray,
                   force: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`_rectify_scalar` (``force``: no shortcut when far from the clamp)."""
    std = np.sqrt(np.maximum(var, 0.0))
    if not force and np.all(mean > 8.0 * std):  # far from the clamp: nothing to do (the common case)
        return mean, var
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(std > 0, mean / np.where(std > 0, std, 1.0), np.sign(mean) * np.inf)
    cdf = ndtr(alpha)
    pdf = np.exp(-0.5 * np.minimum(alpha * alpha, 1e6)) / _SQRT_2PI
    m1 = mean * cdf + std * pdf
    m2 = (mean * mean + var) * cdf + mean * std * pdf
    out_var = np.maximum(m2 - m1 * m1, 0.0)
    return np.where(std > 0, m1, np.maximum(mean, 0.0)), np.where(std > 0, out_var, 0.0)


def start_moments(scenario: Scenario, start: PlanStart | None) -> tuple[float, float, str | None]:
    """``(mean, var, previous_model)`` at the start of planning."""
    if start is None:
        return scenario.loss.initial, 0.0, None
    if start.previous_model is not None and start.previous_model not in scenario.loss.run:
        raise ScenarioError(f"start: unknown previous model {start.previous_model!r}")
    return start.loss_mean, start.loss_std ** 2, start.previous_model


def propagate(scenario: Scenario, rounds: Sequence[RoundDecision],
              start: PlanStart | None = None,
              propagator: LossPropagator | None = None) -> tuple[float, float]:
    """Predicted ``(mean, var)`` of the final loss of a round sequence."""
    prop = propagator or LossPropagator(scenario)
    mean, var, previous = start_moments(scenario, start)
    ratios: dict[tuple[str, ...], float] = {}
    for index, decision in enumerate(rounds):
        if decision.model not in scenario.loss.run:
            raise ScenarioError(f"round {index}: unknown model id {decision.model!r}")
        if previous is not None and previous != decision.model:
            if (previous, decision.model) not in prop.switch:
                raise ScenarioError(f"round {index}: switch {previous!r} -> {decision.model!r} "
                                    "is not allowed (no such pair in loss.switch)")
            mean, var = prop.switch_scalar(previous, decision.model, mean, var)
        key = tuple(decision.clients)
        if key not in ratios:
            try:
                total = sum(scenario.client(c).num_samples for c in key)
            except KeyError as exc:
                raise ScenarioError(f"round {index}: unknown client id {exc.args[0]!r}") from None
            if total <= 0:
                raise ScenarioError(f"round {index}: no clients")
            ratios[key] = total / scenario.loss.reference_samples
        mean, var = prop.run_scalar(decision.model, mean, var, ratios[key])
        previous = decision.model
    return mean, var


def predict_quantile(scenario: Scenario, rounds: Sequence[RoundDecision], prob: float,
                     guarantee: str = "gaussian",
                     start: PlanStart | None = None) -> tuple[float, float, float]:
    """Predicted ``prob``-quantile of the final loss of a round sequence.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    rounds : sequence of RoundDecision
        The rounds (only ``model`` and ``clients`` matter for the loss).
    prob : float
        Probability pi in (0, 1).
    guarantee : {"gaussian", "cantelli"}
        Gaussian quantile of the propagated moments, or Cantelli's
        distribution-free bound ``mean + std * sqrt(pi / (1 - pi))``.
    start : PlanStart, optional
        Current loss distribution and previous model (re-planning).

    Returns
    -------
    tuple of float
        ``(quantile, mean, std)`` of the final loss (quantile clamped at 0).
    """
    k = kappa(prob, guarantee)
    mean, var = propagate(scenario, rounds, start)
    std = math.sqrt(var)
    return max(mean + k * std, 0.0), mean, std
