"""The cost model fitted from measured replies, and the round-time drift test."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import scenario_from_dict
from depl_fl.contract.semantics import client_energy, client_time, round_time
from depl_fl.tracking.device_costs import (
    DriftTest,
    ReplyCost,
    RoundCost,
    fit_costs,
    fitted_scenario,
    recalibrated,
    weakest_source,
)


def _scenario():
    return scenario_from_dict({
        "version": 1, "local_epochs": 1,
        "clusters": [
            {"id": "A", "levels": [{"flops_per_s": 2e8, "joules_per_flop": 2e-8},
                                   {"flops_per_s": 4e8, "joules_per_flop": 5e-8}],
             "bytes_per_s": 1e6, "joules_per_byte": 1e-6, "activation_joules": 5.0, "max_clients": 10},
            {"id": "B", "levels": [{"flops_per_s": 5e7, "joules_per_flop": 5e-9},
                                   {"flops_per_s": 1e8, "joules_per_flop": 1.2e-8}],
             "bytes_per_s": 2.5e5, "joules_per_byte": 5e-7, "activation_joules": 1.0, "max_clients": 10},
            {"id": "C", "levels": [{"flops_per_s": 1e8, "joules_per_flop": 1e-8}],
             "bytes_per_s": 1e6, "joules_per_byte": 0.0, "activation_joules": 0.0, "max_clients": 10}],
        "clients": [{"id": "c0", "cluster": "A", "num_samples": 100},
                    {"id": "c1", "cluster": "B", "num_samples": 150},
                    {"id": "c2", "cluster": "B", "num_samples": 120},
                    {"id": "c3", "cluster": "C", "num_samples": 90}],
        "models": [{"id": "full", "compression": 0.0, "flops_per_sample": 3e6, "size_bytes": 4e4},
                   {"id": "p50", "compression": 0.5, "flops_per_sample": 1e6, "size_bytes": 1e4}],
        "loss": {"initial": 2.3, "run": {m: {"levels": [0.0, 2.3], "mean": [0.0, 0.1], "std": [0.0, 0.05]}
                                         for m in ("full", "p50")}, "switch": []},
    })


# The devices' truth: seconds per sample = g_m / f(c, l); p50 is only 2x faster (not 3x as its FLOPs).
TRUE_G = {"full": 3e6, "p50": 1.5e6}
TRUE_F = {("A", 0): 1e8, ("B", 0): 1e8}  # A is 2x slower than declared, B 2x faster
WATTS = {("A", 0): 4.0}


def _exploration(rng, overhead=1.5, rounds=6):
    scen = _scenario()
    out = []
    for _ in range(rounds):
        replies = []
        for cid, model in (("c0", "full"), ("c1", "p50"), ("c2", "full"), ("c0", "p50")):
            cl = scen.client(cid).cluster
            n = scen.client(cid).num_samples
            t = n * TRUE_G[model] / TRUE_F[(cl, 0)] * float(np.exp(rng.normal(0, 0.03)))
            watts = WATTS.get((cl, 0))
            replies.append(ReplyCost(cl, 0, model, n, t, None if watts is None else watts * t,
                                     "declared" if watts is not None else "model"))
        busy = max(r.train_time_s + 2 * scen.model(r.model).size_bytes / scen.cluster(r.cluster).bytes_per_s
                   for r in replies)
        out.append(RoundCost(busy + overhead, tuple(replies)))
    return out


def test_fit_recovers_the_devices_times_energy_and_overhead():
    rng = np.random.default_rng(0)
    scen = _scenario()
    fit = fit_costs(_exploration(rng), scen)
    assert fit.overhead_s == pytest.approx(1.5, abs=1e-6)
    assert fit.energy_source == "model"  # B declared no power
    assert fit.watts[("A", 0)] == pytest.approx(4.0)
    new, report = fitted_scenario(scen, fit)
    assert report["median_relative_error"] < 0.05
    for cid, model in (("c0", "full"), ("c1", "p50"), ("c2", "full"), ("c0", "p50")):
        cl = scen.client(cid).cluster
        n = scen.client(cid).num_samples
        truth = n * TRUE_G[model] / TRUE_F[(cl, 0)]
        transfer = 2 * scen.model(model).size_bytes / scen.cluster(cl).bytes_per_s
        assert client_time(new, cid, model, 0) == pytest.approx(truth + transfer + 1.5, rel=0.05)
        declared_compute = client_time(scen, cid, model, 0) - transfer
        assert abs(declared_compute / truth - 1) > 0.3  # the table was far off
    # Level 1 was never measured: its declared ratio to level 0 (2x) is kept; energy = watts x time.
    assert report["levels"]["A/1"]["speed"] == "scaled"
    assert new.cluster("A").levels[1].flops_per_s == pytest.approx(2 * new.cluster("A").levels[0].flops_per_s)
    assert report["levels"]["C/0"]["speed"] == "declared"
    assert new.cluster("C").levels[0].flops_per_s == scen.cluster("C").levels[0].flops_per_s
    compute = 100 * TRUE_G["full"] / TRUE_F[("A", 0)]
    transfer_e = 2 * 4e4 * 1e-6
    assert client_energy(new, "c0", "full", 0) == pytest.approx(4.0 * compute + transfer_e, rel=0.05)
    # B's energy keeps the declared J/FLOP (nothing measured it).
    assert new.cluster("B").levels[0].joules_per_flop == scen.cluster("B").levels[0].joules_per_flop
    # The full variant is the gauge: its FLOPs per sample stay the measured network's.
    assert new.model("full").flops_per_sample == scen.model("full").flops_per_sample
    assert new.model("p50").flops_per_sample == pytest.approx(1.5e6, rel=0.05)


def test_fit_skips_unusable_replies_and_a_scenario_without_measurements_is_unchanged():
    scen = _scenario()
    bad = RoundCost(float("nan"), (ReplyCost("A", 0, "full", 0, 1.0), ReplyCost("A", 0, "full", 10, 0.0),
                                   ReplyCost("A", 0, "full", 10, float("inf"))))
    fit = fit_costs([bad], scen)
    assert fit.replies == 0 and fit.overhead_s is None and not fit.seconds_per_sample
    new, report = fitted_scenario(scen, fit)
    assert report["cells"] == 0
    for cid in ("c0", "c1", "c3"):
        assert client_time(new, cid, "full", 0) == client_time(scen, cid, "full", 0)


def test_weakest_energy_source():
    assert weakest_source(["meter", "meter"]) == "meter"
    assert weakest_source(["meter", "declared"]) == "declared"
    assert weakest_source(["declared", "model"]) == "model"
    assert weakest_source([]) == "model"


def test_drift_needs_consecutive_rounds_on_one_side():
    drift = DriftTest(tolerance=0.25, rounds=2)
    assert drift.observe(10.0, 14.0) is None  # one slow round: noise
    assert drift.observe(10.0, 9.0) is None
    assert drift.observe(10.0, 13.0) is None
    reason = drift.observe(10.0, 13.5)
    assert reason is not None and "1.3" in reason
    assert drift.observe(10.0, 5.0) is None  # reset after a drift
    assert drift.observe(10.0, 5.0) is not None  # faster than planned drifts too
    with pytest.raises(ValueError, match="drift_tolerance"):
        DriftTest(tolerance=0.0)


def test_recalibration_makes_a_slowed_cluster_slower_and_leaves_the_others():
    rng = np.random.default_rng(1)
    scen, _ = fitted_scenario(_scenario(), fit_costs(_exploration(rng), _scenario()))
    decision = RoundDecision("full", ("c0", "c1"), {"A": 0, "B": 0})
    planned = round_time(scen, decision)
    # B became 3x slower after the exploration.
    b_time = 150 * TRUE_G["full"] / (TRUE_F[("B", 0)] / 3)
    a_time = 100 * TRUE_G["full"] / TRUE_F[("A", 0)]
    replies = (ReplyCost("A", 0, "full", 100, a_time), ReplyCost("B", 0, "full", 150, b_time))
    transfer_b = 2 * 4e4 / 2.5e5
    wall = b_time + transfer_b + 1.5
    assert wall / planned > 1.5
    new, _ = recalibrated(scen, [RoundCost(wall, replies)] * 2)
    assert round_time(new, decision) == pytest.approx(wall, rel=0.02)
    assert new.cluster("A").levels[0].flops_per_s == pytest.approx(scen.cluster("A").levels[0].flops_per_s,
                                                                   rel=0.05)
    assert math.isclose(new.cluster("B").levels[1].flops_per_s / new.cluster("B").levels[0].flops_per_s,
                        scen.cluster("B").levels[1].flops_per_s / scen.cluster("B").levels[0].flops_per_s)


def test_links_faster_than_declared_are_scaled_to_what_the_rounds_show():
    scen = _scenario()
    # Rounds with no overhead whose transfers took a quarter of the declared time.
    rounds = []
    for _ in range(3):
        replies = (ReplyCost("A", 0, "full", 100, 3.0), ReplyCost("B", 0, "full", 150, 1.0))
        slowest = max(r.train_time_s + 0.25 * 2 * 4e4 / scen.cluster(r.cluster).bytes_per_s for r in replies)
        rounds.append(RoundCost(slowest, replies))
    fit = fit_costs(rounds, scen)
    assert fit.overhead_s == 0.0 and fit.link_scale == pytest.approx(0.25 * 0.08 / 0.32, rel=1e-6)
    new, _ = fitted_scenario(scen, fit)
    assert new.cluster("B").bytes_per_s == pytest.approx(scen.cluster("B").bytes_per_s / fit.link_scale)


def test_timed_replies_give_each_cluster_its_own_overhead():
    # B's nodes take 6 s beyond training to pick a message up and answer (a slow CPU), A's 1 s; the
    # server takes 0.5 s after the last reply. Every exploration round waits for B.
    scen = _scenario()
    lag = {"A": 1.0, "B": 6.0}

    def reply(cid, model):
        cl, n = scen.client(cid).cluster, scen.client(cid).num_samples
        t = n * TRUE_G[model] / TRUE_F[(cl, 0)]
        return ReplyCost(cl, 0, model, n, t, arrival_s=t + 2 * scen.model(model).size_bytes
                         / scen.cluster(cl).bytes_per_s + lag[cl])

    rounds = []
    for _ in range(4):
        replies = (reply("c0", "full"), reply("c1", "p50"), reply("c2", "full"))
        rounds.append(RoundCost(max(r.arrival_s for r in replies) + 0.5, replies))
    fit = fit_costs(rounds, scen)
    assert fit.cluster_overhead_s == pytest.approx({"A": 1.5, "B": 6.5})
    new, _ = fitted_scenario(scen, fit)
    only_a = RoundDecision(model="full", clients=("c0",), levels={"A": 0})
    truth = reply("c0", "full").arrival_s + 0.5
    assert round_time(new, only_a) == pytest.approx(truth, rel=1e-6)
    # One overhead for every cluster (no arrival times) charges A's round with B's wait.
    untimed = [RoundCost(r.wall_s, tuple(dataclasses.replace(x, arrival_s=None) for x in r.replies))
               for r in rounds]
    common, _ = fitted_scenario(scen, fit_costs(untimed, scen))
    assert round_time(common, only_a) > truth + 4.0
    assert fit_costs(untimed, scen).cluster_overhead_s == {}
