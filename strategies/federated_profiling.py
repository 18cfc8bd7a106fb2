"""Federated profiling: the loss profile measured by exploration rounds on the real clients.

The ServerApp never opens training data. Before planning, :class:`FederatedProfiler`
runs ``profile.explore.rounds`` exploration rounds through the Flower grid,
with the strategy's own round code (:meth:`DepLStrategy.configure_train` /
:meth:`DepLStrategy.aggregate_train`, one FedAvg-round implementation):

* with ``profile.explore.clients: cheapest`` (the default with tracking) the rounds draw on the
  clients of the cheapest clusters only (a round of the largest variant
  costs least per sample there), the clusters a dependable plan trains on
  when they are enough;
* the learning curve's rate of an exploration on less than the whole federation (the cheapest
  clusters, ``profile.explore.max_clients``) is read at ``r = 1`` through the rounds' ``r_eff``
  (:func:`depl_fl.tracking.learning_curve.ratio_factor`; ``profile.plan_regime.rate_at_full``);
* every round splits the clients into one disjoint, seeded random group per
  model variant (random group sizes, so the rounds see different sample
  fractions ``r`` and the data exponents ``a``/``b`` are identifiable; with
  ``profile.explore.group_sizes: by_cost`` (opt-in), the largest group
  trains the cheapest variant and the smallest the costliest,
  :func:`~depl_fl.orchestration.exploration.sizes_by_cost`); each
  group trains its variant at its cluster's cheapest level, all groups in
  the same round (one message exchange);
* the server evaluates every group's aggregate (a run observation of that
  variant) and continues from the sample-weighted merge of the groups'
  aggregates, so the exploration rounds **also train the job's model**: the
  plan starts from their model and loss instead of a fresh model;
* in the rounds listed in ``profile.explore.switch_rounds`` each group's
  observation is a switch: the global model was last trained (and is
  evaluated before the round) as another group's variant, the group trains
  its own. Every group starts from the global model, as a plan's switch
  does: starting from another group's aggregate (a small non-IID group's
  model that evaluates badly) would measure a recovery, not a switch (large
  negative jumps with no spread, which plans would exploit);
* every group's set records its label coverage (:mod:`depl_fl.orchestration.label_coverage`);
  the sample fraction of an observation is its set's ``r_eff = c_S * r``,
  and the sets' range of coverage becomes ``loss.min_coverage`` /
  ``loss.max_uncovered`` (docs/CONTRACT_V2.md);
* exploring ends after any round whose merged model meets the target by the
  job's stop rule (:mod:`depl_fl.orchestration.stop_rule`, the rule the run
  controller stops a training round on; ``profile.explore.stop_when_met``,
  default true): the job then plans no training round (met during the
  exploration) and the profile is fitted from the rounds so far;
* it also ends, from round ``profile.explore.value_from_round`` on, after any
  round after which one more round would not pay for itself: the dependable
  plan from the model at hand costs no more than that round plus the
  dependable plan from the loss the round would reach, not below the target
  loss with ``profile.explore.value_floor`` (opt-in)
  (:mod:`depl_fl.orchestration.exploration_value`; the energies judged are in
  ``profile.values``); the job then plans from there. It is not judged while
  the exploration is on the fresh model's plateau (the learning curve's rate
  is not measurable there, :func:`~depl_fl.orchestration.exploration_value.value_judged`;
  ``profile.explore.plateau_rounds`` rounds past it, default 3);
* with ``profile.prior`` (another federation's profile of the same network and
  dataset, :mod:`depl_fl.orchestration.profile_prior`) the prior's
  observations join the fit and the exploration only calibrates them: at least
  ``profile.explore.prior_rounds`` rounds, the value stop judged from round 1 (once
  this job's own trajectory has left the plateau; the plan regime below the
  explored losses reads this job's trajectory only); with
  ``profile.explore.prior_regime`` (default true) the value stop is judged from
  round ``prior_rounds`` instead, and while this job's own trajectory shows no
  rate yet, the plateau guard and each variant's learning-curve rate read the
  prior's trajectory (:mod:`depl_fl.orchestration.prior_regime`; the curve
  still starts at this job's own last loss);
* the merged model's per-variant trajectory gives the evaluation noise:
  ``loss.run[m].eval_std`` per level (:func:`depl_fl.tracking.noise.fit_eval_std`
  on the validation split, of the test split's size in simulation).

The observations are fitted with :func:`depl_fl.tracking.estimation.fit_loss_profile`
(the data exponents by :func:`~depl_fl.tracking.estimation.fit_data_exponents`),
and, with ``profile.plan_regime`` (the default), completed below the
exploration's last loss by :mod:`depl_fl.tracking.learning_curve`. The online
tracker refines a profile without the plan regime during the job as before;
a plan-regime profile is followed by the trend filter instead
(:mod:`depl_fl.tracking.trend`).

Accounting and deadline: every exploration round is a ``phase: profile``
record with its modelled energy and time (the contract's cost model). The
profile rounds are part of the job: their modelled time counts against
``target.deadline_s`` (the planner gets what is left; ``target.max_rounds``
caps the planned training rounds only) and their energy is in ``total_energy_j``.

Cache: the fitted profile is stored under ``profile.cache_dir`` keyed by the
configuration (:func:`depl_fl.orchestration.profiling.profile_key`) **and** what the
nodes report about their data (per-client cluster, ``num-samples`` and label
histogram), so another federation's profile is never reused. A later job of
the same federation takes the cached profile as its prior (no exploration
rounds) and records the reuse together with
what the profile cost when it was made.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from depl_fl.contract.plan import RoundDecision, Targets
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import client_energy
from depl_fl.errors import InfeasibleError, ScenarioError
from depl_fl.orchestration.exploration import (
    ExploreProgress,
    cheapest_clients,
    cheapest_levels,
    merge_states,
    round_clients,
    round_cost,
    sizes_by_cost,
    split_groups,
    worst,
    write_json_atomic,
)
from depl_fl.orchestration.label_coverage import LabelCoverage
from depl_fl.orchestration.prior_regime import prior_oscillation, prior_rates
from depl_fl.orchestration.profile_fit import (
    anchor_at_zero,
    exploration_trends,
    local_steps,
    plan_oscillation,
    plan_regime_of,
    reads_rate_at_full,
    with_eval_std,
    with_measured_sem,
    with_plan_regime,
    with_set_shift,
)
from depl_fl.orchestration.profile_prior import prior_observations, task_of
from depl_fl.orchestration.profiling import data_fingerprint, federated_key
from depl_fl.orchestration.reply_failures import no_usable_reply
from depl_fl.runs.runconfig import variant_list
from depl_fl.runs.step_clock import StepClock
from depl_fl.tracking.divergence import divergence_reason, diverging
from strategies.exchange import send_and_receive

LOG = logging.getLogger("depl_fl.server")
#: Exploration rounds use server-round numbers from here on (their own client seeds).
PROFILE_ROUND_OFFSET = 100_000


def validation_loss(evaluate_fn: Any, server_round: int, arrays: ArrayRecord, compression: float) -> float:
    """The validation loss of a variant of ``arrays``: ``evaluate_fn.validation_loss`` when the
    central evaluation offers it (no test split, no margin), else its full evaluation's ``loss``."""
    alone = getattr(evaluate_fn, "validation_loss", None)
    if alone is not None:
        return float(alone(arrays, compression))
    return float(evaluate_fn(server_round, arrays, compression)["loss"])


def silenced_start(network: Any, arrays: ArrayRecord, compression: float) -> ArrayRecord:
    """``arrays`` made to compute the ``compression`` variant's function (a plan's switch start)."""
    from depl_fl.task.pruning import silence_to_variant
    from strategies.depl_strategy import arrays_to_state, state_to_arrays

    return state_to_arrays(silence_to_variant(network, arrays_to_state(arrays), compression))


@dataclass
class _Group:
    decision: RoundDecision
    start: ArrayRecord
    previous: str | None
    result: ArrayRecord | None = None
    replied: list[str] = field(default_factory=list)
    missing: list[dict[str, str]] = field(default_factory=list)
    train_loss: float | None = None
    loss_before: float | None = None
    loss_after: float | None = None
    #: Client id -> what its accepted reply measured (depl_fl.tracking.device_costs.reply_measurement).
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Array bytes of the group's messages, measured and modelled (DepLStrategy.round_bytes).
    bytes: dict[str, int] = field(default_factory=dict)


class FederatedProfiler:
    """Exploration rounds on the real clients, fitted into the loss profile (see module doc).

    Parameters
    ----------
    cfg : mapping
        The run configuration (``profile``, ``seed``, model variants).
    provisional_scenario : callable
        ``provisional_scenario(properties)``: the run's scenario with a
        placeholder loss section, for the cost model of the exploration rounds.
    """

    def __init__(self, cfg: Mapping[str, Any], provisional_scenario: Any, scenario_of: Any = None,
                 prior: Any = None) -> None:
        self.cfg = cfg
        #: Another federation's profile of the task (``profile_prior.ProfilePrior``; None without).
        self.prior = prior
        self.provisional_scenario = provisional_scenario
        #: ``scenario_of(properties, loss_doc)``: the run's scenario with a fitted profile (value stop).
        self.scenario_of = scenario_of
        #: The exploration round after which one more round could not pay for itself (None: not so).
        self.value_round: int | None = None
        #: Per judged round, the value stop's energies (:class:`ExplorationValue` as a dict).
        self.values: list[dict[str, Any]] = []
        self.models = dict(variant_list(cfg))
        self.loss_doc: dict[str, Any] | None = None
        self.records: list[dict[str, Any]] = []
        self.reused = False
        #: A reused profile's exploration rounds, from its cache file (empty when this job explored):
        #: what the exploration learned is judged on them as on :attr:`records`, whose costs this job
        #: did not pay.
        self.cached_records: list[dict[str, Any]] = []
        self.cost_when_made: dict[str, Any] | None = None
        self.cache_file: Path | None = None
        self.wall_s = 0.0
        self.coverage = LabelCoverage({})
        #: Standard error of the last evaluated loss (``loss-sem``; None when not measured).
        self.loss_sem: float | None = None
        #: Bootstrap-t stop margin of the last evaluated loss (``loss-margin``; None when not measured).
        self.loss_margin: float | None = None
        #: The exploration round after which the model met the target by the stop rule (None: not met).
        self.met_round: int | None = None
        #: The variant whose (worst) loss the stop rule judged then.
        self.met_model: str | None = None
        #: Per variant, the merged model's validation losses and the rounds' r_eff (eval noise fit).
        self.trajectories: dict[str, tuple[list[float], list[float]]] = {}
        #: The client sets the exploration trained on (coverage bounds).
        self.pilot_sets: list[list[str]] = []
        #: An unfinished exploration (set after every exploration round, ``None`` once fitted).
        self.progress: ExploreProgress | None = None
        self.sem_points: dict[str, list[tuple[float, float]]] = {}
        #: ``model`` or ``wall``: what the exploration's share of the deadline counts (set by the server).
        self.clock = "model"
        #: The exploration rounds' measured costs (depl_fl.tracking.device_costs.RoundCost), for
        #: ``cost.source=measured``.
        self.round_costs: list[Any] = []
        #: Run every level in turn (set by the server for ``cost.source=measured``).
        self.measure_levels = False
        #: With ``profile.plan_regime.anchor: trend``: where the plan starts, the worst variant's trend at
        #: the exploration's end, ``{"mean", "std"}`` (None: at the measured loss).
        self.start_trend: dict[str, float] | None = None
        #: The variants whose learning-curve rate the last fit read from the prior's trajectory
        #: (``profile.explore.prior_regime``; empty without a prior).
        self.rates_from_prior: list[str] = []
        #: Why the exploration ended the job (the divergence stop), else ``None``: no profile, no plan.
        self.stop_reason: str | None = None
        #: The last fit and its inputs' fingerprint (:meth:`_fit`).
        self._last_fit: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    #: What a checkpoint keeps of a profiler: a resumed job reports the rounds it paid for, and
    #: one killed during the exploration continues it (``progress``).
    CHECKPOINT_STATE = ("loss_doc", "records", "reused", "cost_when_made", "cache_file", "wall_s",
                        "progress", "loss_sem", "round_costs", "loss_margin", "met_round",
                        "met_model", "value_round", "values", "start_trend", "rates_from_prior",
                        "cached_records")

    def checkpoint_state(self) -> dict[str, Any]:
        """The exploration's outcome and records, for a checkpoint."""
        return {k: getattr(self, k) for k in self.CHECKPOINT_STATE}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back :meth:`checkpoint_state` after a restart (no exploration round is repeated).

        With an unfinished exploration, :meth:`run` then continues it after round
        ``progress.done`` from the checkpointed model.
        """
        for key in self.CHECKPOINT_STATE:
            if key in state:
                setattr(self, key, state[key])

    # -------------------------------------------------------------- accounting
    @property
    def energy_j(self) -> float:
        """Modelled energy of this job's exploration rounds (0 for a reused profile)."""
        return float(sum(r["energy_j"] for r in self.records))

    @property
    def time_s(self) -> float:
        """Modelled time of this job's exploration rounds."""
        return float(sum(r["round_time_s"] for r in self.records))

    def summary(self) -> dict[str, Any]:
        """The ``profile`` block of results.json."""
        return {"source": "federated", "reused": self.reused, "rounds": len(self.records),
                "energy_j": self.energy_j, "time_s": self.time_s, "wall_s": self.wall_s,
                "cache_file": str(self.cache_file) if self.cache_file else None,
                "cost_when_made": self.cost_when_made, "met_round": self.met_round,
                "met_model": self.met_model, "value_round": self.value_round, "values": self.values,
                "prior": self.prior.to_dict() if self.prior is not None else None,
                "rates_from_prior": self.rates_from_prior}

    # -------------------------------------------------------------- main entry
    def run(self, strategy: Any, grid: Grid, arrays: ArrayRecord, evaluate_fn: Any, timeout: float,
            train_config: ConfigRecord) -> ArrayRecord:
        """Profile (or reuse a cached profile); returns the arrays the job continues from.

        Also shortens ``strategy.targets``'s deadline by the exploration rounds'
        modelled time (they count against the deadline; ``max_rounds`` caps the
        planned training rounds only). After every exploration round the
        strategy's ``on_round`` hook checkpoints the job (see :meth:`restore`).
        """
        t0 = time.perf_counter() - (self.progress.wall_s if self.progress is not None else 0.0)
        prof = self.cfg["profile"]
        key = federated_key(self.cfg, strategy.properties,
                            None if self.prior is None else self.prior.observations)
        self.cache_file = Path(str(prof["cache_dir"])) / f"profile-fed-{key}.json"
        # A resumed exploration goes on even if the profile got cached meanwhile: its model is the job's.
        if self.progress is None and self.cache_file.exists() and not prof.get("force"):
            cached = json.loads(self.cache_file.read_text(encoding="utf-8"))
            self.loss_doc, self.reused = cached["loss"], True
            self.cost_when_made = cached.get("profile", {}).get("cost")
            self.cached_records = list((cached.get("fit_inputs") or {}).get("records") or [])
            made = self.cost_when_made or {}
            LOG.info("loss profile: reusing %s (made by %s exploration rounds, %.4g J)", self.cache_file,
                     made.get("rounds"), made.get("energy_j", 0))
            return arrays
        arrays, observations, fresh_loss, current_loss = self._explore(strategy, grid, arrays, evaluate_fn,
                                                                        timeout, train_config, t0)
        if self.stop_reason is not None:  # a diverging exploration: nothing worth fitting or caching
            self.wall_s, self.progress = time.perf_counter() - t0, None
            return arrays
        if not observations:  # every client failed every round: say why, not that nothing can be fitted
            raise ScenarioError(no_usable_reply("exploration", self.records))
        fitted = self._fit(observations, fresh_loss, strategy.properties)
        self.wall_s, self.progress = time.perf_counter() - t0, None
        self.cost_when_made = {"rounds": len(self.records), "energy_j": self.energy_j, "time_s": self.time_s,
                               "wall_s": self.wall_s}
        write_json_atomic(self.cache_file, {"loss": fitted, "profile": {
            "method": "federated exploration rounds (strategies/federated_profiling.py)",
            "observations": len(observations), "cost": self.cost_when_made,
            "data": data_fingerprint(strategy.properties)}, "task": task_of(self.cfg),
            "fit_inputs": self.fit_inputs(observations, fresh_loss)})
        # The job continues from the exploration model: the plan starts at its (worst-variant) loss,
        # or its trend (anchor trend).
        start = current_loss if self.start_trend is None else self.start_trend["mean"]
        self.loss_doc = {**fitted, "initial": start}
        strategy.targets = self._remaining(strategy.targets)
        LOG.info("loss profile: %d exploration rounds, %.4g J, %.4g s modelled; loss %.4f -> %.4f; "
                 "cached at %s",
                 len(self.records), self.energy_j, self.time_s, fresh_loss, current_loss, self.cache_file)
        return arrays

    @property
    def deadline_used_s(self) -> float:
        """What the exploration used of the deadline: modelled time, or wall time with ``clock=wall``."""
        if self.clock != "wall":
            return self.time_s
        return self.wall_s if self.progress is None else self.progress.wall_s

    def _remaining(self, targets: Targets) -> Targets:
        left = targets.deadline_s - self.deadline_used_s
        if left <= 0:
            raise InfeasibleError(f"the exploration rounds took {self.deadline_used_s:.4g} s of the "
                                  f"{targets.deadline_s:g} s deadline; raise target.deadline_s or lower "
                                  f"profile.explore.rounds")
        return Targets(targets.target_loss, targets.target_prob, left, targets.max_rounds)

    # -------------------------------------------------------------- exploration
    def _explore(self, strategy: Any, grid: Grid, arrays: ArrayRecord, evaluate_fn: Any, timeout: float,
                 train_config: ConfigRecord, t_start: float) -> tuple[ArrayRecord, list[Any], float, float]:
        explore = self.cfg["profile"]["explore"]
        scenario = self.provisional_scenario(strategy.properties)
        strategy.scenario = scenario
        levels = cheapest_levels(scenario)
        clients = self._pool(scenario, sorted(strategy.properties), levels)
        self.coverage = LabelCoverage.of_config(self.cfg, strategy.properties)
        switch_rounds = {int(k) for k in explore.get("switch_rounds") or []}
        flops = [scenario.model(m).flops_per_sample for m in self.models]
        self.sem_points = {m: [tuple(p) for p in pts]
                           for m, pts in getattr(self.progress, "sem_points", {}).items()}
        state = self.progress or self._fresh_progress(evaluate_fn, arrays)
        k, losses, observations = state.done, state.losses, list(state.observations)
        self.trajectories = {m: (list(t[0]), list(t[1])) for m, t in state.trajectories.items()}
        self.pilot_sets = [list(c) for c in state.pilot_sets]
        while (not self._diverging(strategy) and not self._met_now(k, losses)
               and self._explore_more(k, max(losses.values()))
               and not self._worth_stopping(strategy, k, observations, state.fresh_loss)):
            k += 1
            groups = self._groups(k, clients, self._levels(scenario, levels, k), arrays, k in switch_rounds,
                                  strategy.network, flops)
            clock = StepClock()
            self._train(strategy, grid, PROFILE_ROUND_OFFSET + k, groups, train_config, timeout)
            train_wall = clock.mark("exchange")
            arrays, obs = self._observe(strategy, groups, evaluate_fn, k, arrays, losses)
            clock.mark("evaluate_groups")
            observations += obs
            new_losses, test_losses = self._losses(evaluate_fn, k, arrays)
            eval_wall = clock.mark("evaluate")
            # A training round evaluates one variant: its comparable time is the groups' training
            # plus one evaluation.
            comparable = train_wall + eval_wall / max(len(self.models), 1)
            observations += self._merged_observations(k, groups, losses, new_losses)
            self._record(scenario, k, groups, max(losses.values()), new_losses, test_losses,
                         clock.elapsed, comparable)
            clock.mark("record")
            losses = new_losses
            trajectories = {m: (list(t[0]), list(t[1])) for m, t in self.trajectories.items()}
            self.progress = ExploreProgress(k, state.fresh_loss, dict(losses), list(observations),
                                            trajectories,
                                            [list(c) for c in self.pilot_sets], time.perf_counter() - t_start,
                                            {m: list(p) for m, p in self.sem_points.items()})
            # Announced once written: a stop right after the line never loses this round.
            self._checkpoint(strategy, arrays, max(losses.values()))
            clock.mark("write")
            self.records[-1]["steps_s"] = clock.steps()
            self._announce(k)
        return arrays, observations, state.fresh_loss, max(losses.values())

    def _diverging(self, strategy: Any) -> bool:
        """With tracking on: whether the exploration keeps the model worse than the fresh one (the
        training side's divergence stop, :mod:`depl_fl.tracking.divergence`, on the merged models'
        worst-variant losses); if so, set :attr:`stop_reason` and say so."""
        rounds = getattr(strategy, "diverge_rounds", None)
        if not getattr(strategy, "tracking", False) or not self.records:
            return False
        fresh = float(self.records[0]["loss_before"])
        if not diverging([float(r["loss"]) for r in self.records], fresh, rounds):
            return False
        self.stop_reason = divergence_reason(int(rounds), fresh)
        self.records[-1]["stopped"] = self.stop_reason
        LOG.info("exploration round %d: %s; stopping", self.records[-1]["round"], self.stop_reason)
        return True

    def _pool(self, scenario: Scenario, clients: Sequence[str], levels: Mapping[str, int]) -> list[str]:
        """The clients exploration rounds draw from: all, or with ``profile.explore.clients: cheapest``
        those of the clusters where a round of the largest variant costs least per sample (at least
        one client per variant, :func:`depl_fl.orchestration.exploration.cheapest_clients`)."""
        choice = str(self.cfg["profile"]["explore"].get("clients") or "all")
        if choice == "all":
            return list(clients)
        largest = max(scenario.models, key=lambda m: m.flops_per_sample).id
        pool = cheapest_clients(scenario, clients, levels, largest, len(self.models))
        LOG.info("exploration: %d of %d clients (clusters %s, the cheapest per sample)", len(pool),
                 len(clients), ", ".join(sorted({scenario.client(c).cluster for c in pool})))
        return pool

    def _fresh_progress(self, evaluate_fn: Any, arrays: ArrayRecord) -> ExploreProgress:
        """The start of an exploration: no round done, the fresh model's losses."""
        losses, _ = self._losses(evaluate_fn, 0, arrays)
        return ExploreProgress(0, losses[next(iter(self.models))], losses, [],
                               {m: ([losses[m]], []) for m in self.models}, [])

    @staticmethod
    def _checkpoint(strategy: Any, arrays: ArrayRecord, loss: float) -> None:
        """Checkpoint the job after an exploration round (the strategy's ``on_round`` hook)."""
        hook = getattr(strategy, "on_round", None)
        if hook is not None:
            hook(strategy, arrays, loss)

    def _merged_observations(self, k: int, groups: Sequence[_Group], before: Mapping[str, float],
                             after: Mapping[str, float]) -> list[Any]:
        """The merged global model's round, one run observation per variant.

        A small non-IID group's own aggregate often evaluates worse than the
        global model it started from, while the merge of all groups improves
        it; the power law ``r**a`` of the contract cannot tell these apart from
        group rounds alone, so the merged round anchors every variant at the
        sample fraction of all replying clients.
        """
        from depl_fl.tracking.estimation import LossObservation

        replied = [c for g in groups for c in g.replied]
        if not replied:
            return []
        ratio = self.coverage.effective_ratio(replied)
        self.pilot_sets.append(replied)
        for m in self.models:
            self.trajectories[m][0].append(after[m])
            self.trajectories[m][1].append(ratio)
        return [LossObservation(k, m, m if k > 1 else None, before[m], after[m], ratio)
                for m in self.models]

    def _met_now(self, done: int, losses: Mapping[str, float]) -> bool:
        """Whether the merged model meets the target now by the job's stop rule (then exploring ends).

        With ``profile.explore.stop_when_met`` (default) and at least one round
        done: every variant's validation loss (the worst one, with the largest
        measured margin) meets :func:`depl_fl.orchestration.stop_rule.target_met`,
        the rule the run controller stops a training round on; the plan-regime
        judged error is the one the fit will give (the measured ``sem**2 / L``
        so far times the regime's factor). Sets :attr:`met_round`.
        """
        from depl_fl.orchestration.stop_rule import target_met
        from depl_fl.tracking.noise import sem_coefficient

        explore = self.cfg["profile"]["explore"]
        if done < 1 or not explore.get("stop_when_met", True):
            return False
        regime = plan_regime_of(self.cfg)
        coefficient = sem_coefficient([tuple(p) for pts in self.sem_points.values() for p in pts])
        judged_error = regime.judged_error_factor * coefficient if regime and coefficient else 0.0
        met = target_met(max(losses.values()), float(self.cfg["target"]["loss"]),
                         prob=float(self.cfg["target"]["prob"]),
                         guarantee=str((self.cfg.get("planner") or {}).get("guarantee", "gaussian")),
                         loss_sem=self.loss_sem, loss_margin=self.loss_margin, judged_error=judged_error,
                         track_mean=self.cfg.get("method") == "expectation")
        self.met_round = done if met else None
        self.met_model = max(losses, key=losses.__getitem__) if met else None
        if met:
            LOG.info("exploration round %d: the target is met now (loss %.4g); exploring ends", done,
                     max(losses.values()))
        return met

    def _worth_stopping(self, strategy: Any, done: int, observations: Sequence[Any],
                        fresh_loss: float) -> bool:
        """Whether one more exploration round cannot pay for itself (the value stop; sets
        :attr:`value_round`): :mod:`depl_fl.orchestration.exploration_value` on the profile fitted
        from the rounds so far, judged from ``profile.explore.value_from_round`` on, once the
        trajectory has left the fresh model's plateau (:func:`value_judged`)."""
        from depl_fl.errors import DeplError
        from depl_fl.orchestration.exploration_value import exploration_value, value_settings
        from depl_fl.orchestration.prior_regime import value_judged_with_prior

        enabled, first = value_settings(self.cfg["profile"]["explore"])
        if self.prior is not None:  # the prior is a profile already: judged after its minimum rounds
            first = int(self.cfg["profile"]["explore"].get("prior_rounds", 2)) if self._prior_regime() else 1
        if not enabled or done < max(first, 1) or self.scenario_of is None or not self.records:
            return False
        trajectory = [float(self.records[0]["loss_before"])] + [float(r["loss"]) for r in self.records]
        oscillation = self._plateau_oscillation(strategy.properties)
        if oscillation is None:
            return False
        prior = self.prior.trajectory if self._prior_regime() else None
        theirs = self._prior_oscillation(plan_regime_of(self.cfg), oscillation) if prior is not None \
            else oscillation
        rounds = int(self.cfg["profile"]["explore"].get("plateau_rounds", 3))
        if not value_judged_with_prior(trajectory, prior, oscillation, theirs, rounds):
            LOG.info("exploration round %d: not yet enough rounds below the first round's plateau to read "
                     "a rate (loss %.4g, first round %.4g): no value judgement", done, trajectory[-1],
                     trajectory[1])
            return False
        try:
            fitted = self._fit(observations, fresh_loss, strategy.properties)
            targets = self._remaining(strategy.targets)
        except DeplError as exc:  # no profile or no time left yet: explore on
            LOG.info("exploration round %d: no value judgement (%s)", done, exc)
            return False
        floored = bool(self.cfg["profile"]["explore"].get("value_floor", False))
        floor = float(self.cfg["target"]["loss"]) if floored else 0.0
        value = exploration_value(self._value_planner(strategy, fitted, targets), trajectory=trajectory,
                                  round_j=float(self.records[-1]["energy_j"]), floor=floor)
        self.values.append({"round": done, **value.to_dict()})
        if value.stop():
            self.value_round = done
            LOG.info("exploration round %d: a dependable plan costs %.4g J; one more round (%.4g J) "
                     "would save %.4g J of it; exploring ends", done, value.plan_j, value.round_j,
                     value.saving_j)
        return value.stop()

    def _prior_regime(self) -> bool:
        """Whether the prior's trajectory feeds the plateau guard and the learning curve's rate
        (:mod:`depl_fl.orchestration.prior_regime`): with ``profile.prior`` and
        ``profile.explore.prior_regime`` (default true)."""
        return self.prior is not None and bool(self.cfg["profile"]["explore"].get("prior_regime", True))

    def _prior_oscillation(self, regime: Any, fallback: float) -> float:
        """The prior's federation's oscillation coefficient (:func:`prior_regime.prior_oscillation`
        on ``regime``; ``fallback`` without one)."""
        if regime is None:
            return fallback
        return prior_oscillation(self.prior.trajectories, regime, self.cfg, self.prior.properties)

    def _plateau_oscillation(self, properties: Mapping[str, Mapping[str, Any]]) -> float | None:
        """The oscillation coefficient the value stop's plateau guard reads: the one this job's plans
        use (:func:`depl_fl.orchestration.profile_fit.plan_oscillation` on the plan regime's constants,
        also where the plan regime is disabled); None without those constants (no value judgement)."""
        from depl_fl.errors import DeplError
        from depl_fl.tracking.learning_curve import PlanRegime

        raw = self.cfg["profile"].get("plan_regime")
        try:
            regime = PlanRegime.from_config(raw) if raw else None
        except DeplError:
            regime = None
        if regime is None:
            return None
        return plan_oscillation(self.trajectories, regime, local_steps(self.cfg, properties))

    def _value_planner(self, strategy: Any, fitted: Mapping[str, Any], targets: Targets) -> Any:
        """``plan(loss)`` for the value stop: the job's planner on ``fitted`` starting at ``loss``."""
        from depl_fl.errors import DeplError
        from depl_fl.planner import make_plan

        planner = self.cfg.get("planner") or {}

        def plan(loss: float) -> Any:
            try:
                scenario = self.scenario_of(strategy.properties, {**fitted, "initial": float(loss)})
                return make_plan(scenario, targets, method=str(self.cfg["method"]),
                                 eta=None if planner.get("eta") is None else float(planner["eta"]),
                                 guarantee=str(planner.get("guarantee", "gaussian")),
                                 seed=int(self.cfg["seed"]),
                                 mc_trajectories=int(planner.get("mc_trajectories", 20000)))
            except DeplError:  # an invalid fitted profile or no plan: not dependable
                return None

        return plan

    def _explore_more(self, done: int, loss: float) -> bool:
        """Explore ``rounds`` rounds, then on while the loss is above ``stop_loss_factor * target.loss``.

        The profile then covers the losses down to near the target, so the plan
        extrapolates little: an exploration stopped far above it (on the early
        plateau of the learning curve) predicts the plan's rounds too slow
        (``benchmarks/exploration_plateau.py``). ``max_rounds`` caps
        the exploration, and so does ``max_deadline_share`` of the deadline
        (its rounds count against the deadline: the plan needs the rest).
        """
        explore = self.cfg["profile"]["explore"]
        least = int(explore.get("prior_rounds", 2)) if self.prior is not None else int(explore["rounds"])
        if done < least:
            return True
        cap = int(explore.get("max_rounds") or explore["rounds"])
        factor = explore.get("stop_loss_factor")
        share = explore.get("max_deadline_share")
        deadline = float(self.cfg["target"]["deadline_s"])
        if share is not None and self.deadline_used_s >= float(share) * deadline:
            return False
        return (done < cap and factor is not None
                and loss > float(factor) * float(self.cfg["target"]["loss"]))

    def _groups(self, k: int, clients: Sequence[str], levels: Mapping[str, int], arrays: ArrayRecord,
                switch: bool, network: Any, flops: Sequence[float]) -> list[_Group]:
        """Round ``k``'s disjoint groups, one per variant, all from the global model ``arrays``.

        In a switch round each group's observation starts from the loss of
        another variant (the one the global model was last evaluated as). A
        group switching to more channels than its source starts, as a plan's
        switch does, from the global model silenced to the source variant
        (:func:`depl_fl.task.pruning.silence_dropped`): it computes the
        source's function, so the observed jump is the one a plan will see.
        """
        models = list(self.models)
        cap = self.cfg["profile"]["explore"].get("max_clients")
        clients = round_clients(clients, cap, np.random.default_rng([int(self.cfg["seed"]), k, 11]))
        parts = split_groups(clients, len(models), np.random.default_rng([int(self.cfg["seed"]), k, 7]))
        if str(self.cfg["profile"]["explore"].get("group_sizes", "random")) == "by_cost":
            parts = sizes_by_cost(parts, flops)
        switch = switch and k > 1 and len(models) > 1
        groups = []
        for g, (model, members) in enumerate(zip(models, parts, strict=True)):
            if not members:
                continue
            source = models[(g + 1) % len(models)] if switch else model
            start = arrays
            if self.models[source] > self.models[model]:
                start = silenced_start(network, arrays, self.models[source])
            groups.append(_Group(RoundDecision(model, tuple(members), dict(levels)), start,
                                 source if k > 1 else None))
        return groups

    def _losses(self, evaluate_fn: Any, k: int,
                arrays: ArrayRecord) -> tuple[dict[str, float], dict[str, float | None]]:
        """Validation loss (decisions) and test loss (reporting only) of every variant of ``arrays``."""
        metrics = {m: evaluate_fn(k, arrays, c) for m, c in self.models.items()}
        test = {m: float(r["test-loss"]) if "test-loss" in r else None for m, r in metrics.items()}
        sems = [float(r["loss-sem"]) for r in metrics.values() if "loss-sem" in r]
        self.loss_sem = max(sems) if sems else None  # the job starts from the worst variant's loss
        margins = [float(r["loss-margin"]) for r in metrics.values() if "loss-margin" in r]
        self.loss_margin = max(margins) if margins and all(np.isfinite(margins)) else None
        for m, r in metrics.items():
            if "loss-sem" in r:
                self.sem_points.setdefault(m, []).append((float(r["loss"]), float(r["loss-sem"])))
        return {m: float(r["loss"]) for m, r in metrics.items()}, test

    @staticmethod
    def _train(strategy: Any, grid: Grid, server_round: int, groups: Sequence[_Group],
               train_config: ConfigRecord, timeout: float) -> None:
        """One round of all groups through the strategy's own configure/aggregate hooks."""
        train_config = ConfigRecord({**dict(train_config), "phase": "profile"})
        messages, prepared = [], []
        for group in groups:
            strategy._decision = group.decision
            messages += list(strategy.configure_train(server_round, group.start, train_config, grid))
            sent = list(getattr(strategy, "_sent", []))
            prepared.append((strategy._structure, strategy._global_state, sent, dict(strategy._bytes)))
        strategy.arrivals = {}
        replies = send_and_receive(grid, messages, timeout, arrivals=strategy.arrivals)
        for group, (structure, state, sent, sizes) in zip(groups, prepared, strict=True):
            nodes = {strategy.node_of[c] for c in group.decision.clients}
            strategy._decision, strategy._structure, strategy._global_state = group.decision, structure, state
            strategy._sent = sent  # which message each reply answers (error replies of dead nodes)
            strategy._bytes = sizes
            result, metrics = strategy.aggregate_train(
                server_round, [r for r in replies if r.metadata.src_node_id in nodes])
            group.bytes = strategy.round_bytes(group.decision)
            group.result = result
            replied, rejected = strategy._last_round_clients
            group.replied = list(replied)
            group.measured = {c: dict(strategy.reply_measured[c]) for c in replied
                              if c in getattr(strategy, "reply_measured", {})}
            group.missing = [dict(r) if isinstance(r, Mapping) else {"client": str(r), "reason": "rejected"}
                             for r in rejected]
            if metrics is not None and np.isfinite(float(metrics["train-loss"])):
                group.train_loss = float(metrics["train-loss"])
        strategy._decision = None

    def _observe(self, strategy: Any, groups: Sequence[_Group], evaluate_fn: Any, k: int,
                 arrays: ArrayRecord, known: Mapping[str, float]) -> tuple[ArrayRecord, list[Any]]:
        """Every group's observation and the merged model; ``known`` holds the validation loss of
        ``arrays`` per variant (a group that starts from ``arrays`` itself is not evaluated again)."""
        from depl_fl.tracking.estimation import LossObservation
        from strategies.depl_strategy import arrays_to_state, state_to_arrays

        observations, states, weights = [], [], []
        for group in groups:
            if group.result is None:
                continue
            comp = self.models[group.decision.model]
            # A switch observation's loss_before is the source variant's loss (before the jump).
            source = group.previous if group.previous in self.models else group.decision.model
            before = known[source] if group.start is arrays and source in known else \
                validation_loss(evaluate_fn, k, group.start, self.models[source])
            after = validation_loss(evaluate_fn, k, group.result, comp)
            observations.append(LossObservation(k, group.decision.model, group.previous, before, after,
                                                self.coverage.effective_ratio(group.replied)))
            self.pilot_sets.append(list(group.replied))
            group.loss_before, group.loss_after = before, after
            states.append(arrays_to_state(group.result))
            weights.append(sum(int(strategy.properties[c]["num-samples"]) for c in group.replied))
        if not states:
            LOG.warning("exploration round %d: no valid reply, global model unchanged", k)
            return arrays, observations
        return state_to_arrays(merge_states(states, weights)), observations

    def _levels(self, scenario: Scenario, cheapest: Mapping[str, int], k: int) -> dict[str, int]:
        """Round ``k``'s level per cluster: the cheapest; with ``cost.source=measured`` every level in turn.

        A measured cost model needs every level's speed on the devices; the
        exploration measures them in rotation (round ``k`` at level ``(k - 1) mod
        levels``), paying the faster levels' energy in half of its rounds (two levels).
        """
        if not self.measure_levels:
            return dict(cheapest)
        return {c.id: (k - 1) % len(c.levels) for c in scenario.clusters}

    def _record(self, scenario: Scenario, k: int, groups: Sequence[_Group], loss_before: float,
                losses: Mapping[str, float], test_losses: Mapping[str, float | None], wall: float,
                comparable_wall: float | None = None) -> None:
        from depl_fl.tracking.device_costs import round_cost_of, round_measurement

        energy, duration = round_cost(scenario, [g.decision for g in groups])
        measured = {c: r for g in groups for c, r in g.measured.items()}
        modelled = {c: client_energy(scenario, c, g.decision.model,
                                     g.decision.levels[scenario.client(c).cluster])
                    for g in groups for c in g.measured}
        cost = round_cost_of(scenario, [g.decision for g in groups], measured,
                             wall if comparable_wall is None else comparable_wall)
        self.round_costs.append(cost)
        elapsed = self.time_s + duration
        self.records.append({
            "round": k, "phase": "profile", "model": "+".join(g.decision.model for g in groups),
            "clients": sorted(c for g in groups for c in g.decision.clients),
            "levels": dict(groups[0].decision.levels) if groups else {},
            "num_clients": sum(len(g.decision.clients) for g in groups),
            "replied": sorted(c for g in groups for c in g.replied),
            "rejected": [r for g in groups for r in g.missing],
            "groups": [{"model": g.decision.model, "clients": list(g.decision.clients),
                        "switch_from": g.previous if g.previous != g.decision.model else None,
                        **self.coverage.record(g.replied),
                        "loss_before": g.loss_before, "loss": g.loss_after,
                        "train_loss": g.train_loss} for g in groups],
            "loss_before": float(loss_before), "loss": float(max(losses.values())),
            "losses": dict(losses), "accuracy": None, "train_loss": None,
            # reported like "loss" (the worst variant), never read by a decision
            "test_loss": worst(test_losses.values()), "test_accuracy": None,
            # the stop rule's inputs (the largest over the variants, as "loss")
            "loss_sem": self.loss_sem, "loss_margin": self.loss_margin,
            "energy_j": float(energy), "round_time_s": float(duration), "elapsed_s": float(elapsed),
            "wall_s": float(wall), "comparable_wall_s": cost.wall_s, "predicted_quantile": None,
            "replanned": False, "replies": measured, **round_measurement(measured, modelled),
            **{key: sum(int(g.bytes.get(key, 0)) for g in groups)
               for key in ("bytes_down", "bytes_up", "modelled_bytes_down", "modelled_bytes_up")},
        })

    def _announce(self, k: int) -> None:
        """Log exploration round ``k``'s progress line (once the round is written, see :meth:`_explore`)."""
        rec = self.records[-1]
        LOG.info("exploration round %d: %s, loss %.4f, %.4g J", k,
                 ", ".join(f"{g['model']} x{len(g['clients'])}" for g in rec["groups"]),
                 rec["loss"], rec["energy_j"])

    # -------------------------------------------------------------- fitting
    def _fit(self, observations: Sequence[Any], fresh_loss: float,
             properties: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        # The value stop fits the profile after a round; when it ends the exploration there, the
        # final fit has the same inputs (the rounds only ever grow), so that fit is reused.
        inputs = (len(observations), len(self.records), fresh_loss, data_fingerprint(properties))
        if self._last_fit is None or self._last_fit[0] != inputs:
            fitted = self.finish_fit(self.measured_fit(observations, fresh_loss, properties), properties,
                                     plan_regime_of(self.cfg))
            self._last_fit = (inputs, fitted)
        return copy.deepcopy(self._last_fit[1])

    def measured_fit(self, observations: Sequence[Any], fresh_loss: float,
                     properties: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The exploration's own fit: run and switch profiles over the explored losses, the
        data exponents, the oscillation share (``eval_std``) and the measured coverage range."""
        from depl_fl.tracking.estimation import fit_data_exponents, fit_loss_profile

        explore = self.cfg["profile"]["explore"]
        prof = self.cfg["profile"]
        models = list(self.models)
        observations = [*prior_observations(self.prior, models), *observations]
        min_points = int(explore.get("min_points_per_level", 4))
        per_model = min(sum(o.model == m and not o.is_switch for o in observations) for m in models)
        enough = int(explore.get("min_rounds_for_exponents", 12))
        if len({round(o.sample_fraction, 9) for o in observations}) >= 2 and per_model >= enough:
            a, b = fit_data_exponents(observations, models, min_points_per_level=min_points)
        else:  # too few rounds to identify a and b: the configured values
            a, b = float(prof.get("data_exponent_mean", 0.5)), float(prof.get("data_exponent_std", 0.5))
        total = float(sum(int(p["num-samples"]) for p in properties.values()))
        fitted = fit_loss_profile(observations, models, initial=fresh_loss, reference_samples=total,
                                  data_exponent_mean=a, data_exponent_std=b, min_points_per_level=min_points)
        trajectories = [(m, *t) for m, t in self.trajectories.items()]
        return {**with_eval_std(fitted, trajectories, a, b), **self.coverage.bounds(self.pilot_sets)}

    def finish_fit(self, measured: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]],
                   regime: Any) -> dict[str, Any]:
        """The profile a plan uses: the plan regime below the exploration's last loss (``regime``
        given), else the explored levels anchored at 0 with the measured evaluation error and the
        set shift (``profile.plan_regime.enabled: false``)."""
        if regime is not None:
            window = float((self.cfg["profile"].get("plan_regime") or {}).get("rate_window", 1.0))
            at_full = reads_rate_at_full(regime, self.cfg)
            steps = local_steps(self.cfg, properties)
            oscillation = plan_oscillation(self.trajectories, regime, steps)
            trends = exploration_trends(self.trajectories, regime, oscillation, at_full) \
                if regime.anchor == "trend" else {}
            worst = max(trends.values(), key=lambda t: t.level, default=None)
            self.start_trend = None if worst is None else {"mean": worst.level, "std": worst.level_std}
            rates = {}
            if self._prior_regime():
                rates = prior_rates(self.trajectories, self.prior.trajectories, regime, oscillation,
                                    self._prior_oscillation(regime, oscillation), window, at_full)
            self.rates_from_prior = sorted(rates)
            if rates:
                LOG.info("loss profile: the learning curve's rate from the prior's trajectory for %s "
                         "(this job's own trajectory shows none yet)", ", ".join(sorted(rates)))
            return with_plan_regime(measured, self.trajectories, len(self.records), regime, steps,
                                    self.sem_points, window, rate_at_full=at_full,
                                    oscillation=oscillation, trends=trends, rates=rates)
        explore = self.cfg["profile"]["explore"]
        fitted = with_measured_sem(anchor_at_zero(dict(measured)), self.sem_points)
        return with_set_shift(fitted, self.set_change_rounds(int(explore.get("set_shift_rounds", 8))))

    @classmethod
    def restored(cls, cfg: Mapping[str, Any],
                 cached: Mapping[str, Any]) -> tuple[FederatedProfiler, list[Any], float, dict[str, Any]]:
        """A profiler in the state its cache file's ``fit_inputs`` record, to refit the profile.

        Returns ``(profiler, observations, fresh_loss, properties)``: pass them to
        :meth:`measured_fit` and :meth:`finish_fit` (the trajectory bank refits
        every job's profile with other plan-regime constants this way).
        """
        from depl_fl.tracking.estimation import LossObservation

        inputs = cached["fit_inputs"]
        properties = {cid: {"cluster": cluster, "num-samples": n, "label-histogram": hist}
                      for cid, cluster, n, hist in cached["profile"]["data"]}
        profiler = cls(cfg, None)
        profiler.coverage = LabelCoverage.of_config(cfg, properties)
        profiler.trajectories = {m: (list(t[0]), list(t[1])) for m, t in inputs["trajectories"].items()}
        profiler.pilot_sets = [list(c) for c in inputs["pilot_sets"]]
        profiler.sem_points = {m: [(float(a), float(b)) for a, b in pts]
                               for m, pts in inputs["sem_points"].items()}
        profiler.records = list(inputs["records"])
        observations = [LossObservation(**o) for o in inputs["observations"]]
        return profiler, observations, float(inputs["fresh_loss"]), properties

    def fit_inputs(self, observations: Sequence[Any], fresh_loss: float) -> dict[str, Any]:
        """What :meth:`_fit` reads, as JSON (kept in the cache file: the profile can be audited and
        refitted, see :meth:`restored`)."""
        from dataclasses import asdict

        return {"fresh_loss": float(fresh_loss), "observations": [asdict(o) for o in observations],
                "trajectories": {m: [list(t[0]), list(t[1])] for m, t in self.trajectories.items()},
                "pilot_sets": [list(c) for c in self.pilot_sets],
                "sem_points": {m: [list(p) for p in pts] for m, pts in self.sem_points.items()},
                "records": self.records}

    def set_change_rounds(self, last: int) -> list[Any]:
        """The group rounds of the last ``last`` exploration rounds that were no switch (see
        :mod:`depl_fl.tracking.set_shift`): each started from the global model on a new set."""
        from depl_fl.tracking.set_shift import SetChangeRound

        out = []
        for rec in self.records[-last:] if last > 0 else []:
            for group in rec.get("groups", []):
                replied = [c for c in group["clients"] if c in set(rec.get("replied", []))]
                if group.get("switch_from") or group.get("coverage") is None or not replied \
                        or group.get("loss_before") is None or group.get("loss") is None:
                    continue
                out.append(SetChangeRound(group["model"], float(group["loss_before"]), float(group["loss"]),
                                          self.coverage.effective_ratio(replied),
                                          1.0 - float(group["coverage"])))
        return out
