"""Predicted pi-quantile of the final loss: Gaussian moment propagation.

The contract's loss dynamics (docs/FORMATS.md) are, per round with model
``m`` after model ``p``::

    L += Y,  Y ~ N(sw_mean, sw_std**2)                       (only if p != m)
    L -= X,  X ~ N(mu_m(L) r**a, (sigma_m(L) r**-b)**2)
    L  = max(L, 0)

We track only the mean ``M`` and variance ``V`` of ``L`` and propagate them
round by round:

* **switch** -- exact: ``M += sw_mean``, ``V += sw_std**2`` (no clamp
  before the run, as in the contract);
* **run** -- exact for a Gaussian ``L ~ N(M, V)``: ``M' = M - r**a E[mu(L)]``
  and ``V' = Var(L - r**a mu(L)) + r**(-2b) E[sigma(L)**2]``, with the
  expectations of the clamped piecewise-linear profiles in closed form (see
  :class:`LossPropagator`);
* **clamp** -- exact moments of the rectified Gaussian ``max(N(M', V'), 0)``.

The pi-quantile is then ``q = M + kappa * sqrt(V)`` with
``kappa = Phi^-1(pi)`` (``guarantee="gaussian"``) or, distribution-free,
``kappa = sqrt(pi / (1 - pi))`` (``guarantee="cantelli"``: Cantelli's one-sided
inequality ``P[L - M >= t] <= V / (V + t**2)`` holds for any distribution
with these two moments). The propagation itself is an approximation
(Gaussian closure after every round); the planner therefore checks
every plan by Monte Carlo of the exact semantics before returning it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from depl_fl.contract.coverage import with_unseen_classes
from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import coverage_gap, effective_ratio, set_coverage
from depl_fl.errors import ScenarioError
from depl_fl.identity_memo import LastObjectMemo

GUARANTEES = ("gaussian", "cantelli")
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / _SQRT_2PI


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
    previous_clients : tuple of str or None
        Client set of the last round run (with ``loss.set_shift`` a first
        planned round on another set pays the set-shift jump); None: every
        client of the scenario (the federated exploration trained them all).
    """

    loss_mean: float
    loss_std: float = 0.0
    previous_model: str | None = None
    elapsed_s: float = 0.0
    rounds_done: int = 0
    previous_clients: tuple[str, ...] | None = None

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
    """Moment propagation of the loss for one scenario (scalar and vectorised forms).

    A run round needs ``E[mu(L)]``, ``E[mu(L)**2]``, ``E[L mu(L)]`` and
    ``E[sigma(L)**2]`` for ``L ~ N(M, V)``.  A clamped piecewise-linear profile
    is ``f(L) = f_0 + sum_j k_j (L - l_j)_+`` (``k_j`` the slope change at level
    ``l_j``), and the Gaussian moments of ``(L - l)_+`` have closed forms, so
    these expectations are exact for a Gaussian ``L``:

    * ``M' = M - r**a E[mu(L)]``;
    * ``V' = Var(L - r**a mu(L)) + r**(-2b) E[sigma(L)**2]``.

    (A first-order linearisation around ``M`` instead is biased wherever the
    spread of ``L`` covers a kink of the profile: with the fitted profiles of
    real pilots it over-stated the mean final loss of 25-round plans by ~0.1.)
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.a = scenario.loss.data_exponent_mean
        self.b = scenario.loss.data_exponent_std
        self.initial = scenario.loss.initial
        self.switch = {key: (sw.mean, sw.std ** 2) for key, sw in scenario.loss.switch.items()}
        self._profiles: dict[str, _HingeProfile] = {
            mid: _HingeProfile.of(prof.levels, prof.mean, prof.std, prof.eval_std)
            for mid, prof in scenario.loss.run.items()}
        # Version 2: E[eval_std_m(L)**2] of the final evaluation draw, per model that has one.
        self._eval: dict[str, _HingeProfile] = {
            mid: _HingeProfile.of(prof.levels, prof.eval_std, prof.eval_std)
            for mid, prof in scenario.loss.run.items()
            if prof.eval_std is not None and any(v > 0 for v in prof.eval_std)}
        self.floor = scenario.loss.coverage_floor_loss
        #: Version 2: the judged loss's variance per unit of loss (the split's sampling error).
        self.judged_error = float(scenario.loss.judged_error or 0.0)
        self._table_cache: dict[tuple[str, ...], tuple[np.ndarray, ...]] = {}
        self._set_cache: dict[tuple[str, ...], tuple[float, float]] = {}

    # -- version 2: which set, and the judged final loss ------------------------
    def set_terms(self, clients: Sequence[str]) -> tuple[float, float]:
        """``(r_eff, u)`` of a client set: the walk's data ratio and the unseen share the final map uses.

        ``u`` is 0 without ``loss.coverage_floor_loss`` (no unseen-class term);
        both are the version-1 ``(r, 0)`` for a set without label histograms.
        Cached per set.
        """
        key = tuple(clients)
        cached = self._set_cache.get(key)
        if cached is None:
            cov = set_coverage(self.scenario, key)
            unseen = cov[1] if cov is not None and self.floor is not None else 0.0
            cached = (effective_ratio(self.scenario, key), min(max(unseen, 0.0), 1.0))
            self._set_cache[key] = cached
        return cached

    def set_shift_moments(self, clients: Sequence[str], trained_on: Sequence[str] | None
                          ) -> tuple[float, float] | None:
        """``(mean, var)`` of the set-shift jump of a first round on ``clients`` (None: no jump).

        ``trained_on`` is the set the start model last trained on (None: every
        client). The jump is ``(1 - c_S) * Normal(set_shift.mean, set_shift.std)``
        (docs/CONTRACT_V2.md); none without ``loss.set_shift``, on the same set,
        or for a set of full coverage.
        """
        shift = self.scenario.loss.set_shift
        if shift is None:
            return None
        before = {c.id for c in self.scenario.clients} if trained_on is None else set(trained_on)
        if set(clients) == before:
            return None
        gap = coverage_gap(self.scenario, tuple(clients))
        if gap <= 0.0:
            return None
        return shift.mean * gap, (shift.std * gap) ** 2

    def has_final_map(self) -> bool:
        """Whether any set or model can have a final map other than the identity."""
        return bool(self._eval) or self.floor is not None or self.judged_error > 0.0

    def judged_array(self, models: Sequence[str], which: np.ndarray | int, mean: np.ndarray,
                     var: np.ndarray, uncovered: np.ndarray | float = 0.0,
                     ratio: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Moments of the judged final loss from the walk's ``(mean, var)`` (element ``i`` ended on
        ``models[which[i]]``, on a set of effective data ratio ``ratio[i]`` and unseen share
        ``uncovered[i]``).

        ``J = (1 - u) L + u F`` has moments ``(1 - u) M + u F`` and ``(1 - u)**2 V``;
        the noise adds ``E[eval_std_m(L)**2] r**(-2b)`` and ``judged_error *
        E[max(J, 0)]``, both exact for ``L ~ N(M, V)`` (docs/CONTRACT_V2.md). The
        identity -- the same arrays -- when nothing applies (version 1).
        """
        u = np.asarray(uncovered, dtype=float)
        noisy = [m for m in models if m in self._eval]
        if not noisy and self.judged_error <= 0.0 and (self.floor is None or not np.any(u > 0.0)):
            return mean, var
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        out_mean = with_unseen_classes(mean, u, self.floor or 0.0)
        out_var = (1.0 - u) ** 2 * var
        if noisy:
            scale = np.asarray(ratio, dtype=float) ** (-2.0 * self.b)
            which = np.broadcast_to(np.asarray(which), mean.shape)
            for i, m in enumerate(models):
                if m in self._eval:
                    sel = which == i
                    if sel.any():
                        out_var = np.where(sel, out_var + scale * _hinge_square(self._eval[m], mean, var),
                                           out_var)
        if self.judged_error > 0.0:
            out_var = out_var + self.judged_error * _positive_part_mean(out_mean, out_var)
        return out_mean, out_var

    def judged_quantile(self, models: Sequence[str], which: np.ndarray | int, mean: np.ndarray,
                        var: np.ndarray, kappa: float, uncovered: np.ndarray | float = 0.0,
                        ratio: np.ndarray | float = 1.0) -> np.ndarray:
        """``mean + kappa * std`` of the judged final loss (see :meth:`judged_array`)."""
        jm, jsd = self.judged_mean_std(models, which, mean, var, uncovered, ratio)
        return jm + kappa * jsd

    def judged_mean_std(self, models: Sequence[str], which: np.ndarray | int, mean: np.ndarray,
                        var: np.ndarray, uncovered: np.ndarray | float = 0.0,
                        ratio: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """The judged final loss's mean and standard deviation, whose ``mean + kappa * std`` is
        :meth:`judged_quantile` (neither depends on ``kappa``: a caller trying many may keep them)."""
        if not self.has_final_map():  # version 1: the walk's own quantile
            return mean, np.sqrt(var)
        jm, jv = self.judged_array(models, which, mean, var, uncovered, ratio)
        return jm, np.sqrt(jv)

    def start_quantile(self, mean: np.ndarray | float, var: np.ndarray | float,
                       kappa: float) -> np.ndarray | float:
        """``mean + kappa * std`` of the judged loss of a plan of no round (the start loss judged)."""
        if self.judged_error > 0.0:
            var = var + self.judged_error * _positive_part_mean(np.asarray(mean, dtype=float),
                                                                np.asarray(var, dtype=float))
        out = mean + kappa * np.sqrt(np.maximum(var, 0.0))
        return float(out) if np.ndim(out) == 0 else out

    # -- scalar form (used inside the expanded graph, where it is fastest) ------
    def run_scalar(self, model: str, mean: float, var: float, r: float) -> tuple[float, float]:
        """One round of ``model`` on data ratio ``r``: new ``(mean, var)`` (floats)."""
        hp = self._profiles[model]
        std = max(math.sqrt(var) if var > 0.0 else 0.0, _MIN_STD)
        e = [hp.const[q] for q in range(4)]
        for j, level in enumerate(hp.levels):
            d = mean - level
            z = d / std
            cdf = 0.5 * math.erfc(-z / math.sqrt(2.0))
            pdf = math.exp(-0.5 * min(z * z, 1e6)) / _SQRT_2PI
            e1 = d * cdf + std * pdf
            e2 = (d * d + std * std) * cdf + d * std * pdf
            for q in range(4):
                e[q] += hp.w1[q][j] * e1 + hp.w2[q][j] * e2
        e_mu, e_lmu, e_mu2, e_sd2 = e
        e_lmu += hp.const_lmu * mean
        ra, rb = r ** self.a, r ** (-2.0 * self.b)
        new_mean = mean - e_mu * ra
        new_var = (var - 2.0 * ra * (e_lmu - mean * e_mu) + ra * ra * max(e_mu2 - e_mu * e_mu, 0.0)
                   + rb * max(e_sd2, 0.0))
        return _rectify_scalar(new_mean, max(new_var, 0.0))

    def switch_scalar(self, source: str, target: str, mean: float, var: float) -> tuple[float, float]:
        """Loss jump of a switch ``source -> target`` (KeyError if not allowed)."""
        sw_mean, sw_var = self.switch[(source, target)]
        return mean + sw_mean, var + sw_var  # the contract clamps only after the run

    # -- vectorised form (many data ratios / states at once) --------------------
    def run_array(self, model: str, mean: np.ndarray, var: np.ndarray,
                  r: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`run_scalar` over arrays of states and data ratios."""
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        r = np.asarray(r, dtype=float)
        shape = np.broadcast_shapes(mean.shape, var.shape, r.shape)
        mean, var, r = (np.broadcast_to(x, shape).ravel() for x in (mean, var, r))
        tables = self._tables((model,))
        rows = np.zeros(mean.size, dtype=np.int64)
        new_mean, new_var = self._run_rows(tables, rows, mean, var, r)
        return new_mean.reshape(shape), new_var.reshape(shape)

    def run_many(self, models: Sequence[str], which: np.ndarray, mean: np.ndarray,
                 var: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`run_array` for many models at once: element ``i`` runs ``models[which[i]]``.

        The same arithmetic as :meth:`run_array` on each model's elements (equal
        bit for bit), in one numpy pass instead of one per model.
        """
        tables = self._tables(tuple(models))
        return self._run_rows(tables, np.asarray(which), np.asarray(mean, dtype=float),
                              np.asarray(var, dtype=float), np.asarray(r, dtype=float))

    def _run_rows(self, tables: tuple[np.ndarray, ...], rows: np.ndarray, mean: np.ndarray,
                  var: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One run round of every element (element ``i`` runs model ``rows[i]`` of ``tables``).

        Every operation is elementwise or a fixed-order sum over the profile's
        levels, so an element's result does not depend on the other elements
        of the batch or on which models the tables hold: callers may batch,
        split or drop elements freely without changing any result.
        """
        lv_t, const_t, lmu_t, w1_t, w2_t = tables
        single = lv_t.shape[0] == 1
        lv = lv_t[0] if single else lv_t[rows]            # (K,) or (n, K); padded columns far above
        var_c = np.maximum(var, _MIN_STD * _MIN_STD)[:, None]
        std = np.sqrt(var_c)
        d = mean[:, None] - lv
        z = d / std
        cdf = ndtr(z)
        std_pdf = std * np.exp(-0.5 * z * z) * _INV_SQRT_2PI
        e1 = d * cdf + std_pdf                            # E[(L - l_j)_+]   (0 in padding)
        e2 = d * e1 + var_c * cdf                         # E[(L - l_j)_+^2] (0 in padding)
        w1 = w1_t[0][None] if single else w1_t[rows]      # (1 or n, K, 4)
        w2 = w2_t[0][None] if single else w2_t[rows]
        e = _hinge_sums(const_t[0] if single else const_t[rows], e1, e2, w1, w2)
        e_mu, e_lmu, e_mu2, e_sd2 = e.T
        e_lmu = e_lmu + (lmu_t[0] if single else lmu_t[rows]) * mean
        ra, rb = r ** self.a, r ** (-2.0 * self.b)
        new_mean = mean - e_mu * ra
        new_var = (var - 2.0 * ra * (e_lmu - mean * e_mu) + ra * ra * np.maximum(e_mu2 - e_mu ** 2, 0.0)
                   + rb * np.maximum(e_sd2, 0.0))
        return _rectify_array(new_mean, np.maximum(new_var, 0.0))

    def _tables(self, models: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """Padded per-model arrays (levels, constants and hinge weights) for :meth:`_run_rows`."""
        cached = self._table_cache.get(models)
        if cached is not None:
            return cached
        width = max(len(self._profiles[m].levels) for m in models)
        lv = np.full((len(models), width), _PAD_LEVEL)
        const = np.zeros((len(models), 4))
        lmu = np.zeros(len(models))
        w1, w2 = np.zeros((len(models), width, 4)), np.zeros((len(models), width, 4))
        for i, m in enumerate(models):
            hp = self._profiles[m]
            n = len(hp.levels)
            lv[i, :n] = hp.levels
            const[i] = hp.const
            lmu[i] = hp.const_lmu
            w1[i, :n, :], w2[i, :n, :] = np.transpose(hp.w1), np.transpose(hp.w2)
        cached = (lv, const, lmu, w1, w2)
        self._table_cache[models] = cached
        return cached

    def switch_array(self, source: str, target: str, mean: np.ndarray,
                     var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`switch_scalar`."""
        sw_mean, sw_var = self.switch[(source, target)]
        return mean + sw_mean, var + sw_var


#: Spread below which a loss is treated as known (keeps ``(M - l) / S`` finite).
_MIN_STD = 1e-12
#: Level of padded table columns: so far above any loss that their hinge moments are 0.
_PAD_LEVEL = 1e12


@dataclass(frozen=True)
class _HingeProfile:
    """A run profile as hinge weights: the four expectations a run round needs.

    With ``f = f0 + sum_j k_j (L - l_j)_+`` (``k_j`` the slope change at
    ``l_j``; clamped at both ends) and the hinge moments ``E1_j = E[(L - l_j)_+]``,
    ``E2_j = E[(L - l_j)_+**2]``, each of ``E[mu]``, ``E[L mu] - mu0 M``,
    ``E[mu**2]`` and ``E[sigma**2]`` is ``const + w1 . E1 + w2 . E2``: for a
    product of hinges ``i <= j``, ``(L-l_i)_+ (L-l_j)_+ = (L-l_j)_+**2 + (l_j-l_i)(L-l_j)_+``.
    """

    levels: tuple[float, ...]
    const: tuple[float, float, float, float]
    const_lmu: float                              # E[L mu] = const_lmu * M + ...
    w1: tuple[tuple[float, ...], ...]             # 4 rows of weights on E1
    w2: tuple[tuple[float, ...], ...]             # 4 rows of weights on E2

    @classmethod
    def of(cls, levels: Sequence[float], mean: Sequence[float], std: Sequence[float],
           eval_std: Sequence[float] | None = None) -> "_HingeProfile":
        """Hinge weights of a run profile; with ``eval_std`` (version 2) the spread row is the
        walk's ``E[std(L)**2 - 2 eval_std(L)**2]`` (both squares are exact in hinge moments)."""
        lv = np.asarray(levels, dtype=float)
        k_mu, k_sd = _kinks(lv, mean), _kinks(lv, std)
        mu0, sd0 = float(mean[0]), float(std[0])
        sq_mu, sq_sd = _square_weights(lv, k_mu), _square_weights(lv, k_sd)
        w1 = (k_mu, k_mu * lv, 2.0 * mu0 * k_mu + sq_mu[0], 2.0 * sd0 * k_sd + sq_sd[0])
        w2 = (np.zeros_like(lv), k_mu, sq_mu[1], sq_sd[1])
        const = (mu0, 0.0, mu0 * mu0, sd0 * sd0)
        if eval_std is not None and any(v > 0 for v in eval_std):
            k_ev, ev0 = _kinks(lv, eval_std), float(eval_std[0])
            sq_ev = _square_weights(lv, k_ev)
            w1 = (*w1[:3], w1[3] - 2.0 * (2.0 * ev0 * k_ev + sq_ev[0]))
            w2 = (*w2[:3], w2[3] - 2.0 * sq_ev[1])
            const = (*const[:3], sd0 * sd0 - 2.0 * ev0 * ev0)
        return cls(tuple(float(v) for v in lv), const, mu0,
                   tuple(tuple(float(v) for v in row) for row in w1),
                   tuple(tuple(float(v) for v in row) for row in w2))


def _hinge_sums(const: np.ndarray, e1: np.ndarray, e2: np.ndarray, w1: np.ndarray,
                w2: np.ndarray) -> np.ndarray:
    """``const + e1_0 w1_0 + e2_0 w2_0 + e1_1 w1_1 + ...`` per element, shape ``(n, 4)``.

    Summed left to right, level by level, by one ``np.add.accumulate`` (a
    sequential sum, unlike ``sum``'s pairwise one): the same roundings as
    adding the terms one by one in that order, without a numpy call per level.
    """
    n, levels = e1.shape
    terms = np.empty((n, 1 + 2 * levels, 4))
    terms[:, 0] = const
    np.multiply(e1[:, :, None], w1, out=terms[:, 1::2])
    np.multiply(e2[:, :, None], w2, out=terms[:, 2::2])
    return np.add.accumulate(terms, axis=1)[:, -1]


def _hinge_square(hp: _HingeProfile, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``E[f(L)**2]`` for ``L ~ N(mean, var)``, ``f`` the profile's mean curve (row 2 of ``hp``)."""
    mean = np.asarray(mean, dtype=float)
    var_c = np.maximum(np.asarray(var, dtype=float), _MIN_STD * _MIN_STD)
    lv = np.asarray(hp.levels)
    d = mean[..., None] - lv
    std = np.sqrt(var_c)[..., None]
    z = d / std
    cdf = ndtr(z)
    e1 = d * cdf + std * np.exp(-0.5 * z * z) * _INV_SQRT_2PI
    e2 = d * e1 + var_c[..., None] * cdf
    return hp.const[2] + e1 @ np.asarray(hp.w1[2]) + e2 @ np.asarray(hp.w2[2])


def _kinks(levels: np.ndarray, values: Sequence[float]) -> np.ndarray:
    """Slope changes ``k_j`` at each level of a clamped piecewise-linear profile."""
    slopes = np.diff(np.asarray(values, dtype=float)) / np.diff(levels)
    return np.diff(np.concatenate(([0.0], slopes, [0.0])))


def _square_weights(levels: np.ndarray, kinks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weights on ``(E1, E2)`` of ``E[(sum_j k_j (L - l_j)_+)**2]``."""
    before = np.concatenate(([0.0], np.cumsum(kinks)[:-1]))                 # sum_{i<j} k_i
    before_l = np.concatenate(([0.0], np.cumsum(kinks * levels)[:-1]))      # sum_{i<j} k_i l_i
    on_e2 = kinks * kinks + 2.0 * kinks * before
    on_e1 = 2.0 * kinks * (levels * before - before_l)
    return on_e1, on_e2


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


def _rectify_array(mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`_rectify_scalar` (elementwise: each result depends on its element only)."""
    std = np.sqrt(np.maximum(var, 0.0))
    far = mean > 8.0 * std
    if np.all(far):  # far from the clamp: nothing to do (the common case)
        return mean, var
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(std > 0, mean / np.where(std > 0, std, 1.0), np.sign(mean) * np.inf)
    cdf = ndtr(alpha)
    pdf = np.exp(-0.5 * np.minimum(alpha * alpha, 1e6)) / _SQRT_2PI
    m1 = mean * cdf + std * pdf
    m2 = (mean * mean + var) * cdf + mean * std * pdf
    out_var = np.maximum(m2 - m1 * m1, 0.0)
    out_mean = np.where(std > 0, m1, np.maximum(mean, 0.0))
    out_var = np.where(std > 0, out_var, 0.0)
    return np.where(far, mean, out_mean), np.where(far, var, out_var)


def _positive_part_mean(mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``E[max(L, 0)]`` for ``L ~ N(mean, var)`` (``max(mean, 0)`` where ``var`` is 0)."""
    std = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0.0, mean / np.where(std > 0.0, std, 1.0), 0.0)
    exact = mean * ndtr(z) + std * np.exp(-0.5 * z * z) * _INV_SQRT_2PI
    return np.where(std > 0.0, exact, np.maximum(mean, 0.0))


def start_moments(scenario: Scenario, start: PlanStart | None) -> tuple[float, float, str | None]:
    """``(mean, var, previous_model)`` at the start of planning."""
    if start is None:
        return scenario.loss.initial, 0.0, None
    if start.previous_model is not None and start.previous_model not in scenario.loss.run:
        raise ScenarioError(f"start: unknown previous model {start.previous_model!r}")
    return start.loss_mean, start.loss_std ** 2, start.previous_model


#: The propagator of the last scenario object asked about: see :func:`propagator_for`.
_PROPAGATOR: LastObjectMemo[LossPropagator] = LastObjectMemo()


def propagator_for(scenario: Scenario) -> LossPropagator:
    """The :class:`LossPropagator` of ``scenario``, one per scenario object.

    Its figures depend on the scenario alone (a scenario is immutable; a changed
    one is a new object) and its caches are keyed by their arguments, so every
    planning call and prediction on the same scenario shares one instead of
    rebuilding the profiles' hinge tables each time (a tracked run predicts and
    may re-plan every round).
    """
    return _PROPAGATOR.get(scenario, lambda: LossPropagator(scenario))


def propagate(scenario: Scenario, rounds: Sequence[RoundDecision],
              start: PlanStart | None = None,
              propagator: LossPropagator | None = None, judged: bool = True) -> tuple[float, float]:
    """Predicted ``(mean, var)`` of the final loss of a round sequence.

    Version 2: each round runs on its set's ``r_eff`` and the result goes
    through the final map of the last round (``judged=False``: the walk's moments);
    with ``loss.set_shift`` a round on a set other than the previous round's
    (the first: ``start.previous_clients``) adds the set-shift jump's moments.
    """
    prop = propagator or propagator_for(scenario)
    mean, var, previous = start_moments(scenario, start)
    trained_on = start.previous_clients if start is not None else None
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
            ratios[key] = prop.set_terms(key)[0]
        jump = prop.set_shift_moments(key, trained_on)
        if jump is not None:
            mean, var = mean + jump[0], var + jump[1]
        trained_on = key
        mean, var = prop.run_scalar(decision.model, mean, var, ratios[key])
        previous = decision.model
    return _judged_moments(prop, rounds, mean, var) if judged else (mean, var)


def _judged_moments(prop: LossPropagator, rounds: Sequence[RoundDecision], mean: float,
                    var: float) -> tuple[float, float]:
    """The walk's final ``(mean, var)`` through the final map of the last round (none: the start's)."""
    if not rounds:
        return mean, float(prop.start_quantile(mean, var, 1.0) - mean) ** 2
    last = rounds[-1]
    r_last, u_last = prop.set_terms(tuple(last.clients))
    jm, jv = prop.judged_array([last.model], 0, np.array(mean), np.array(var), u_last, r_last)
    return float(jm), float(jv)


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
