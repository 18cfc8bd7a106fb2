"""Label coverage of a client set: the pure maths of scenario contract version 2.

Version 1's loss sees a set ``S`` of clients only through its data ratio
``r = n_S / reference_samples``: three clients that hold only digits 0-6 and
three that hold every digit are the same to it. Under label skew they are not:
a class no selected client holds is never learned, and the loss on it stays
high however many rounds are run. Version 2 (docs/CONTRACT_V2.md) lets every
client report a label histogram (counts per class: it reveals no sample) and
defines, for a set ``S`` whose clients all report one:

* label shares ``s_k = n_S[k] / n_S`` of the set and reference shares ``q_k``
  (``loss.label_shares``, the held-out data's class shares; default: the
  pooled histogram of every client);
* **coverage** ``c_S = sum_k min(s_k, q_k)`` in [0, 1]: the overlap of the two
  label distributions (one minus their total-variation distance). 1 when the
  set is distributed like the reference; a class the set lacks takes its
  reference share off; an IID set is near 1;
* **effective data ratio** ``r_eff = c_S * r``: the samples of ``S`` that are
  distributed like the reference. It replaces ``r`` in the loss semantics;
* the **uncovered share** ``u_S = sum of q_k over the classes with
  s_k < tau * q_k`` (``tau = loss.coverage_threshold``, default 0.1): the test
  labels the set (almost) never shows the model;
* the **unseen-class mixture**: the loss the targets judge after a plan whose
  last set is ``S`` is ``(1 - u_S) * L + u_S * F`` (``F =
  loss.coverage_floor_loss``): the contract's random walk ``L`` describes the
  classes the set shows, an unlearnt class is lost at ``F`` per test sample
  however long one trains (measured: ``F`` about 4-5 on non-IID digits);
* a set is **predictable** when ``c_S >= loss.min_coverage`` and
  ``u_S <= loss.max_uncovered``, the range of the client sets the loss profile
  was measured on: no plan may use a set whose loss the profile would
  extrapolate to.

All functions are pure numpy; nothing here reads files or knows Flower.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from depl_fl.errors import ScenarioError

Histogram = Sequence[float]


def as_histogram(raw: object, where: str, num_classes: int | None = None) -> np.ndarray:
    """Validate one label histogram (non-negative finite counts, not all zero).

    Raises
    ------
    ScenarioError
        Naming ``where`` when the histogram is malformed or of the wrong length.
    """
    try:
        hist = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        raise ScenarioError(f"{where}: must be a list of counts, got {raw!r}") from None
    if hist.ndim != 1 or hist.size == 0:
        raise ScenarioError(f"{where}: must be a non-empty list of counts")
    if not np.all(np.isfinite(hist)) or np.any(hist < 0) or hist.sum() <= 0:
        raise ScenarioError(f"{where}: counts must be finite, >= 0 and not all 0")
    if num_classes is not None and hist.size != num_classes:
        raise ScenarioError(f"{where}: has {hist.size} classes, expected {num_classes}")
    return hist


def shares(counts: Histogram) -> np.ndarray:
    """Counts normalised to shares that sum to 1."""
    arr = np.asarray(counts, dtype=float)
    return arr / arr.sum()


def pooled_histogram(histograms: Iterable[Histogram]) -> np.ndarray:
    """Sum of histograms of equal length (the label counts of a set of clients)."""
    stacked = np.asarray([np.asarray(h, dtype=float) for h in histograms])
    if stacked.ndim != 2 or stacked.shape[0] == 0:
        raise ScenarioError("label histograms: need at least one, all of the same length")
    return stacked.sum(axis=0)


def coverage(set_counts: Histogram, reference_shares: Histogram) -> float:
    """``c_S = sum_k min(s_k, q_k)``: overlap of the set's label shares with the reference's.

    Parameters
    ----------
    set_counts : sequence of float
        Pooled label counts of the set (``n_S[k]``).
    reference_shares : sequence of float
        Reference label shares ``q_k`` (normalised here).

    Returns
    -------
    float
        In [0, 1]; 1 exactly when the set's label shares equal the reference's.
    """
    s, q = shares(set_counts), shares(reference_shares)
    if s.shape != q.shape:
        raise ScenarioError(f"label histograms: {s.size} classes vs {q.size} reference shares")
    return float(np.minimum(s, q).sum())


def effective_ratio(set_counts: Histogram, reference_shares: Histogram, reference_samples: float) -> float:
    """``r_eff = c_S * n_S / reference_samples``: the set's samples distributed like the reference."""
    total = float(np.asarray(set_counts, dtype=float).sum())
    return coverage(set_counts, reference_shares) * total / float(reference_samples)


#: Default ``loss.coverage_threshold``: a class counts as shown to the model when the
#: set holds at least this fraction of its reference share.
DEFAULT_COVERAGE_THRESHOLD = 0.1


def uncovered_share(set_counts: Histogram, reference_shares: Histogram,
                    threshold: float = DEFAULT_COVERAGE_THRESHOLD) -> float:
    """``u_S``: reference share of the classes with ``s_k < threshold * q_k`` (0 when all are shown)."""
    s, q = shares(set_counts), shares(reference_shares)
    if s.shape != q.shape:
        raise ScenarioError(f"label histograms: {s.size} classes vs {q.size} reference shares")
    return float(q[s < float(threshold) * q].sum())


def with_unseen_classes(latent_loss: np.ndarray | float, uncovered: np.ndarray | float,
                        floor_loss: float | None) -> np.ndarray | float:
    """``(1 - u_S) * L + u_S * F``: the judged loss when a share ``uncovered`` of the labels is unseen.

    ``uncovered`` (clipped to [0, 1]) is one share or one per element of
    ``latent_loss``; the result is a new array for an array input. Without a
    floor loss ``F`` (None) the latent loss is returned unchanged (version-1 meaning).
    """
    if floor_loss is None:
        return latent_loss
    if isinstance(uncovered, np.ndarray):
        u: np.ndarray | float = np.clip(uncovered, 0.0, 1.0)
    else:
        u = min(max(float(uncovered), 0.0), 1.0)
    return (1.0 - u) * latent_loss + u * float(floor_loss)


def set_coverage(client_ids: Sequence[str], histograms: Mapping[str, Histogram],
                 reference_shares: Histogram, threshold: float = DEFAULT_COVERAGE_THRESHOLD
                 ) -> tuple[float, float] | None:
    """``(c_S, u_S)`` of the set ``client_ids``; None when a client reports no histogram (v1 meaning)."""
    if not client_ids or any(cid not in histograms for cid in client_ids):
        return None
    pooled = pooled_histogram(histograms[cid] for cid in client_ids)
    return coverage(pooled, reference_shares), uncovered_share(pooled, reference_shares, threshold)


def is_predictable(cov: tuple[float, float] | None, min_coverage: float | None,
                   max_uncovered: float | None) -> bool:
    """Whether a set's ``(c_S, u_S)`` lies within what the profile measured.

    A set without coverage (some client reports no histogram), or a profile
    without the bounds, keeps the version-1 meaning: every set is allowed.
    """
    if cov is None:
        return True
    c_s, u_s = cov
    if min_coverage is not None and c_s < float(min_coverage) - 1e-12:
        return False
    return max_uncovered is None or u_s <= float(max_uncovered) + 1e-12


def measured_bounds(pilot_sets: Iterable[Sequence[str]], histograms: Mapping[str, Histogram],
                    reference_shares: Histogram, threshold: float = DEFAULT_COVERAGE_THRESHOLD
                    ) -> tuple[float, float]:
    """``(loss.min_coverage, loss.max_uncovered)`` from the client sets the profile pilots trained on.

    The least coverage and the largest uncovered share among the pilot sets:
    a plan may use sets as well covered as some pilot's, never less.
    """
    values = [set_coverage(tuple(s), histograms, reference_shares, threshold) for s in pilot_sets]
    known = [v for v in values if v is not None]
    if not known:
        raise ScenarioError("coverage bounds: no pilot set with label histograms for every client")
    return min(c for c, _ in known), max(u for _, u in known)
