"""A cost model learnt from what the devices measured (``cost.source=measured``).

Every train reply says how long the node trained (``train-time-s``) on how many
samples, at which level, with which variant, and (where it can) how much
energy that took. From the exploration rounds, which run every variant on the
nodes, this module fits:

* ``s(c, l, m)``: seconds per sample of cluster ``c`` at level ``l`` with variant
  ``m`` (median over the replies of that cell);
* ``P(c, l)``: watts while training, from replies whose energy was metered or
  declared (median of energy / training time);
* ``overhead_s``: what a round costs beyond its slowest client's training and
  transfer (message handling, polling, the server's evaluation): median over
  rounds of the measured round time minus that client's part. Transfers use the
  declared link rates; when the rounds were shorter than those rates allow
  (the links are faster than declared), every link's rate is scaled up by
  ``1 / link_scale`` to what the rounds show and the overhead is 0.
* ``cluster_overhead_s``: where the server timed each reply's arrival
  (``arrival_s``, seconds after the round's push), the overhead per cluster:
  the median of its replies' arrival minus their training and transfer (the
  node's own part: picking the message up, starting the ClientApp, handling
  it, on the node's own, maybe slow, CPU) plus the median of the rounds' time
  after their last arrival (the server's part). A round of fast nodes only
  then costs less than one that waits for a slow node, which one overhead for
  every cluster cannot say.

The contract's cost model is ``time = W / flops_per_s + 2 size / bytes_per_s``
with ``W = epochs * samples * flops_per_sample``; the fit is written into it
as ``log s(c, l, m) = log g_m - log f(c, l)`` (least squares in logs,
alternating, with ``g`` of the first observed variant pinned to its FLOPs), so
every planner keeps working: ``flops_per_sample = g_m`` (a variant's
*effective* FLOPs: a pruned network is rarely as much faster as its FLOPs
say), ``flops_per_s = f(c, l)``, ``joules_per_flop = P(c, l) / f(c, l)`` and
every cluster's ``overhead_s``. A level that no reply measured keeps its
declared speed ratio to a measured level of its cluster; a cluster that no
reply measured keeps its declared speeds; a level without measured energy keeps
its declared ``joules_per_flop``.

:class:`DriftTest` and :func:`recalibrated` follow the round times during the
training rounds: when the measured round time leaves the plan's by more than a
tolerance for a few rounds in a row, the clusters' speeds are refitted from
those rounds' replies (variants kept) and the run re-plans.

No flwr, no torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Iterable, Mapping, Sequence

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import Cluster, Level, Scenario

#: Energy sources, strongest first (as :data:`depl_fl.task.energy_meter.SOURCES`).
ENERGY_SOURCES = ("meter", "declared", "model")


@dataclass(frozen=True)
class ReplyCost:
    """One measured train reply."""

    cluster: str
    level: int
    model: str
    num_samples: int
    train_time_s: float
    energy_j: float | None = None
    energy_source: str = "model"
    #: Seconds from the round's push to the reply's arrival at the server (None: not timed).
    arrival_s: float | None = None


@dataclass(frozen=True)
class RoundCost:
    """One measured round: its replies and its time (the part comparable with a training round)."""

    wall_s: float
    replies: tuple[ReplyCost, ...]


@dataclass(frozen=True)
class CostFit:
    """Measured cells: seconds per sample, training watts, per-round overhead."""

    seconds_per_sample: dict[tuple[str, int, str], float]
    watts: dict[tuple[str, int], float]
    overhead_s: float | None
    replies: int
    rounds: int
    energy_source: str = "model"
    #: Measured transfer time / declared transfer time (1: the declared links).
    link_scale: float = 1.0
    #: Cluster -> its round overhead from the replies' arrival times (see the module doc).
    cluster_overhead_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (results.json ``cost``)."""
        return {"seconds_per_sample": [{"cluster": c, "level": lv, "model": m, "s": s}
                                       for (c, lv, m), s in sorted(self.seconds_per_sample.items())],
                "watts": [{"cluster": c, "level": lv, "w": w} for (c, lv), w in sorted(self.watts.items())],
                "overhead_s": self.overhead_s, "link_scale": self.link_scale,
                "cluster_overhead_s": dict(sorted(self.cluster_overhead_s.items())), "replies": self.replies,
                "rounds": self.rounds, "energy_source": self.energy_source}


def weakest_source(sources: Iterable[str]) -> str:
    """The weakest energy source of several (``meter`` < ``declared`` < ``model``); ``model`` if none."""
    ranks = [ENERGY_SOURCES.index(s) for s in sources if s in ENERGY_SOURCES]
    return ENERGY_SOURCES[max(ranks)] if ranks else "model"


def transfer_s(scenario: Scenario, cluster: str, model: str) -> float:
    """Modelled transfer time of one client (download and upload of the variant)."""
    return 2.0 * scenario.model(model).size_bytes / scenario.cluster(cluster).bytes_per_s


def fit_costs(rounds: Sequence[RoundCost], scenario: Scenario) -> CostFit:
    """Measured seconds per sample, watts and round overhead (see the module doc).

    ``scenario`` gives the local epochs and the transfer times that the
    overhead leaves out (a link's rate stays the declared one).
    """
    per_cell: dict[tuple[str, int, str], list[float]] = {}
    per_power: dict[tuple[str, int], list[float]] = {}
    sources, residuals, count = [], [], 0
    epochs = scenario.local_epochs
    for rnd in rounds:
        busy, transfers = [], []
        for r in rnd.replies:
            if r.num_samples <= 0 or not r.train_time_s > 0 or not math.isfinite(r.train_time_s):
                continue
            count += 1
            per_cell.setdefault((r.cluster, r.level, r.model), []).append(
                r.train_time_s / (epochs * r.num_samples))
            sources.append(r.energy_source)
            measured = r.energy_source in ("meter", "declared")
            if r.energy_j is not None and measured and math.isfinite(r.energy_j):
                per_power.setdefault((r.cluster, r.level), []).append(r.energy_j / r.train_time_s)
            busy.append(r.train_time_s)
            transfers.append(transfer_s(scenario, r.cluster, r.model))
        if busy and math.isfinite(rnd.wall_s):
            residuals.append((rnd.wall_s - max(b + t for b, t in zip(busy, transfers, strict=True)),
                              rnd.wall_s - max(busy), max(transfers)))
    overhead, scale = _overhead(residuals)
    return CostFit({k: float(median(v)) for k, v in per_cell.items()},
                   {k: float(median(v)) for k, v in per_power.items()},
                   overhead, count, len(rounds), weakest_source(sources), scale,
                   cluster_overheads(rounds, scenario, scale))


def _timed(r: ReplyCost) -> bool:
    return (r.num_samples > 0 and r.train_time_s > 0 and math.isfinite(r.train_time_s)
            and r.arrival_s is not None and math.isfinite(r.arrival_s))


def cluster_overheads(rounds: Sequence[RoundCost], scenario: Scenario,
                      link_scale: float = 1.0) -> dict[str, float]:
    """Per cluster: its nodes' median part beyond training and transfer, plus the server's part.

    Only rounds whose every reply was timed count for the server's part
    (``wall - last arrival``); a cluster none of whose replies was timed is
    left out (it keeps the one overhead).
    """
    lags: dict[str, list[float]] = {}
    after_last: list[float] = []
    for rnd in rounds:
        timed = [r for r in rnd.replies if _timed(r)]
        for r in timed:
            lags.setdefault(r.cluster, []).append(
                float(r.arrival_s) - r.train_time_s - link_scale * transfer_s(scenario, r.cluster, r.model))
        if timed and len(timed) == len(rnd.replies) and math.isfinite(rnd.wall_s):
            after_last.append(rnd.wall_s - max(float(r.arrival_s) for r in timed))
    if not after_last:
        return {}
    server = max(float(median(after_last)), 0.0)
    return {c: max(float(median(v)), 0.0) + server for c, v in lags.items()}


def _overhead(residuals: Sequence[tuple[float, float, float]]) -> tuple[float | None, float]:
    """``(overhead_s, link_scale)`` from the rounds' residuals.

    Each residual is ``(wall - max(train + transfer), wall - max(train), max transfer)``.
    """
    if not residuals:
        return None, 1.0
    overhead = float(median(r[0] for r in residuals))
    if overhead >= 0:
        return overhead, 1.0
    ratios = [max(r[1], 0.0) / r[2] for r in residuals if r[2] > 0]
    return 0.0, float(min(max(median(ratios), 1e-3), 1.0)) if ratios else 1.0


def _alternate(cells: Mapping[tuple[str, int, str], float], pinned: Mapping[str, float],
               fit_models: bool, anchor: str | None,
               iterations: int = 50) -> tuple[dict[str, float], dict[tuple[str, int], float]]:
    """Least squares of ``log s = x_m - y_cl`` over the measured cells.

    ``pinned`` starts x; the ``anchor`` variant keeps its value (the gauge).
    """
    logs = {k: math.log(v) for k, v in cells.items()}
    x = dict(pinned)
    y: dict[tuple[str, int], float] = {}
    for _ in range(iterations if fit_models else 1):
        by_level: dict[tuple[str, int], list[float]] = {}
        for (c, lv, m), ls in logs.items():
            by_level.setdefault((c, lv), []).append(x[m] - ls)
        y = {k: sum(v) / len(v) for k, v in by_level.items()}
        if not fit_models:
            break
        by_model: dict[str, list[float]] = {}
        for (c, lv, m), ls in logs.items():
            by_model.setdefault(m, []).append(ls + y[(c, lv)])
        new_x = {**x, **{m: sum(v) / len(v) for m, v in by_model.items()}}
        if anchor is not None:  # the gauge: the anchor variant keeps its FLOPs
            shift = pinned[anchor] - new_x[anchor]
            new_x = {m: v + shift for m, v in new_x.items()}
        x = new_x
    return x, y


def _level_speeds(cluster: Cluster, fitted: Mapping[int, float]) -> list[float]:
    """log speeds of every level: fitted ones, the rest from the declared ratio to the fitted ones."""
    declared = [math.log(lv.flops_per_s) for lv in cluster.levels]
    if not fitted:
        return declared
    shift = sum(fitted[i] - declared[i] for i in fitted) / len(fitted)
    return [fitted.get(i, declared[i] + shift) for i in range(len(cluster.levels))]


def fitted_scenario(scenario: Scenario, fit: CostFit, *, fit_models: bool = True) -> tuple[Scenario, dict]:
    """``scenario`` with the fitted costs written into the contract's fields (see the module doc).

    Returns the new scenario and a report: per cluster and level whether its
    speed was ``measured``, ``scaled`` (declared ratio to a measured level) or
    ``declared``, whether its energy was measured, and the median relative error
    of the fitted model on the measured cells.
    """
    cells = {k: v for k, v in fit.seconds_per_sample.items()
             if any(c.id == k[0] for c in scenario.clusters) and any(m.id == k[2] for m in scenario.models)
             and 0 <= k[1] < len(scenario.cluster(k[0]).levels)}
    pinned = {m.id: math.log(m.flops_per_sample) for m in scenario.models}
    observed = {m for _, _, m in cells}
    anchor = next((m.id for m in scenario.models if m.id in observed), None)
    x, y = _alternate(cells, pinned, fit_models, anchor) if cells else (pinned, {})
    refit = observed - {anchor}
    models = tuple(dataclasses.replace(m, flops_per_sample=math.exp(x[m.id])) if m.id in refit else m
                   for m in scenario.models)
    clusters, report = [], {}
    for cl in scenario.clusters:
        fitted = {lv: v for (c, lv), v in y.items() if c == cl.id}
        speeds = _level_speeds(cl, fitted)
        levels = []
        for i, (lv, log_f) in enumerate(zip(cl.levels, speeds, strict=True)):
            how = "measured" if i in fitted else ("scaled" if fitted else "declared")
            f = math.exp(log_f) if fitted else lv.flops_per_s
            watts = fit.watts.get((cl.id, i))
            levels.append(Level(f, watts / f if watts is not None else lv.joules_per_flop))
            report[f"{cl.id}/{i}"] = {"speed": how,
                                      "energy": "measured" if watts is not None else "declared",
                                      "flops_per_s": f, "declared_flops_per_s": lv.flops_per_s}
        common = cl.overhead_s if fit.overhead_s is None else fit.overhead_s
        overhead = fit.cluster_overhead_s.get(cl.id, common)
        clusters.append(dataclasses.replace(cl, levels=tuple(levels), overhead_s=float(overhead),
                                            bytes_per_s=cl.bytes_per_s / fit.link_scale))
    errors = [abs(math.exp(x[m] - y[(c, lv)]) / s - 1.0) for (c, lv, m), s in cells.items()]
    return (dataclasses.replace(scenario, clusters=tuple(clusters), models=models),
            {"levels": report, "median_relative_error": float(median(errors)) if errors else None,
             "overhead_s": fit.overhead_s, "cells": len(cells)})


@dataclass
class DriftTest:
    """Measured round time against the plan's: drift after ``rounds`` rounds in a row off by ``tolerance``.

    A ratio ``wall / planned`` above ``1 + tolerance`` (or below ``1 / (1 + tolerance)``)
    counts; ``rounds`` such rounds in a row on the same side are a drift.
    """

    tolerance: float = 0.25
    rounds: int = 2
    ratios: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tolerance) and self.tolerance > 0):
            raise ValueError(f"cost.drift_tolerance: must be > 0, got {self.tolerance!r}")
        if int(self.rounds) < 1:
            raise ValueError(f"cost.drift_rounds: must be >= 1, got {self.rounds!r}")

    def observe(self, planned_s: float, wall_s: float) -> str | None:
        """Add one round; the re-plan reason when the last ``rounds`` rounds drifted, else None."""
        if not (planned_s > 0 and math.isfinite(wall_s)):
            return None
        self.ratios.append(wall_s / planned_s)
        last = self.ratios[-int(self.rounds):]
        if len(last) < int(self.rounds):
            return None
        high, low = 1.0 + self.tolerance, 1.0 / (1.0 + self.tolerance)
        if all(r > high for r in last) or all(r < low for r in last):
            self.ratios.clear()  # the re-plan resets the comparison
            return (f"round time drift: measured {median(last):.2f} x the plan's over "
                    f"{len(last)} rounds")
        return None


def recalibrated(scenario: Scenario, rounds: Sequence[RoundCost]) -> tuple[Scenario, dict]:
    """The clusters' speeds and the overhead refitted from the training rounds ``rounds`` (variants kept)."""
    return fitted_scenario(scenario, fit_costs(rounds, scenario), fit_models=False)


#: Reply metric -> round record key of what a train reply measured.
_REPLY_KEYS = {"train-time-s": "train_time_s", "reply-time-s": "reply_time_s", "bytes-down": "bytes_down",
               "bytes-up": "bytes_up", "energy-j": "energy_j", "level": "level",
               "level-threads": "level_threads", "level-cpus": "level_cpus"}


def reply_measurement(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """What one train reply measured, as round record keys (``energy_source`` from its code)."""
    out: dict[str, Any] = {}
    for key, name in _REPLY_KEYS.items():
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = int(value) if name in ("level", "level_threads", "level_cpus",
                                               "bytes_down", "bytes_up") else float(value)
    code = metrics.get("energy-source-code")
    known = isinstance(code, (int, float)) and 0 <= int(code) < len(ENERGY_SOURCES)
    out["energy_source"] = ENERGY_SOURCES[int(code)] if known and "energy_j" in out else "model"
    return out


def round_measurement(replies: Mapping[str, Mapping[str, Any]],
                      modelled_energy: Mapping[str, float]) -> dict[str, Any]:
    """A round's measured totals from its replies (client id -> :func:`reply_measurement`).

    ``measured_energy_j`` sums the replies' training energy, a reply without
    one counting its modelled client energy (``modelled_energy``); the round's
    ``energy_source`` is the weakest of its replies'. Transfer and activation
    energy are in the modelled ``energy_j`` only.
    """
    energy = sum(float(r["energy_j"]) if "energy_j" in r else float(modelled_energy.get(cid, 0.0))
                 for cid, r in replies.items())
    times = [float(r["train_time_s"]) for r in replies.values() if "train_time_s" in r]
    return {"energy_source": weakest_source(r.get("energy_source", "model") for r in replies.values()),
            "measured_energy_j": float(energy),
            "train_time_s": max(times) if times else None,
            "bytes_down": int(sum(int(r.get("bytes_down", 0)) for r in replies.values())),
            "bytes_up": int(sum(int(r.get("bytes_up", 0)) for r in replies.values()))}


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def round_cost_of(scenario: Scenario, decisions: Sequence[RoundDecision],
                  replies: Mapping[str, Mapping[str, Any]], wall_s: float) -> RoundCost:
    """A round's :class:`RoundCost`: the replies of the ``decisions``' clients (one per group)."""
    out = []
    for decision in decisions:
        for cid in decision.clients:
            r = replies.get(cid)
            if r is None or "train_time_s" not in r:
                continue
            client = scenario.client(cid)
            level = int(r.get("level", decision.levels.get(client.cluster, 0)))
            out.append(ReplyCost(client.cluster, level, decision.model, client.num_samples,
                                 float(r["train_time_s"]), r.get("energy_j"),
                                 str(r.get("energy_source", "model")), _finite_or_none(r.get("arrival_s"))))
    return RoundCost(float(wall_s), tuple(out))
