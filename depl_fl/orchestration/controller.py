"""Pure run controller of DepLStrategy: executes a plan, records rounds, tracks and re-plans.

No flwr and no torch: the strategy feeds it the measured global validation loss
of every round (and the test loss, which it only records); it answers which
decision comes next, computes the modeled cost and time of each round from the
contract's cost model, the predicted pi-quantile of the final loss under the
remaining plan, and (with tracking on) refines l_run / l_sw with
:class:`~depl_fl.tracking.online.OnlineLossEstimator` and re-plans the
remaining rounds via ``make_plan(start=PlanStart(...))`` when
:class:`~depl_fl.tracking.online.ReplanPolicy` says so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import deque
from typing import Any, Callable, Mapping, Sequence

from depl_fl.contract.plan import Plan, RoundDecision, Targets
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import client_energy, data_ratio, effective_ratio, round_energy, round_time
from depl_fl.orchestration.membership import drop_clients
from depl_fl.orchestration.stop_rule import target_met
from depl_fl.tracking import trend as trend_filter
from depl_fl.tracking.best_model import EARLY_STOP_MODELS, best_candidate
from depl_fl.tracking.divergence import divergence_reason, diverging
from depl_fl.tracking.plausibility import loss_flag, one_round_prediction
from depl_fl.tracking.stall import stall_reason, stalled

LOG = logging.getLogger("depl_fl.controller")

#: ``planner(scenario, targets, start) -> Plan``; ``start`` is a PlanStart or None.
Planner = Callable[[Scenario, Targets, Any], Plan]

#: What a used-up plan does (:meth:`RunController._go_past_plan`).
PLAN_ENDS = ("plan", "stop_rule")


class RunController:
    """Executes a plan round by round and keeps the per-round records.

    Parameters
    ----------
    scenario : Scenario
        The scenario the plan was made for.
    targets : Targets
        L*, pi, deadline, max rounds.
    plan : Plan
        The initial plan.
    guarantee : str
        Quantile rule of :func:`depl_fl.planner.predict_quantile`.
    planner : callable, optional
        ``planner(scenario, targets, start) -> Plan`` used for re-planning;
        ``None`` disables re-planning.
    tracking : bool
        Refine the loss profile online and re-plan when the policy says so.
    replan_policy : object, optional
        A :class:`depl_fl.tracking.online.ReplanPolicy` (default: behind target only).
    track_mean : bool
        Track the predicted *mean* of the final loss instead of its pi-quantile:
        the mean-based ``expectation`` baseline re-plans on its own criterion.
    spike_tail_prob : float
        One-sided probability under the loss model of flagging an honest round
        as a spike (:mod:`depl_fl.tracking.plausibility`).
    max_spikes : int
        Consecutive spikes after which a high loss is taken as real (a spike is
        one bad evaluation; a loss that stays high is the model's state).
    label_coverage : LabelCoverage, optional
        Coverage of the client sets (:class:`depl_fl.orchestration.label_coverage.LabelCoverage`).
        A round's sample fraction is its set's ``r_eff = c_S * r``, as in the
        profile fit: by default the scenario's own (contract version 2,
        :func:`depl_fl.contract.semantics.effective_ratio`; ``r`` under version 1).
    loss_sem : float, optional
        Standard error of the start loss's evaluation (a mean over as many
        samples as the test split holds); each :meth:`record` updates it.
        Every prediction and re-plan starts from the measured validation loss
        with the uncertainty :meth:`start_std`.
    loss_margin : float, optional
        How far the test loss may lie above the validation loss of the model at
        hand, at probability ``target_prob`` (the bootstrap-t margin of
        :func:`depl_fl.tracking.split_margin.stop_margin`); each :meth:`record`
        updates it and :meth:`met_now` stops on it when measured.
    clock : str
        ``model`` (the deadline counts the rounds' modelled times: simulation) or
        ``wall`` (it counts wall-clock seconds: a deployment; with tracking, a
        measured round time that drifts from the plan's refits the clusters' speeds
        from the last rounds' replies and re-plans, :mod:`depl_fl.tracking.device_costs`).
    drift : DriftTest, optional
        The drift test of ``clock="wall"`` (default ``DriftTest()``).
    start_trend : mapping, optional
        ``{"mean", "std"}`` of the trend the plan starts from (the exploration's
        fitted trend, :mod:`depl_fl.tracking.exploration_trend`): the trend filter
        starts there instead of at the first measured loss.
    diverge_rounds : int, optional
        With tracking on, stop once the validation loss of each of the last
        this many training rounds is above :attr:`fresh_loss`
        (:mod:`depl_fl.tracking.divergence`); ``None``: never.
    stall_rounds : int, optional
        With tracking on, stop once the lowest validation loss of the job so far
        (:attr:`start_loss` counting as round 0) was reached at least this many
        training rounds ago (:mod:`depl_fl.tracking.stall`); ``None``: never.
    plan_end : str
        What a used-up plan does (with tracking on; :meth:`_go_past_plan`):
        ``plan`` ends the job; ``stop_rule`` goes on one round at a time while
        the last round's model fails the stop rule (:meth:`met_now`) and the
        last prediction made with rounds left was behind target (above
        ``target_loss + policy.margin``), until the stop rule, the deadline,
        ``max_rounds`` or the divergence / patience stops end it.
    early_stop_model : str
        Which model a job that the divergence or the patience stop ended keeps
        (:meth:`final_model_round`): ``best`` (the lowest validation loss) or
        ``last`` (the last round's).
    """

    def __init__(self, scenario: Scenario, targets: Targets, plan: Plan, *,
                 guarantee: str = "gaussian", planner: Planner | None = None,
                 tracking: bool = False, replan_policy: Any = None,
                 track_mean: bool = False, spike_tail_prob: float = 1e-3, max_spikes: int = 2,
                 label_coverage: Any = None, loss_sem: float | None = None,
                 loss_margin: float | None = None, clock: str = "model", drift: Any = None,
                 start_trend: Mapping[str, float] | None = None,
                 diverge_rounds: int | None = None, stall_rounds: int | None = None,
                 plan_end: str = "plan", early_stop_model: str = "best") -> None:
        if clock not in ("model", "wall"):
            raise ValueError(f"clock must be 'model' or 'wall', got {clock!r}")
        if plan_end not in PLAN_ENDS:
            raise ValueError(f"plan_end must be one of {', '.join(PLAN_ENDS)}, got {plan_end!r}")
        self.plan_end = plan_end
        if early_stop_model not in EARLY_STOP_MODELS:
            raise ValueError(f"early_stop_model must be one of {', '.join(EARLY_STOP_MODELS)}, "
                             f"got {early_stop_model!r}")
        self.early_stop_model = early_stop_model
        #: The first round whose model is a candidate of :meth:`best_model` (0: the start model).
        self.best_since = 0
        #: The last predicted quantile made with rounds left (after a re-plan: the new plan's).
        self.continuation_quantile: float | None = None
        self.scenario = scenario
        self.clock = clock
        #: Monotonic time of the last record (``clock="wall"``); the gaps between rounds count too.
        self.clock_mark = time.monotonic()
        self.drift = drift
        #: The last training rounds' measured costs (drift recalibration).
        self.recent_costs: list[Any] = []
        self.track_mean = bool(track_mean)
        self.targets = targets
        self.plan = plan
        self.guarantee = guarantee
        self.planner = planner
        self.rounds: list[RoundDecision] = list(plan.rounds)
        self.records: list[dict[str, Any]] = []
        self.replans: list[dict[str, Any]] = []
        #: Planned clients that did not deliver a valid update; re-plans leave them out.
        self.failed_clients: set[str] = set()
        #: Clients removed from the remaining plan (dead, timed out or rejected).
        self.dropped_clients: set[str] = set()
        #: True while no dependable continuation is known (an infeasible or failed re-plan).
        self.at_risk = False
        self.diverge_rounds = None if diverge_rounds is None else int(diverge_rounds)
        #: Validation loss of the fresh model (set by the strategy once measured): the divergence stop's bar.
        self.fresh_loss: float | None = None
        self.stall_rounds = None if stall_rounds is None else int(stall_rounds)
        #: Validation loss the training starts from (set by the strategy): the patience stop's first bar.
        self.start_loss: float | None = None
        #: Whether the patience stop ended the job.
        self.stalled = False
        #: Why the job stopped before its plan's last round (the divergence or patience stop), else ``None``.
        self.stop_reason: str | None = None
        self.elapsed_s = 0.0
        self.spike_tail_prob = float(spike_tail_prob)
        self.max_spikes = int(max_spikes)
        #: Last loss judged plausible, residuals of recent plausible rounds, current run of spikes.
        self._trusted_loss: float | None = None
        self._residuals: deque[float] = deque(maxlen=10)
        self._spikes = 0
        #: The trend under the oscillating measured loss (:mod:`depl_fl.tracking.trend`): predictions
        #: and re-plans start from it, the decision to stop reads the measured loss.
        self.trend: trend_filter.Trend | None = None
        if start_trend is not None:  # the plan starts at the exploration's fitted trend, not its last loss
            self.trend = trend_filter.Trend(float(start_trend["mean"]), float(start_trend["std"]) ** 2)
        self.label_coverage = label_coverage
        self.loss_sem = _finite_or_none(loss_sem)
        self.loss_margin = _finite_or_none(loss_margin)
        self.tracking = bool(tracking) and planner is not None
        #: Progress lines about the last recorded round, logged by the strategy once the round is saved.
        self.notes: list[str] = []
        #: ``(scenario, failed clients, that scenario without them)`` of the last re-planning scenario.
        self._replanning: tuple[Scenario, frozenset[str], Scenario] | None = None
        #: ``(round, planner's scenario, start)`` of the last re-plan, while it found no dependable plan.
        self._infeasible: tuple[int, Scenario, Any] | None = None
        self.estimator = None
        self.policy = replan_policy
        if self.tracking:
            from depl_fl.tracking.online import OnlineLossEstimator, ReplanPolicy

            # A plan-regime profile (judged_error; tracking/learning_curve.py) is not refined online:
            # its rates and oscillation come from a trajectory bank, a run's few one-round
            # decreases are mostly oscillation, and the estimator's prior uncertainty of its levels
            # would turn into a random walk of the prediction that sends runs to every client.
            # The trend filter follows the run instead (tracking/trend.py).
            if not scenario.loss.judged_error:
                self.estimator = OnlineLossEstimator(scenario.loss)
            self.policy = replan_policy if replan_policy is not None else ReplanPolicy()

    # ------------------------------------------------------------------
    def take_notes(self) -> list[str]:
        """The progress lines about the last recorded round, emptied (the strategy logs them)."""
        notes, self.notes = self.notes, []
        return notes

    @property
    def rounds_done(self) -> int:
        """Number of rounds recorded so far."""
        return len(self.records)

    def next_decision(self) -> RoundDecision | None:
        """The decision of the next round, or ``None`` when the plan is finished."""
        k = self.rounds_done
        if k >= len(self.rounds):
            return None
        if self.targets.max_rounds is not None and k >= self.targets.max_rounds:
            return None
        return self.rounds[k]

    def predict(self, loss: float, previous_model: str | None,
                remaining: Sequence[RoundDecision],
                previous_clients: Sequence[str] | None = None,
                trend: trend_filter.Trend | None = None) -> float:
        """Predicted pi-quantile (or mean, with ``track_mean``) of the final loss under ``remaining``.

        ``previous_clients``: the set of the round just run (a remaining round on
        another set pays the set-shift jump, with ``loss.set_shift``). With
        rounds remaining the prediction starts from ``trend`` when given (the
        oscillation of the measured ``loss`` does not persist); with none the
        measured ``loss`` is the final one.
        """
        spread = self.start_std()
        if not remaining and spread == 0.0 and not self.scenario.loss.judged_error:
            return float(loss)
        from depl_fl.planner import predict_quantile

        start = self._start(loss, previous_model, previous_clients, trend if remaining else None)
        q, mean, _ = predict_quantile(self._current_scenario(), list(remaining),
                                      self.targets.target_prob, self.guarantee, start=start)
        return float(mean if self.track_mean else q)

    def _start(self, loss: float, previous_model: str | None, previous_clients: Sequence[str] | None,
               trend: trend_filter.Trend | None) -> Any:
        """Where a prediction or re-plan starts: the trend's mean (when given) or the measured loss.

        Without the trend estimate's own variance: the loss model's spread is
        fitted from plans that start at a measured loss with none (the plan
        regime's oscillation holds the run-to-run differences of the trend), so a
        prediction from the trend is as calibrated as the static plan's.
        """
        from depl_fl.planner import PlanStart

        mean = float(loss) if trend is None else trend.mean
        clients = tuple(previous_clients) if previous_clients is not None else None
        return PlanStart(loss_mean=max(mean, 0.0), loss_std=self.start_std(),
                         previous_model=previous_model, elapsed_s=self.elapsed_s,
                         rounds_done=self.rounds_done, previous_clients=clients)

    def met_now(self, loss: float) -> bool:
        """Whether stopping now meets the target (``track_mean``: whether the measured ``loss`` does).

        The test loss of the model at hand is its measured validation ``loss``
        plus the difference of the two splits' sampling errors. Stop when
        ``loss + margin <= target_loss``, where the margin is

        - the measured bootstrap-t ``loss_margin`` (:mod:`depl_fl.tracking.split_margin`):
          the ``target_prob``-quantile of that difference, which keeps the
          coupling of a skewed loss's mean and spread; under the Cantelli
          guarantee the larger of it and the Cantelli margin below;
        - else ``kappa * sqrt(2) * loss_sem`` (``Normal(0, 2 loss_sem**2)``,
          equal split sizes; it misses more often than ``1 - target_prob`` on
          cross-entropy, ``benchmarks/results/stop_margin.md``);

        and at least ``kappa * sqrt(judged_error * loss)`` of a plan-regime profile.
        """
        return target_met(max(float(loss), 0.0), self.targets.target_loss, prob=self.targets.target_prob,
                          guarantee=self.guarantee, loss_sem=self.loss_sem, loss_margin=self.loss_margin,
                          judged_error=float(self.scenario.loss.judged_error or 0.0),
                          track_mean=self.track_mean)

    def start_std(self) -> float:
        """Uncertainty of a plan's start at the measured validation loss: ``sqrt(2) * loss_sem``.

        The validation loss that starts a prediction and the test loss that
        judges the end are means over two independent samples of the data:
        each lies a standard error ``loss_sem`` from the model's true loss, so
        they differ by ``sqrt(2) loss_sem`` even when no round is left. This
        offset persists from round to round (the same splits), so no
        trajectory of validation losses shows it: a run that stops at a
        validation loss just under the target can end with its test loss
        above it in every round.

        0 when the scenario has ``loss.judged_error`` (the plan regime): the
        judged loss then carries that offset, for the loss after the last
        planned round (docs/CONTRACT_V2.md), and the walk starts at the
        validation loss it tracks.
        """
        if self.loss_sem is None or self.scenario.loss.judged_error:
            return 0.0
        return math.sqrt(2.0) * self.loss_sem

    def _ratio(self, clients: Sequence[str]) -> float:
        """A round's sample fraction: ``r_eff = c_S * r`` (``r`` without label histograms)."""
        if self.label_coverage is None:
            return effective_ratio(self.scenario, clients)
        return data_ratio(self.scenario, clients) * self.label_coverage.factor(clients)

    def _replanning_scenario(self) -> Scenario:
        """The current scenario without the clients that failed (if any client is left).

        A client that dropped out or sent a rejected update is not planned again in
        this run: planning on it would risk the guarantee a second time.
        """
        scenario = self._current_scenario()
        if not self.failed_clients:
            return scenario
        # The same object while nothing changed: the planner's checks and caches are per scenario
        # object (the range check of every client's data ratio among them).
        key = (scenario, frozenset(self.failed_clients))
        cached = self._replanning
        if cached is not None and cached[0] is key[0] and cached[1] == key[1]:
            return cached[2]
        alive = tuple(c for c in scenario.clients if c.id not in self.failed_clients)
        out = dataclasses.replace(scenario, clients=alive) if alive else scenario
        self._replanning = (*key, out)
        return out

    def _current_scenario(self) -> Scenario:
        if self.estimator is None or self.estimator.num_observations == 0:
            return self.scenario
        return dataclasses.replace(self.scenario, loss=self.estimator.loss_model())

    # ------------------------------------------------------------------
    def record(self, decision: RoundDecision, loss_before: float, loss_after: float, *,
               accuracy: float | None, wall_s: float, replied: Sequence[str],
               rejected: Sequence[str], train_loss: float | None = None,
               test_loss: float | None = None, test_accuracy: float | None = None,
               loss_sem: float | None = None, loss_margin: float | None = None,
               measured: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Record one finished round and, with tracking on, maybe re-plan.

        Parameters
        ----------
        decision : RoundDecision
            What the round ran (planned clients; cost is charged for all of them,
            since every planned client was sent the work).
        loss_before, loss_after : float
            Measured global validation loss before and after the round: the
            only loss that tracking, stopping and re-planning read.
        accuracy : float or None
            Global validation accuracy after the round.
        wall_s : float
            Measured wall time of the round.
        replied : sequence of str
            Client ids whose update was aggregated.
        rejected : sequence of dict or str
            ``{"client", "reason"}`` of every planned client whose update was
            rejected or missing (a bare client id is accepted too).
        train_loss : float, optional
            Weighted mean local training loss.
        test_loss, test_accuracy : float, optional
            Global loss and accuracy on the test split after the round: recorded
            for the results, never read by a decision.
        loss_sem : float, optional
            Standard error of ``loss_after``'s evaluation (see :meth:`start_std`).
        loss_margin : float, optional
            Bootstrap-t stop margin of ``loss_after``'s evaluation (see :meth:`met_now`).
        measured : mapping, optional
            Client id -> what its reply measured
            (:func:`depl_fl.tracking.device_costs.reply_measurement`): the record gets
            ``replies``, ``energy_source``, ``measured_energy_j``, ``train_time_s``,
            ``bytes_down``/``bytes_up`` beside the modelled ``energy_j``/``round_time_s``.

        Returns
        -------
        dict
            The round record (also appended to :attr:`records`). ``loss_flag`` is
            ``None``, ``"non-finite"`` or ``"spike"``; a flagged loss is recorded
            but not fed to the estimator, and predictions and re-plans use
            ``tracked_loss``: the observed loss, or for a flagged one its
            one-round prediction from the last plausible loss.
        """
        k = self.rounds_done
        if _finite_or_none(loss_sem) is not None:
            self.loss_sem = float(loss_sem)
        if _finite_or_none(loss_margin) is not None:
            self.loss_margin = float(loss_margin)
        previous = self.records[-1]["model"] if self.records else None
        before_flag = self.records[-1]["loss_flag"] if self.records else None
        t_round = round_time(self.scenario, decision)
        now = time.monotonic()
        self.elapsed_s += (now - self.clock_mark) if self.clock == "wall" else t_round
        self.clock_mark = now
        rejections = [_rejection(r) for r in rejected]
        flag = self._judge(decision, previous, loss_before, loss_after)
        tracked = float(loss_after) if flag is None else self._trusted_loss
        rec: dict[str, Any] = {
            "round": k + 1,
            "model": decision.model,
            "clients": list(decision.clients),
            "levels": dict(decision.levels),
            "num_clients": len(decision.clients),
            "replied": sorted(replied),  # arrival order is not reproducible
            "rejected": rejections,
            "loss_before": float(loss_before),
            "loss": float(loss_after),
            "loss_flag": flag,
            "tracked_loss": tracked,
            "accuracy": None if accuracy is None else float(accuracy),
            "train_loss": None if train_loss is None else float(train_loss),
            "test_loss": None if test_loss is None else float(test_loss),
            "test_accuracy": None if test_accuracy is None else float(test_accuracy),
            "loss_sem": self.loss_sem,
            "loss_margin": self.loss_margin,
            "energy_j": float(round_energy(self.scenario, decision)),
            "round_time_s": float(t_round),
            "elapsed_s": float(self.elapsed_s),
            "wall_s": float(wall_s),
        }
        if measured is not None:
            self._measured(rec, decision, measured)
        self.records.append(rec)
        failed = [r["client"] for r in rejections]
        self.failed_clients.update(failed)
        self.drop(failed)
        if flag is None and before_flag is None and math.isfinite(loss_before):
            self._observe(k + 1, decision, previous, loss_before, loss_after)
        remaining = self.rounds[k + 1:]  # without the clients dropped just now
        usable = tracked is not None and math.isfinite(tracked)
        if usable:
            self._follow_trend(decision, previous, loss_before, tracked)
        rec["trend_loss"] = self.trend.mean if self.trend is not None else None
        rec["trend_std"] = self.trend.std if self.trend is not None else None
        rec["predicted_quantile"] = (self.predict(tracked, decision.model, remaining, decision.clients,
                                                  self.trend)
                                     if usable else float("nan"))
        rec["replanned"] = False
        if self._diverging(rec) or self._stalled(rec):
            return rec
        if self.tracking and self.policy is not None and usable:
            if remaining and self.met_now(tracked):
                self._stop(rec, len(remaining))
                return rec
            reason = self.policy.decide(k + 1, rec["predicted_quantile"], self.targets.target_loss,
                                        failed_planned_clients=failed,
                                        remaining_rounds=len(remaining))
            reason = self._time_drift(rec, remaining) or reason
            if reason is not None and not self._plan_still_holds(rec, reason) \
                    and not self._replan_cannot_help(rec, reason):
                self._replan(rec, reason, self.rounds[k + 1:])
        # Without tracking, a client was lost and nothing can re-plan around it.
        self.at_risk = self.at_risk or (not self.tracking and bool(failed)
                                        and rec["predicted_quantile"] > self.targets.target_loss)
        rec["at_risk"] = self.at_risk
        self._at_plan_end(rec, tracked if usable else None)
        return rec

    def _at_plan_end(self, rec: dict[str, Any], loss: float | None) -> None:
        """Keep the prediction while rounds are left; once none is, maybe go past the plan."""
        if len(self.rounds) > self.rounds_done:
            self.continuation_quantile = rec.get("predicted_quantile_after_replan", rec["predicted_quantile"])
        elif loss is not None:
            self._go_past_plan(rec, loss)

    def _go_past_plan(self, rec: dict[str, Any], loss: float) -> None:
        """With ``plan_end="stop_rule"``: one more round of this round's decision when the plan is used up.

        The job goes on when the model at hand fails the stop rule and the
        rounds just run were not covered by a dependable plan: the last
        prediction made with rounds left (:attr:`continuation_quantile`) was
        above ``target_loss + policy.margin``. One round at a time, the last
        round's decision (without the dropped clients): every extra round is
        recorded and tracked as usual, so a behind-target re-plan that finds a
        dependable non-empty plan replaces it, and the stop rule, the
        divergence and patience stops, ``max_rounds`` and the deadline (the
        job's own clock plus the round's modelled time) end it. A used-up plan
        whose last prediction with rounds left was dependable ends the job, as
        with ``plan_end="plan"``.

        A re-plan that finds a feasible empty plan while the model fails the
        stop rule keeps the old plan's leftover rounds (:meth:`_replan`) under
        both values: ``stop_rule`` only acts once the plan is used up, so every
        decision up to the plan's end is the same as with ``plan``, and a job
        whose plan ends met runs identically.
        """
        if self.plan_end != "stop_rule" or not self.tracking or self.met_now(loss):
            return
        judged = self.continuation_quantile
        bar = self.targets.target_loss + float(getattr(self.policy, "margin", 0.0))
        if judged is None or not judged > bar:
            return
        if self.targets.max_rounds is not None and self.rounds_done >= self.targets.max_rounds:
            return
        last = RoundDecision(rec["model"], tuple(rec["clients"]), dict(rec["levels"]))
        decisions = drop_clients([last], self.dropped_clients, self.scenario)
        if not decisions or \
                self.elapsed_s + round_time(self.scenario, decisions[0]) > self.targets.deadline_s:
            return
        self.rounds = self.rounds[: self.rounds_done] + decisions
        rec["past_plan"] = {"judged_quantile": judged, "bar": bar}
        if not (len(self.records) > 1 and self.records[-2].get("past_plan")):
            self.notes.append(f"round {rec['round']}: the plan is used up, the loss {loss:.4g} fails the "
                              f"stop rule and its last prediction (q={judged:.4g} > {bar:.4g}) was behind "
                              "target: going on one round at a time")

    def _measured(self, rec: dict[str, Any], decision: RoundDecision,
                  measured: Mapping[str, Mapping[str, Any]]) -> None:
        """Add what the replies measured to the round record; keep the round's cost for drift."""
        from depl_fl.tracking.device_costs import round_cost_of, round_measurement

        modelled = {cid: client_energy(self.scenario, cid, decision.model, decision.levels[
            self.scenario.client(cid).cluster]) for cid in measured if cid in decision.clients}
        rec["replies"] = {cid: dict(r) for cid, r in sorted(measured.items())}
        rec.update(round_measurement(measured, modelled))
        self.recent_costs = (self.recent_costs + [round_cost_of(self.scenario, [decision], measured,
                                                                rec["wall_s"])])[-10:]

    def _time_drift(self, rec: dict[str, Any], remaining: Sequence[RoundDecision]) -> str | None:
        """With the wall clock: refit the speeds and say why to re-plan when round times drift."""
        from depl_fl.tracking.device_costs import DriftTest, recalibrated

        if self.clock != "wall" or not remaining:
            return None
        if self.drift is None:
            self.drift = DriftTest()
        reason = self.drift.observe(rec["round_time_s"], rec["wall_s"])
        if reason is None or not self.recent_costs:
            return None
        self.scenario, report = recalibrated(self.scenario, self.recent_costs[-int(self.drift.rounds):])
        rec["recalibrated"] = report
        LOG.info("round %d: %s; cluster speeds refitted from the last rounds' replies", rec["round"], reason)
        return reason

    def _stop(self, rec: dict[str, Any], remaining: int) -> None:
        """The model of this round meets the target: the cheapest continuation is no round at all."""
        from depl_fl.tracking.online import ReplanRecord

        judged = self.predict(rec["tracked_loss"], rec["model"], [], rec["clients"])
        self.replans.append(ReplanRecord(
            round=rec["round"], reason="target met: the measured loss judged meets pi",
            old_remaining_rounds=remaining, new_remaining_rounds=0, quantile_before=rec["predicted_quantile"],
            quantile_after=judged, feasible=True, planner_seconds=0.0).to_dict())
        self.rounds = self.rounds[: self.rounds_done]
        self.at_risk = False
        rec["replanned"] = True
        rec["predicted_quantile_after_replan"] = judged
        rec["at_risk"] = False
        self.notes.append(f"round {rec['round']}: the target is met now (loss {rec['tracked_loss']:.4g}); "
                          "stopping")

    def _diverging(self, rec: dict[str, Any]) -> bool:
        """With tracking on: whether training keeps the model worse than the fresh one; if so, stop."""
        if not self.tracking or not diverging([r["loss"] for r in self.records], self.fresh_loss,
                                              self.diverge_rounds):
            return False
        assert self.diverge_rounds is not None and self.fresh_loss is not None
        return self._stop_early(rec, divergence_reason(self.diverge_rounds, self.fresh_loss))

    def _stalled(self, rec: dict[str, Any]) -> bool:
        """With tracking on: whether the loss stopped improving for the patience; if so, stop."""
        losses = [r["loss"] for r in self.records]
        if not self.tracking or not stalled(losses, self.start_loss, self.stall_rounds):
            return False
        assert self.stall_rounds is not None
        finite = [float(v) for v in [self.start_loss, *losses] if v is not None and math.isfinite(float(v))]
        self.stalled = True
        return self._stop_early(rec, stall_reason(self.stall_rounds, min(finite) if finite else math.nan))

    def _stop_early(self, rec: dict[str, Any], reason: str) -> bool:
        """End the job after this round for ``reason``: no round left, the reason recorded and noted."""
        self.stop_reason = reason
        self.rounds = self.rounds[: self.rounds_done]
        rec["stopped"] = self.stop_reason
        rec["at_risk"] = self.at_risk
        self.notes.append(f"round {rec['round']}: {self.stop_reason}; stopping")
        return True

    def keeps_best(self) -> bool:
        """Whether a stop may end the job with an earlier model, so its caller keeps the best one's arrays."""
        return self.tracking and self.early_stop_model == "best" and \
            (self.stall_rounds is not None or self.diverge_rounds is not None)

    def best_model(self) -> tuple[int, float] | None:
        """Round (0: the start model) and validation loss of the lowest candidate so far (ties: the later).

        The candidates are the model the training started from (its loss
        :attr:`start_loss`) and every training round's model from
        :attr:`best_since` on (:func:`depl_fl.tracking.best_model.best_candidate`).
        """
        return best_candidate([r["loss"] for r in self.records], self.start_loss, self.best_since)

    def final_model_round(self) -> int:
        """The round whose model the job ends with (0: the start model).

        With ``early_stop_model="best"``, a job that the divergence or the
        patience stop ended (:attr:`stop_reason`) ends with :meth:`best_model`:
        both stops end a job whose last rounds made no better model, so the
        last one is not its best, and no decision of the job reads the choice
        (it comes after the last one). Every other end keeps the last round's
        model: the stop rule judged that model met; a used-up plan and
        ``max_rounds`` end with the model the plan (or the decision to go past
        it) promised; at the deadline the last model is the one the plan
        predicted.
        """
        if self.early_stop_model != "best" or not self.stop_reason:
            return self.rounds_done
        best = self.best_model()
        return self.rounds_done if best is None else best[0]

    def final_model_note(self) -> str | None:
        """The line saying that the job ends with an earlier round's model than its last (else ``None``)."""
        final = self.final_model_round()
        if final == self.rounds_done:
            return None
        stop = "stall" if self.stalled else "divergence"
        loss = self.start_loss if final == 0 else self.records[final - 1]["loss"]
        which = "the start model" if final == 0 else f"round {final}'s model"
        since = "the start model" if self.best_since == 0 else f"round {self.best_since} (resumed)"
        return (f"{stop} stop: ending with {which} (validation {loss:.4g}), the lowest validation loss "
                f"since {since}; round {self.rounds_done}'s was {self.records[-1]['loss']:.4g}")

    def _follow_trend(self, decision: RoundDecision, previous: str | None, loss_before: float,
                      tracked: float) -> None:
        """One prediction and correction step of the trend filter with this round's tracked loss."""
        model = self._current_scenario().loss
        ratio = self._ratio(decision.clients)
        if self.trend is None:  # the plan starts at the measured loss, as the static plan does
            start = float(loss_before) if math.isfinite(loss_before) else tracked
            self.trend = trend_filter.Trend(start, 0.0)
        prior = trend_filter.predict(model, self.trend, decision.model, previous, ratio)
        noise = trend_filter.oscillation_var(model, decision.model, prior.mean, ratio)
        self.trend = trend_filter.update(prior, tracked, noise)

    def drop(self, clients: Sequence[str]) -> None:
        """Remove ``clients`` from every remaining round at once (and so from every prediction)."""
        gone = set(clients) - self.dropped_clients
        if not gone:
            return
        self.dropped_clients |= gone
        self.failed_clients |= gone
        done = self.rounds_done
        self.rounds = self.rounds[:done] + drop_clients(self.rounds[done:], gone, self.scenario)
        LOG.warning("dropped %s from the remaining plan (%d rounds left)", ", ".join(sorted(gone)),
                    len(self.rounds) - done)

    def _observe(self, round_no: int, decision: RoundDecision, previous: str | None,
                 loss_before: float, loss_after: float) -> None:
        if self.estimator is None:
            return
        from depl_fl.tracking.estimation import LossObservation

        self.estimator.observe(LossObservation(
            round_no, decision.model, previous, float(loss_before), float(loss_after),
            self._ratio(decision.clients)))

    def _judge(self, decision: RoundDecision, previous: str | None, loss_before: float,
               loss_after: float) -> str | None:
        """``None`` (plausible), ``"non-finite"`` or ``"spike"``; keeps the trusted loss and residuals."""
        if self._trusted_loss is None and math.isfinite(loss_before):
            self._trusted_loss = float(loss_before)
        reference = self._trusted_loss if self._trusted_loss is not None else float(loss_before)
        if not math.isfinite(reference):
            flag = "non-finite" if not math.isfinite(loss_after) else None
            mean = float(loss_after)
        else:
            mean, std, level = one_round_prediction(self._current_scenario().loss, decision.model,
                                                    previous, reference, self._ratio(decision.clients))
            flag = loss_flag(float(loss_after), mean, std, list(self._residuals), self.spike_tail_prob,
                             floor=level)
        if flag == "spike" and self._spikes >= self.max_spikes:
            LOG.warning("round %d: loss %.4g high for %d rounds in a row: taken as real",
                        self.rounds_done + 1, loss_after, self._spikes + 1)
            flag = None
        if flag is None:
            self._residuals.append(float(loss_after) - mean)
            self._trusted_loss = float(loss_after)
            self._spikes = 0
        else:
            # The flagged measurement is replaced by its prediction (imputed).
            self._spikes += flag == "spike"
            self._trusted_loss = mean if math.isfinite(mean) else self._trusted_loss
            LOG.warning("round %d: observed loss %.4g flagged %s (expected about %.4g): not tracked",
                        self.rounds_done + 1, loss_after, flag, mean)
        return flag

    def _plan_still_holds(self, rec: dict[str, Any], reason: str) -> bool:
        """Whether a behind-target re-plan waits: the remaining plan passes the planner's acceptance test.

        Only with ``keep_dependable_plan`` and a planner that offers the test
        (``planner.holds(scenario, targets, start, rounds) -> (bool, probability)``,
        :func:`depl_fl.planner.plan_holds`), from the state a re-plan would
        start at; the round record says what the test found (``plan_check``).
        """
        check = getattr(self.planner, "holds", None)
        if check is None or self.at_risk or not getattr(self.policy, "keep_dependable_plan", False) \
                or not self.policy.deferrable(reason):
            return False
        start = self._start(rec["tracked_loss"], rec["model"], rec["clients"], self.trend)
        try:
            holds, prob = check(self._replanning_scenario(), self.targets, start,
                                self.rounds[self.rounds_done:])
        except Exception as exc:  # the re-plan goes ahead, as without the test
            LOG.warning("round %d: plan check failed (%s: %s); re-planning", rec["round"],
                        type(exc).__name__, exc)
            return False
        rec["plan_check"] = {"reason": reason, "probability": float(prob), "kept": bool(holds)}
        if holds:
            self.notes.append(f"round {rec['round']}: {reason}, but the remaining plan still passes the "
                              f"planner's check (probability {prob:.4g}): kept")
        return bool(holds)

    def _replan_cannot_help(self, rec: dict[str, Any], reason: str) -> bool:
        """Whether a re-plan is skipped: the last one found no dependable plan from a start no worse.

        With the same planner scenario (the same loss model and clients) and a
        start no better (:func:`depl_fl.planner.no_better_start`: loss and its
        spread not lower, no more time or rounds left, the same previous model
        and clients), the planner's feasibility being monotone in the start, it
        finds none again: the current plan goes on at risk, as after the
        infeasible re-plan. The round record says so (``replan_skipped``).
        """
        if self._infeasible is None or not self.at_risk:
            return False
        from depl_fl.planner import no_better_start

        round_no, scenario, earlier = self._infeasible
        start = self._start(rec["tracked_loss"], rec["model"], rec["clients"], self.trend)
        if self._replanning_scenario() is not scenario or not no_better_start(start, earlier):
            return False
        rec["replan_skipped"] = {"reason": reason, "infeasible_since_round": round_no}
        self.notes.append(f"round {rec['round']}: {reason}, but the re-plan of round {round_no} found no "
                          "dependable plan from a better start: not re-planned (at risk)")
        return True

    def infeasible_state(self) -> tuple[int, Any] | None:
        """The last infeasible re-plan (its round and start) while a skip may still rest on it.

        Checkpointed: a resumed run skips the same re-plans as the uninterrupted
        one. ``None`` when the planner's scenario is no longer the one that
        re-plan used (a refitted loss model is a new scenario every round).
        """
        if self._infeasible is None:
            return None
        if self.estimator is not None and self.estimator.num_observations > 0:
            return None
        round_no, scenario, start = self._infeasible
        return (round_no, start) if self._replanning_scenario() is scenario else None

    def restore_infeasible(self, saved: tuple[int, Any] | None) -> None:
        """Put back :meth:`infeasible_state` after a restore, on the scenario the restored run plans with."""
        self._infeasible = None if saved is None else (saved[0], self._replanning_scenario(), saved[1])

    def _replan(self, rec: dict[str, Any], reason: str, remaining: list[RoundDecision]) -> None:
        from depl_fl.tracking.online import ReplanRecord

        assert self.planner is not None
        start = self._start(rec["tracked_loss"], rec["model"], rec["clients"], self.trend)
        scenario = self._replanning_scenario()
        self._infeasible = None
        t0 = time.perf_counter()
        try:
            new = self.planner(scenario, self.targets, start)
        except Exception as exc:
            # Deliberately broad: hours of training must not be lost to a failed
            # re-plan; the current plan goes on and the failure is logged and recorded.
            LOG.warning("round %d: re-plan (%s) failed, keeping the current plan: %s: %s",
                        rec["round"], reason, type(exc).__name__, exc)
            self.replans.append({"round": rec["round"], "reason": reason,
                                 "error": f"{type(exc).__name__}: {exc}"})
            self.at_risk = True
            return
        seconds = time.perf_counter() - t0
        # A feasible empty plan means the target is already met with the required
        # probability: the cheapest continuation is to stop -- when the model of this
        # round meets it (the planner started from the trend); else one more round.
        feasible = bool(new.feasible)
        if feasible and not new.rounds and not self.met_now(rec["tracked_loss"]):
            last = RoundDecision(rec["model"], tuple(rec["clients"]), dict(rec["levels"]))
            new = dataclasses.replace(new, rounds=list(remaining) or [last])
            self.notes.append(f"round {rec['round']}: the trend meets the target, this round's loss "
                              f"{rec['tracked_loss']:.4g} does not: going on")
        q_after = self.predict(rec["tracked_loss"], rec["model"], new.rounds, rec["clients"], self.trend)
        self.replans.append(ReplanRecord(
            round=rec["round"], reason=reason, old_remaining_rounds=len(remaining),
            new_remaining_rounds=len(new.rounds) if feasible else len(remaining),
            quantile_before=rec["predicted_quantile"], quantile_after=q_after,
            feasible=feasible, planner_seconds=seconds).to_dict())
        # An infeasible re-plan means no dependable continuation exists: keep the current
        # plan (still the cheapest known continuation) rather than stopping, at risk.
        self.at_risk = not feasible
        if not feasible:
            self._infeasible = (rec["round"], scenario, start)
        if feasible:
            self.rounds = self.rounds[: self.rounds_done] + list(new.rounds)
            rec["replanned"] = True
            rec["predicted_quantile_after_replan"] = q_after
            if not new.rounds:
                self.notes.append(f"round {rec['round']}: the target is met now; stopping ({reason})")


def _rejection(item: str | Mapping[str, Any]) -> dict[str, str]:
    """A rejected client as ``{"client", "reason"}`` (a bare id: reason unknown)."""
    if isinstance(item, str):
        return {"client": item, "reason": "no valid update"}
    return {"client": str(item["client"]), "reason": str(item.get("reason", "no valid update"))}



def _finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None
