"""Aggregation that one client cannot break (pure numpy; Flower's trimmed mean reused).

The server screens every training reply that passed :mod:`depl_fl.orchestration.reply_checks`
(names, shapes, real floating dtype, finite values) in three more steps, then
combines the survivors and checks the result:

1. **Weight bounded by what the server knows.** A reply's ``num-examples`` may
   not exceed the ``num-samples`` the client reported when it was queried (the
   figure the plan was made with): a larger claim is *rejected* (the client lies
   about its data, so nothing else it sends is trusted either). The weight used
   is ``min(claimed, queried)``, capped at ``weight_cap`` times the median
   queried ``num-samples`` of all clients, so that a client that already lied
   when queried still cannot outweigh ``weight_cap`` typical clients.
2. **Update norm against the round's median.** ``||w_i - w_global||`` (over the
   kept entries) may not exceed ``norm_factor`` times the *lower* median of the
   round's update norms pooled with the recently accepted ones (a sliding
   window). The lower median of at least two honest norms is an honest norm,
   so a minority of huge updates (1e30, a scaled update) cannot move the
   reference; the pooled history covers rounds with one or two replies. The
   reference is also at most the norm of the global weights themselves, so a
   round in which *every* reply is corrupted is rejected too.
3. **Combination rule** ``fedavg`` (weighted mean, weights from 1), ``median``
   (coordinate-wise median, :func:`numpy.median`, as Flower's ``FedMedian``) or
   ``trimmed_mean`` (coordinate-wise, Flower's
   :func:`flwr.serverapp.strategy.fedtrimmedavg.trim_mean`, cutting
   ``trim_fraction`` of the replies at each end; with fewer than
   ``1 / trim_fraction`` replies nothing is cut). ``median`` and
   ``trimmed_mean`` are unweighted, like Flower's. Only the kept entries of the
   pruned variant are combined; the caller scatters them back.
4. **Sanity of the aggregate.** The combined update must be finite and within
   the same norm threshold; otherwise the round is rolled back (global model
   unchanged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from flwr.serverapp.strategy.fedtrimmedavg import trim_mean

from depl_fl.orchestration.reply_failures import NORM_REJECTION
from depl_fl.runs.config_choices import AGGREGATION_RULES as RULES

State = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class AggregationSettings:
    """Configuration ``aggregation.*`` (see ``conf/aggregation/``).

    Parameters
    ----------
    rule : str
        ``fedavg``, ``trimmed_mean`` or ``median``.
    trim_fraction : float
        Fraction cut at each end by ``trimmed_mean``, in [0, 0.5).
    norm_factor : float
        A reply's update norm may be at most this many times the reference norm (> 1).
    weight_cap : float
        A reply's weight is at most this many times the median queried ``num-samples`` (>= 1).
    history : int
        Number of recently accepted update norms pooled into the reference.
    """

    rule: str = "fedavg"
    trim_fraction: float = 0.2
    norm_factor: float = 10.0
    weight_cap: float = 10.0
    history: int = 20

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"aggregation.rule: must be one of {', '.join(RULES)}, got {self.rule!r}")
        if not 0.0 <= self.trim_fraction < 0.5:
            raise ValueError(f"aggregation.trim_fraction: must be in [0, 0.5), got {self.trim_fraction!r}")
        if not (math.isfinite(self.norm_factor) and self.norm_factor > 1.0):
            raise ValueError(f"aggregation.norm_factor: must be a finite number > 1, "
                             f"got {self.norm_factor!r}")
        if not (math.isfinite(self.weight_cap) and self.weight_cap >= 1.0):
            raise ValueError(f"aggregation.weight_cap: must be a finite number >= 1, "
                             f"got {self.weight_cap!r}")
        if int(self.history) != self.history or self.history < 0:
            raise ValueError(f"aggregation.history: must be an integer >= 0, got {self.history!r}")

    @classmethod
    def from_config(cls, section: Mapping[str, object] | None) -> "AggregationSettings":
        """Settings from the ``aggregation`` config section (``None``: defaults)."""
        section = dict(section or {})
        known = {k: section[k] for k in ("rule", "trim_fraction", "norm_factor", "weight_cap", "history")
                 if k in section}
        return cls(**known)  # type: ignore[arg-type]


def weight_problem(claimed: float, queried: int | None) -> str | None:
    """Why a reply's ``num-examples`` cannot be used (``None``: usable)."""
    if queried is None:
        return "no num-samples known from the properties query"
    if claimed > queried:
        return f"num-examples {claimed:g} exceeds the {queried} samples it reported when queried"
    return None


def bounded_weight(claimed: float, queried: int, all_queried: Sequence[int], cap: float) -> float:
    """``min(claimed, queried)`` capped at ``cap`` times the median of ``all_queried``."""
    limit = cap * float(np.median(np.asarray(all_queried, dtype=np.float64))) if all_queried else math.inf
    return float(min(float(claimed), float(queried), limit))


def update_norm(state: State, reference: State) -> float:
    """L2 norm of ``state - reference`` over the floating arrays (float64; inf if it overflows).

    Integer entries (BatchNorm's ``num_batches_tracked``) are counters, not weights: left out.
    """
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for name, value in state.items():
            if not np.issubdtype(np.asarray(value).dtype, np.floating):
                continue
            diff = np.asarray(value, dtype=np.float64) - np.asarray(reference[name], dtype=np.float64)
            total += float(np.sum(diff * diff))
    return math.sqrt(total) if math.isfinite(total) else math.inf


def norm_threshold(norms: Sequence[float], history: Sequence[float], factor: float,
                   model_norm: float = math.inf) -> float:
    """``factor`` times the reference norm (inf when there is none).

    The reference is the lower median of ``norms`` pooled with ``history``, but
    at most ``model_norm`` (the norm of the global weights being updated): an
    honest round moves the model by a fraction of its size, so even a round in
    which every reply is corrupted cannot pass.
    """
    pool = np.sort(np.asarray(list(norms) + list(history), dtype=np.float64))
    candidates = [float(pool[(pool.size - 1) // 2])] if pool.size else []
    if math.isfinite(model_norm) and model_norm > 0:
        candidates.append(float(model_norm))
    reference = min(candidates, default=math.inf)
    return factor * reference if reference > 0 and math.isfinite(reference) else math.inf


def norm_rejection(norm: float, threshold: float, factor: float) -> str:
    """Why a reply with update norm ``norm`` above ``threshold`` (``factor`` x the reference) is rejected."""
    return (f"{NORM_REJECTION}{norm:.3g} exceeds {threshold:.3g} = {factor:g} x the reference norm "
            f"({threshold / factor:.3g})")


def combine(states: Sequence[State], weights: Sequence[float], settings: AggregationSettings
            ) -> dict[str, np.ndarray]:
    """Combine pruned states entry-wise by ``settings.rule`` (float64 result for floating entries).

    ``fedavg`` is the ``weights``-weighted mean; ``median`` and ``trimmed_mean``
    ignore the weights (as Flower's FedMedian and FedTrimmedAvg do). Integer
    entries are never averaged: they take the lower median, an exact integer.
    """
    if not states:
        raise ValueError("combine: no states")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(states),) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"combine: weights must be finite, >= 0 and not all 0, got {w.tolist()}")
    out: dict[str, np.ndarray] = {}
    for name in states[0]:
        if not np.issubdtype(np.asarray(states[0][name]).dtype, np.floating):
            ints = np.sort(np.stack([np.asarray(s[name]) for s in states]), axis=0)
            out[name] = ints[(len(states) - 1) // 2]
            continue
        stack = np.stack([np.asarray(s[name], dtype=np.float64) for s in states])
        if settings.rule == "median":
            out[name] = np.median(stack, axis=0)
        elif settings.rule == "trimmed_mean":
            out[name] = trim_mean(stack, settings.trim_fraction)
        else:
            out[name] = np.tensordot(w / w.sum(), stack, axes=1)
    return out


def aggregate_problem(new: State, old: State, threshold: float) -> str | None:
    """Why the combined pruned state must not replace ``old`` (``None``: it may)."""
    for name, value in new.items():
        if not np.all(np.isfinite(value)):
            return f"aggregate {name} contains NaN or inf"
    norm = update_norm(new, old)
    if norm > threshold:
        return f"aggregate update norm {norm:.3g} exceeds the threshold {threshold:.3g}"
    return None
