"""How far the test loss may lie above the validation loss of the same model.

Tracking stops a run once the model at hand meets the target; the model is
then judged on a test split that no decision read. With the two splits
drawn from the same data, ``test - validation`` is the difference of two
sample means. The Gaussian margin ``kappa * sqrt(2) * sem`` with ``sem``
measured on the validation split misses more often than ``1 - pi`` on
cross-entropy losses: they are skewed to the right, and a validation split
that happens to hold few badly classified samples has both a low mean and a
low spread, so the margin is smallest exactly where the validation loss is
most optimistic. ``benchmarks/stop_margin.py`` measures how often each
margin misses over many split seeds (docs/RESULTS.md).

:func:`stop_margin` uses the bootstrap-t instead: the validation split plays
the population, a validation-sized and a test-sized sample are redrawn from
it, and the studentised difference ``(mean T* - mean V*) / sem(V*)`` carries
the coupling of mean and spread that the Gaussian margin ignores (Hall,
*The Bootstrap and Edgeworth Expansion*, 1992: second-order correct one-sided
bounds). Only the validation losses and the test split's size are read.
"""

from __future__ import annotations

import math

import numpy as np

from depl_fl.errors import ScenarioError

#: Redraws per margin; the 0.95-quantile of 2,000 draws lies within ~2% of its limit.
DEFAULT_DRAWS = 2000
#: Redraws handled at once (bounds memory on large validation splits).
_CHUNK = 250
#: Redraws gathered and reduced at once within a chunk (their losses stay in the cache).
_BLOCK = 25
#: Validation losses the redraws resample at most (larger splits: a seeded subsample, see stop_margin).
MAX_RESAMPLE = 8192


def stop_margin(val_losses: np.ndarray, test_size: int, prob: float, *,
                draws: int = DEFAULT_DRAWS, seed: int = 0, max_resample: int | None = MAX_RESAMPLE) -> float:
    """The ``prob``-quantile of ``test loss - validation loss`` for one model (bootstrap-t).

    Parameters
    ----------
    val_losses : ndarray
        Per-sample losses of the model on the validation split.
    test_size : int
        Number of samples of the test split (its losses are never read).
    prob : float
        Target probability in (0, 1): the test loss stays below
        ``validation loss + margin`` with this probability.
    draws : int
        Bootstrap redraws.
    seed : int
        Seed of the redraws (equal seeds, equal margins).
    max_resample : int or None
        Above this many validation losses, the studentised quantile comes from
        a seeded subsample of this size (and a test size scaled alike), and is
        multiplied by the whole split's ``sem``: the cost of a margin stops
        growing with the split (a federation of 1,000 synthetic clients holds
        36,000 validation samples). The studentised difference has the same
        spread at any size and a skew that shrinks like ``1/sqrt(size)``, so the
        subsample's quantile errs on the large side. ``None``: always resample
        the whole split.

    Returns
    -------
    float
        The margin in loss units; ``0.0`` when all validation losses are equal
        (no spread to redraw).

    Raises
    ------
    ScenarioError
        On fewer than two validation losses, a test size below one, a
        probability outside (0, 1) or non-finite losses.
    """
    losses = np.asarray(val_losses, dtype=float).ravel()[None, :]
    return float(margin_quantiles(losses, test_size, [prob], draws=draws, seed=seed,
                                  max_resample=max_resample, joint=False)[0])


def joint_stop_margin(look_losses: np.ndarray, test_size: int, prob: float, *,
                      draws: int = DEFAULT_DRAWS, seed: int = 0,
                      max_resample: int | None = MAX_RESAMPLE) -> float:
    """The stop margin of the last look that holds for every look at once (sup-t bootstrap).

    A rule that checks ``validation + margin <= target`` at every round and
    stops at the first that passes picks the round whose validation loss
    happens to be low; a margin calibrated for one look then misses more
    often than ``1 - prob`` at the stop. Bounding the largest studentised
    error over the looks bounds the error at whichever look stops:
    ``P[test_k - val_k > q * sem_k for some look k] <= 1 - prob`` when ``q``
    is the ``prob``-quantile of ``max_k (mean T*_k - mean V*_k) / sem(V*_k)``.
    The looks share one split, so each redraw takes the same validation and
    test positions in every look: the redraws carry the correlation of the
    looks' errors, and a look that repeats the one before adds almost nothing.

    Parameters
    ----------
    look_losses : ndarray, shape (looks, n_val)
        Per-sample validation losses of each look's model, the same samples in
        the same order in every row; the last row is the look at hand.
    test_size, prob, draws, seed, max_resample
        As for :func:`stop_margin` (one look: the same margin, draw for draw).

    Returns
    -------
    float
        ``q * sem`` of the last look (``0.0`` when its losses are all equal).

    Raises
    ------
    ScenarioError
        As :func:`stop_margin`, and on an empty or ragged ``look_losses``.
    """
    return float(margin_quantiles(look_losses, test_size, [prob], draws=draws, seed=seed,
                                  max_resample=max_resample, joint=True)[0])


def margin_quantiles(look_losses: np.ndarray, test_size: int, probs: list[float] | np.ndarray, *,
                     draws: int = DEFAULT_DRAWS, seed: int = 0, max_resample: int | None = MAX_RESAMPLE,
                     joint: bool = True) -> np.ndarray:
    """The margins of the last look at several probabilities from one set of redraws.

    ``joint``: :func:`joint_stop_margin` over all rows of ``look_losses``;
    else :func:`stop_margin` of the last row. Element ``i`` equals that
    function's margin at ``probs[i]`` with the same ``draws`` and ``seed``.
    """
    looks = np.asarray(look_losses, dtype=float)
    probs = np.asarray(probs, dtype=float).ravel()
    _check_margin_input(looks, test_size, probs)
    n_val, n_test = looks.shape[1], int(test_size)
    sem = float(np.std(looks[-1], ddof=1)) / math.sqrt(n_val)
    if sem == 0.0:
        return np.zeros(probs.size)
    if not joint:
        looks = looks[-1:]
    rng = np.random.default_rng(seed)
    if max_resample is not None and n_val > int(max_resample):
        sub = rng.choice(n_val, size=int(max_resample), replace=False)
        looks, n_test = looks[:, sub], max(1, round(n_test * int(max_resample) / n_val))
        n_val = looks.shape[1]
    studentised = []
    for start in range(0, int(draws), _CHUNK):
        b = min(_CHUNK, int(draws) - start)
        val_index = rng.integers(0, n_val, size=(b, n_val))
        test_index = rng.integers(0, n_val, size=(b, n_test))
        for row in range(0, b, _BLOCK):  # the rows' gather and sums stay in the cache
            rows = slice(row, min(row + _BLOCK, b))
            largest = None
            for losses in looks:
                test_mean = losses[test_index[rows]].mean(axis=1)
                diff = studentised_differences(losses[val_index[rows]], test_mean)
                largest = diff if largest is None else np.maximum(largest, diff)
            studentised.append(largest)
    return np.quantile(np.concatenate(studentised), probs) * sem


def _check_margin_input(looks: np.ndarray, test_size: int, probs: np.ndarray) -> None:
    """One-line errors for what no margin can be read from."""
    if looks.ndim != 2 or looks.shape[0] < 1:
        raise ScenarioError(f"stop margin: need a (looks, samples) array of losses, got shape {looks.shape}")
    if looks.shape[1] < 2:
        raise ScenarioError(f"stop margin: need at least 2 validation losses, got {looks.shape[1]}")
    if int(test_size) < 1:
        raise ScenarioError(f"stop margin: the test split must hold a sample, got {test_size!r}")
    if probs.size == 0 or not np.all((probs > 0.0) & (probs < 1.0)):
        raise ScenarioError(f"stop margin: probability must be in (0, 1), got {probs.tolist()!r}")
    if not np.all(np.isfinite(looks)):
        raise ScenarioError("stop margin: the validation losses are not all finite")


def studentised_differences(val: np.ndarray, test_mean: np.ndarray) -> np.ndarray:
    """``(test_mean - mean(val)) / (std(val, ddof=1) / sqrt(n))`` per row of ``val`` (0: equal values).

    The same numbers as ``val.mean(axis=1)`` and ``val.std(axis=1, ddof=1)``
    (numpy's row sums in their order, its divisions), with the mean summed
    once and ``val`` overwritten by its squared deviations instead of two
    temporary copies of the redraws.

    Parameters
    ----------
    val : ndarray
        Redrawn validation losses, one redraw per row (overwritten).
    test_mean : ndarray
        Mean of the redrawn test losses of each row.

    Returns
    -------
    ndarray
        The studentised difference of every row.
    """
    n = val.shape[1]
    mean = val.sum(axis=1)
    mean /= n
    val -= mean[:, None]
    np.multiply(val, val, out=val)
    val_sem = val.sum(axis=1)
    val_sem /= n - 1
    np.sqrt(val_sem, out=val_sem)
    val_sem /= math.sqrt(n)
    # A redraw of equal values has no spread: its difference is 0 at any scale.
    diff = test_mean - mean
    return np.divide(diff, val_sem, out=np.zeros_like(diff), where=val_sem > 0)


def gaussian_margin(val_losses: np.ndarray, test_size: int, prob: float) -> float:
    """``Phi^-1(prob) * sd * sqrt(1/n_val + 1/n_test)``: the margin that ignores the skew (for comparison)."""
    from scipy.special import ndtri

    losses = np.asarray(val_losses, dtype=float).ravel()
    sd = float(np.std(losses, ddof=1))
    return float(ndtri(prob)) * sd * math.sqrt(1.0 / losses.size + 1.0 / int(test_size))
