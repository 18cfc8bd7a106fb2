"""Run controller (the pure core of DepLStrategy): records, tracking and re-planning."""

from __future__ import annotations

import dataclasses

import pytest

from depl_fl.contract.plan import Targets
from depl_fl.orchestration.controller import RunController
from depl_fl.planner import make_plan
from depl_fl.tracking.online import ReplanPolicy
from tests.two_clusters import two_cluster_scenario, two_cluster_setting


@pytest.fixture()
def setting():
    return two_cluster_setting()


def test_failed_client_triggers_replan_without_it(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        replan_policy=ReplanPolicy(margin=10.0))  # only failures trigger
    first = ctl.next_decision()
    victim = first.clients[0]
    rec = ctl.record(first, 2.30, 2.10, accuracy=0.2, wall_s=0.1,
                     replied=[c for c in first.clients if c != victim], rejected=[victim])
    assert rec["replanned"] is True
    assert len(ctl.replans) == 1 and victim in ctl.replans[0]["reason"]
    later = {c for r in ctl.rounds[1:] for c in r.clients}
    assert later and victim not in later


def test_loss_falling_behind_triggers_replan_with_more_work(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        replan_policy=ReplanPolicy())
    first = ctl.next_decision()
    # No progress at all in round 1: the predicted quantile must exceed the target.
    rec = ctl.record(first, 2.30, 2.30, accuracy=0.1, wall_s=0.1,
                     replied=list(first.clients), rejected=[])
    assert rec["predicted_quantile"] > targets.target_loss
    assert rec["replanned"] is True and ctl.replans[0]["reason"].startswith("behind target")
    assert ctl.replans[0]["quantile_after"] < rec["predicted_quantile"]


def test_on_track_run_is_not_replanned_and_costs_are_modeled(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        replan_policy=ReplanPolicy(margin=10.0))
    first = ctl.next_decision()
    rec = ctl.record(first, 2.30, 2.0, accuracy=0.3, wall_s=0.1,
                     replied=list(first.clients), rejected=[])
    assert rec["replanned"] is False and ctl.replans == []
    from depl_fl.contract.semantics import round_energy, round_time
    assert rec["energy_j"] == pytest.approx(round_energy(scenario, first))
    assert rec["round_time_s"] == pytest.approx(round_time(scenario, first))


def test_mean_tracking_baseline_replans_on_the_mean_only(setting):
    scenario, targets, _, planner = setting
    plan = make_plan(scenario, targets, method="expectation", seed=0)

    def run(track_mean: bool) -> dict:
        ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                            replan_policy=ReplanPolicy(), track_mean=track_mean)
        first = ctl.next_decision()
        # A round exactly on the mean path: the mean-based plan stays on track,
        # while its pi-quantile is above the target (it promised only the mean).
        from depl_fl.planner import predict_quantile
        _, mean1, _ = predict_quantile(scenario, [first], 0.5)
        return ctl.record(first, scenario.loss.initial, mean1, accuracy=None, wall_s=0.0,
                          replied=list(first.clients), rejected=[])

    by_quantile, by_mean = run(False), run(True)
    assert by_quantile["predicted_quantile"] > targets.target_loss and by_quantile["replanned"]
    assert by_mean["predicted_quantile"] <= targets.target_loss + 1e-6
    assert by_mean["replanned"] is False


def test_ahead_of_target_with_the_target_met_stops_the_run(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        replan_policy=ReplanPolicy(margin=0.05, ahead_margin=0.05))
    first = ctl.next_decision()
    assert len(plan.rounds) > 1
    # A very good first round: the loss is already below the target, so the run stops at once
    # (tracking checks after every round whether the measured loss, judged, meets pi).
    rec = ctl.record(first, scenario.loss.initial, 1.2, accuracy=0.9, wall_s=0.1,
                     replied=list(first.clients), rejected=[])
    assert rec["replanned"] is True and ctl.replans[0]["reason"].startswith("target met")
    assert ctl.replans[0]["feasible"] is True and ctl.replans[0]["new_remaining_rounds"] == 0
    assert ctl.next_decision() is None


def test_ahead_of_target_not_yet_met_shortens_the_plan(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        replan_policy=ReplanPolicy(margin=0.05, ahead_margin=0.05))
    first = ctl.next_decision()
    rec = ctl.record(first, scenario.loss.initial, 1.6, accuracy=0.5, wall_s=0.1,
                     replied=list(first.clients), rejected=[])
    assert rec["predicted_quantile"] < targets.target_loss - 0.05
    assert rec["replanned"] is True
    replan = ctl.replans[0]
    assert 0 < replan["new_remaining_rounds"] < replan["old_remaining_rounds"]
    assert replan["quantile_after"] > rec["predicted_quantile"]


def test_failed_replan_keeps_the_plan_and_is_logged(setting, caplog):
    scenario, targets, plan, _ = setting

    def broken_planner(scn, tgt, start):
        raise RuntimeError("planner exploded")

    ctl = RunController(scenario, targets, plan, planner=broken_planner, tracking=True,
                        replan_policy=ReplanPolicy())
    first = ctl.next_decision()
    with caplog.at_level("WARNING", logger="depl_fl.orchestration.controller"):
        rec = ctl.record(first, 2.30, 2.30, accuracy=None, wall_s=0.0,
                         replied=list(first.clients), rejected=[])
    assert rec["replanned"] is False and ctl.rounds == list(plan.rounds)
    assert ctl.replans[0]["error"] == "RuntimeError: planner exploded"
    assert "re-plan" in caplog.text and "planner exploded" in caplog.text


def _on_mean_path(scenario, decision, loss, previous):
    from depl_fl.contract.semantics import data_ratio
    from depl_fl.tracking.plausibility import one_round_prediction

    mean, _, _ = one_round_prediction(scenario.loss, decision.model, previous, loss,
                                      data_ratio(scenario, decision.clients))
    return mean


def test_loss_spike_is_flagged_and_not_fed_to_the_estimator(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        replan_policy=ReplanPolicy())
    first = ctl.next_decision()
    l1 = _on_mean_path(scenario, first, scenario.loss.initial, None)
    rec1 = ctl.record(first, scenario.loss.initial, l1, accuracy=None, wall_s=0.0,
                      replied=list(first.clients), rejected=[])
    assert rec1["loss_flag"] is None and ctl.estimator.num_observations == 1
    second = ctl.next_decision()
    rec2 = ctl.record(second, l1, 10 * scenario.loss.initial, accuracy=None, wall_s=0.0,
                      replied=list(second.clients), rejected=[])
    assert rec2["loss_flag"] == "spike"
    # Tracking goes on from the imputed loss: the spike's one-round prediction.
    assert rec2["tracked_loss"] == pytest.approx(_on_mean_path(scenario, second, l1, first.model))
    assert ctl.estimator.num_observations == 1
    assert rec2["replanned"] is False  # the spike alone does not put the run behind target
    third = ctl.next_decision()
    rec3 = ctl.record(third, rec2["loss"], float("nan"), accuracy=None, wall_s=0.0,
                      replied=list(third.clients), rejected=[])
    assert rec3["loss_flag"] == "non-finite" and ctl.estimator.num_observations == 1
    assert rec3["predicted_quantile"] == pytest.approx(rec1["predicted_quantile"], rel=0.5)


def test_honest_rounds_drawn_from_the_profile_are_not_flagged(setting):
    import numpy as np

    from depl_fl.contract.semantics import iter_round_losses

    scenario, targets, plan, _ = setting
    flags = total = 0
    for seed in range(20):
        ctl = RunController(scenario, targets, plan, tracking=False)
        loss = scenario.loss.initial
        for decision, after in zip(plan.rounds, (float(v[0]) for v in iter_round_losses(
                scenario, plan.rounds, 1, np.random.default_rng(seed))), strict=True):
            rec = ctl.record(decision, loss, after, accuracy=None, wall_s=0.0,
                             replied=list(decision.clients), rejected=[])
            flags += rec["loss_flag"] is not None
            total += 1
            loss = after
    assert total >= 20 and flags / total <= 0.01


# ---------------------------------------------------------------------------
# Evaluation noise and label coverage (docs/CONTRACT_V2.md)
# ---------------------------------------------------------------------------
def test_a_validation_loss_just_under_the_target_does_not_stop_a_noisy_run(setting):
    scenario, targets, plan, planner = setting

    def controller():
        return RunController(scenario, targets, plan, planner=planner, tracking=True,
                             replan_policy=ReplanPolicy(margin=0.05, ahead_margin=0.05))

    quiet, noisy = controller(), controller()
    first = plan.rounds[0]
    kwargs = dict(accuracy=0.9, wall_s=0.1, replied=list(first.clients), rejected=[])
    quiet.record(first, scenario.loss.initial, 1.4, **kwargs)
    rec = noisy.record(first, scenario.loss.initial, 1.4, loss_sem=0.15, **kwargs)
    # Without an evaluation error the run stops at 1.4 < 1.5; with one, the test loss
    # may lie sqrt(2) * 0.15 from the validation loss: P[test <= 1.5] is only ~0.68.
    assert quiet.next_decision() is None
    assert noisy.next_decision() is not None and rec["loss_sem"] == 0.15
    assert noisy.start_std() == pytest.approx(2**0.5 * 0.15)
    # Its prediction for stopping now is the validation loss plus the z_pi margin of that offset.
    assert noisy.predict(1.4, first.model, []) == pytest.approx(1.4 + 1.2816 * 2**0.5 * 0.15, abs=1e-3)


def test_the_stop_rule_reads_the_measured_bootstrap_margin_not_the_gaussian_one(setting):
    scenario, targets, plan, planner = setting
    first = plan.rounds[0]
    kwargs = dict(accuracy=0.9, wall_s=0.1, replied=list(first.clients), rejected=[])

    def controller(guarantee="gaussian"):
        return RunController(scenario, targets, plan, planner=planner, tracking=True, guarantee=guarantee,
                             replan_policy=ReplanPolicy(margin=0.05, ahead_margin=0.05))

    # Without a measured margin: 1.2816 * sqrt(2) * 0.01 = 0.018 on the target 1.5.
    plain = controller()
    plain.loss_sem = 0.01
    assert plain.met_now(1.48) and not plain.met_now(1.49)
    wide, narrow = controller(), controller()
    rec = wide.record(first, scenario.loss.initial, 1.45, loss_sem=0.01, loss_margin=0.08, **kwargs)
    assert rec["loss_margin"] == 0.08 and wide.next_decision() is not None  # 1.45 + 0.08 > 1.5
    narrow.record(first, scenario.loss.initial, 1.45, loss_sem=0.2, loss_margin=0.03, **kwargs)
    assert narrow.next_decision() is None  # 1.45 + 0.03 <= 1.5, although sqrt(2) * 0.2 is wide
    # Cantelli is distribution-free: it keeps the larger of its own margin and the measured one.
    cantelli = controller("cantelli")
    cantelli.loss_sem, cantelli.loss_margin = 0.01, 0.03
    assert not cantelli.met_now(1.46) and cantelli.met_now(1.46 - 3 * 2**0.5 * 0.01)


def test_rounds_are_observed_at_their_effective_data_ratio(setting):
    from depl_fl.contract.semantics import data_ratio
    from depl_fl.orchestration.label_coverage import LabelCoverage

    scenario, targets, plan, planner = setting
    # c0-c2 hold only class 0, c3-c5 only class 1.
    props = {c.id: {"num-samples": c.num_samples,
                    "label-histogram": [c.num_samples, 0] if i < 3 else [0, c.num_samples]}
             for i, c in enumerate(scenario.clients)}
    cov = LabelCoverage(props)
    q0 = (150 + 160 + 170) / sum(c.num_samples for c in scenario.clients)
    assert cov.of(["c0"]) == pytest.approx((q0, 1 - q0))          # class 1 never shown
    assert cov.of(["c0", "c3"])[0] == pytest.approx(150 / 330 + (1 - q0))
    assert cov.effective_ratio(["c0"]) == pytest.approx(q0 * 150 / cov.total)
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True, label_coverage=cov)
    seen = []
    ctl.estimator.observe = seen.append
    first = dataclasses.replace(plan.rounds[0], clients=("c0", "c1", "c3"), levels={"A": 0, "B": 0})
    ctl.record(first, scenario.loss.initial, scenario.loss.initial - 0.1, accuracy=0.5, wall_s=0.1,
               replied=list(first.clients), rejected=[])
    (obs,) = seen
    c_s = cov.factor(first.clients)
    assert c_s < 0.9 and obs.sample_fraction == pytest.approx(c_s * data_ratio(scenario, first.clients))
    # Without histograms (a version-1 federation) r_eff is r.
    plain = LabelCoverage({c: {"num-samples": p["num-samples"]} for c, p in props.items()})
    assert plain.factor(["c0"]) == 1.0 and plain.of(["c0"]) is None


def _with_check(planner, verdict, calls):
    def plan_fn(scn, tgt, start):
        return planner(scn, tgt, start)

    def holds(scn, tgt, start, rounds):
        calls.append((start.rounds_done, len(rounds)))
        return verdict

    plan_fn.holds = holds
    return plan_fn


@pytest.mark.parametrize("verdict", [(True, 0.97), (False, 0.41)])
def test_a_behind_target_replan_waits_while_the_remaining_plan_passes_the_planners_check(setting, verdict):
    scenario, targets, plan, planner = setting
    calls: list = []
    ctl = RunController(scenario, targets, plan, planner=_with_check(planner, verdict, calls), tracking=True,
                        replan_policy=ReplanPolicy(keep_dependable_plan=True))
    first = ctl.next_decision()
    rec = ctl.record(first, 2.30, 2.30, accuracy=0.1, wall_s=0.1, replied=list(first.clients), rejected=[])
    assert rec["predicted_quantile"] > targets.target_loss
    assert calls == [(1, len(plan.rounds) - 1)]
    assert rec["plan_check"] == {"reason": rec["plan_check"]["reason"], "probability": verdict[1],
                                 "kept": verdict[0]}
    assert rec["plan_check"]["reason"].startswith("behind target")
    assert rec["replanned"] is (not verdict[0]) and len(ctl.replans) == (0 if verdict[0] else 1)
    if verdict[0]:
        assert ctl.rounds == plan.rounds


def test_without_keep_dependable_plan_the_check_is_not_run(setting):
    scenario, targets, plan, planner = setting
    calls: list = []
    ctl = RunController(scenario, targets, plan, planner=_with_check(planner, (True, 1.0), calls),
                        tracking=True, replan_policy=ReplanPolicy())
    first = ctl.next_decision()
    rec = ctl.record(first, 2.30, 2.30, accuracy=0.1, wall_s=0.1, replied=list(first.clients), rejected=[])
    assert calls == [] and rec["replanned"] is True and "plan_check" not in rec


def test_plan_holds_is_the_planners_acceptance_test(setting):
    from depl_fl.planner import plan_holds

    scenario, targets, plan, _ = setting
    holds, prob = plan_holds(scenario, targets, plan.rounds)
    assert holds and prob >= targets.target_prob
    assert prob == pytest.approx(plan.predicted["probability"], abs=1e-12)
    short, p_short = plan_holds(scenario, targets, plan.rounds[:1])
    assert not short and p_short < targets.target_prob
    assert plan_holds(scenario, targets, [])[0] is False


def test_the_replanning_scenario_is_kept_while_no_client_fails_anew(setting):
    scenario, targets, plan, planner = setting
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True)
    assert ctl._replanning_scenario() is scenario
    ctl.failed_clients.add("c1")
    first = ctl._replanning_scenario()
    assert [c.id for c in first.clients] == ["c0", "c2", "c3", "c4", "c5"]
    assert ctl._replanning_scenario() is first  # the planner's per-scenario checks are not repeated
    ctl.failed_clients.add("c4")
    second = ctl._replanning_scenario()
    assert second is not first and [c.id for c in second.clients] == ["c0", "c2", "c3", "c5"]


def test_a_plan_from_the_explorations_trend_starts_the_trend_filter_there(setting):
    scenario, targets, plan, planner = setting
    plain = RunController(scenario, targets, plan, planner=planner, tracking=True)
    assert plain.trend is None
    ctl = RunController(scenario, targets, plan, planner=planner, tracking=True,
                        start_trend={"mean": 1.9, "std": 0.2})
    assert ctl.trend is not None and ctl.trend.mean == 1.9 and ctl.trend.var == pytest.approx(0.04)
    start = ctl._start(2.3, None, None, ctl.trend)  # a prediction before the first round: from the trend
    assert start.loss_mean == pytest.approx(1.9)


def _plan_regime_setting():
    """The setting's federation with a plan-regime profile (judged error: no online refit, so the
    planner's scenario stays the same object from round to round)."""
    scenario = two_cluster_scenario(plan_regime=True)
    targets = Targets(target_loss=1.5, target_prob=0.9, deadline_s=400.0, max_rounds=7)
    return scenario, targets, make_plan(scenario, targets, method="depl", seed=0)


def _counting(calls):
    def planner(scn, tgt, start):
        calls.append(start)
        return make_plan(scn, tgt, method="depl", seed=0, start=start)
    return planner


def _run_rounds(ctl, losses):
    recs = []
    for before, after in losses:
        decision = ctl.next_decision()
        recs.append(ctl.record(decision, before, after, accuracy=0.1, wall_s=0.1,
                               replied=list(decision.clients), rejected=[]))
    return recs


# Slow progress, then none: the re-plan of round 4 finds no dependable plan within the round limit.
STALLING = [(2.3, 2.28), (2.28, 2.3), (2.3, 2.31), (2.31, 2.33)]


def test_after_an_infeasible_replan_one_from_a_start_no_better_is_skipped_and_recorded():
    scenario, targets, plan = _plan_regime_setting()
    assert plan.feasible and scenario.loss.judged_error
    calls: list = []
    ctl = RunController(scenario, targets, plan, planner=_counting(calls), tracking=True,
                        replan_policy=ReplanPolicy())
    recs = _run_rounds(ctl, [*STALLING, (2.33, 2.35)])
    assert [r["feasible"] for r in ctl.replans] == [True, True, True, False] and len(calls) == 4
    fourth, fifth = recs[3], recs[4]
    assert fourth["at_risk"] is True and "replan_skipped" not in fourth
    assert fifth["predicted_quantile"] > targets.target_loss and fifth["at_risk"] is True
    assert fifth["replan_skipped"] == {"reason": fifth["replan_skipped"]["reason"],
                                       "infeasible_since_round": 4}
    assert fifth["replan_skipped"]["reason"].startswith("behind target")
    assert fifth["replanned"] is False and len(ctl.replans) == 4
    assert any("not re-planned" in note for note in ctl.take_notes())
    # What the skipped re-plan would have found: no dependable plan either.
    skipped = ctl._start(fifth["tracked_loss"], fifth["model"], fifth["clients"], ctl.trend)
    assert skipped.loss_mean >= calls[-1].loss_mean
    assert make_plan(scenario, targets, method="depl", seed=0, start=skipped).feasible is False


@pytest.mark.parametrize("loss", [2.1, 1.9])
def test_a_replan_from_a_better_start_after_an_infeasible_one_runs(loss):
    scenario, targets, plan = _plan_regime_setting()
    calls: list = []
    ctl = RunController(scenario, targets, plan, planner=_counting(calls), tracking=True,
                        replan_policy=ReplanPolicy())
    fifth = _run_rounds(ctl, [*STALLING, (2.33, loss)])[-1]
    assert ctl.replans[3]["feasible"] is False
    assert calls[-1].loss_mean < calls[-2].loss_mean  # a better start: the planner is asked again
    assert len(calls) == 5 and "replan_skipped" not in fifth


def test_a_resumed_run_skips_the_same_replan_as_the_uninterrupted_one():
    import pickle

    from depl_fl.orchestration.checkpointing import INFEASIBLE_KEY, controller_state, restore_controller

    scenario, targets, plan = _plan_regime_setting()
    ctl = RunController(scenario, targets, plan, planner=_counting([]), tracking=True,
                        replan_policy=ReplanPolicy())
    _run_rounds(ctl, STALLING)
    assert ctl._infeasible is not None and ctl._infeasible[0] == 4
    state = pickle.loads(pickle.dumps(controller_state(ctl)))  # as a checkpoint holds it
    assert "_infeasible" not in state and state[INFEASIBLE_KEY][0] == 4
    fifth = _run_rounds(ctl, [(2.33, 2.35)])[-1]
    assert "replan_skipped" in fifth

    calls: list = []
    resumed = RunController(pickle.loads(pickle.dumps(scenario)), targets, plan, planner=_counting(calls),
                            tracking=True, replan_policy=ReplanPolicy())
    restore_controller(resumed, state)
    again = _run_rounds(resumed, [(2.33, 2.35)])[-1]
    assert again["replan_skipped"] == fifth["replan_skipped"] and calls == []

    older = {k: v for k, v in state.items() if k != INFEASIBLE_KEY}  # a checkpoint without the key
    rebuilt = RunController(scenario, targets, plan, planner=_counting(calls), tracking=True,
                            replan_policy=ReplanPolicy())
    restore_controller(rebuilt, older)
    assert "replan_skipped" not in _run_rounds(rebuilt, [(2.33, 2.35)])[-1] and len(calls) == 1
