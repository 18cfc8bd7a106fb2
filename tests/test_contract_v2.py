"""Scenario contract version 2 (docs/CONTRACT_V2.md): parsing, round trip and the semantics' new terms."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from depl_fl.cli import main
from depl_fl.contract.plan import RoundDecision, Targets
from depl_fl.contract.scenario import Scenario, scenario_from_dict, scenario_to_dict
from depl_fl.contract.semantics import (
    effective_ratio,
    evaluate_plan,
    judged_losses,
    judged_probabilities,
    judged_probability,
    judged_reaches,
    plan_errors,
    set_coverage,
    simulate_final_losses,
)

# Four classes, uniform reference; c0 and c1 together show every class, c2 lacks class 3.
V1 = {
    "version": 1,
    "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                  "bytes_per_s": 1e6}],
    "clients": [{"id": "c0", "cluster": "A", "num_samples": 200},
                {"id": "c1", "cluster": "A", "num_samples": 200},
                {"id": "c2", "cluster": "A", "num_samples": 200}],
    "models": [{"id": "full", "flops_per_sample": 1e6, "size_bytes": 1e4}],
    "loss": {"initial": 2.0, "reference_samples": 400, "data_exponent_mean": 0.5,
             "data_exponent_std": 0.5,
             "run": {"full": {"levels": [0.0, 3.0], "mean": [0.05, 0.05], "std": [0.04, 0.04]}}},
}
HISTOGRAMS = {"c0": [100, 100, 0, 0], "c1": [0, 0, 100, 100], "c2": [100, 50, 50, 0]}


def _doc(version: int = 2, histograms: bool = True, **loss: object) -> dict:
    doc = copy.deepcopy(V1)
    doc["version"] = version
    if histograms:
        for client in doc["clients"]:
            client["label_histogram"] = list(HISTOGRAMS[client["id"]])
    doc["loss"].update(loss)
    return doc


def _rounds(clients: tuple[str, ...], k: int = 10) -> list[RoundDecision]:
    return [RoundDecision("full", clients, {"A": 0})] * k


def _losses(scenario: Scenario, clients: tuple[str, ...], k: int = 10, n: int = 4000) -> np.ndarray:
    return simulate_final_losses(scenario, _rounds(clients, k), n, 7)


def test_version_1_ignores_the_version_2_fields() -> None:
    plain = scenario_from_dict(_doc(version=1, histograms=False))
    extras = scenario_from_dict(_doc(version=1, label_shares=[1, 1, 1, 1], coverage_floor_loss=4.0,
                                     min_coverage=0.9, max_uncovered=0.0))
    assert extras.loss.label_shares is None and extras.clients[0].label_histogram is None
    assert set_coverage(extras, ("c0",)) is None
    assert np.array_equal(_losses(plain, ("c0",)), _losses(extras, ("c0",)))
    assert "label_histogram" not in scenario_to_dict(extras)["clients"][0]


def test_version_2_without_the_new_fields_means_version_1() -> None:
    v1 = scenario_from_dict(_doc(version=1, histograms=False))
    v2 = scenario_from_dict(_doc(version=2, histograms=False))
    assert v2.version == 2 and v2.loss.label_shares is None
    for clients in [("c0",), ("c0", "c2")]:
        assert np.array_equal(_losses(v1, clients), _losses(v2, clients))
        assert evaluate_plan(v1, _rounds(clients), Targets(0.5, 0.9, 1e9)) \
            == evaluate_plan(v2, _rounds(clients), Targets(0.5, 0.9, 1e9))


def test_version_2_fields_round_trip() -> None:
    doc = _doc(label_shares=[1, 1, 1, 2], coverage_threshold=0.2, coverage_floor_loss=4.5,
               min_coverage=0.5, max_uncovered=0.25)
    doc["loss"]["run"]["full"]["eval_std"] = [0.01, 0.02]
    scenario = scenario_from_dict(doc)
    assert scenario.loss.label_shares == pytest.approx((0.2, 0.2, 0.2, 0.4))
    assert scenario.loss.run["full"].eval_std == (0.01, 0.02)
    assert scenario.client("c2").label_histogram == (100, 50, 50, 0)
    written = scenario_to_dict(scenario)
    assert written["version"] == 2
    assert written["clients"][2]["label_histogram"] == [100, 50, 50, 0]
    assert written["loss"]["run"]["full"]["eval_std"] == [0.01, 0.02]
    for key in ("coverage_threshold", "coverage_floor_loss", "min_coverage", "max_uncovered"):
        assert written["loss"][key] == doc["loss"][key]
    again = scenario_from_dict(json.loads(json.dumps(written)))
    assert again == scenario
    assert again.clients == scenario.clients


def test_default_reference_shares_are_the_pooled_histograms() -> None:
    scenario = scenario_from_dict(_doc())
    pooled = np.array([200, 150, 150, 100]) / 600
    assert scenario.loss.label_shares == pytest.approx(tuple(pooled))
    c, u = set_coverage(scenario, ("c0", "c1", "c2"))
    assert (c, u) == (pytest.approx(1.0), 0.0)


def test_effective_ratio_scales_the_walk_like_fewer_samples() -> None:
    # c0 shows half of a uniform reference: coverage 0.5, so r_eff = 0.5 * 200/400, the same
    # walk as a version-1 client with 100 samples (same random stream, bit for bit).
    v2 = scenario_from_dict(_doc(label_shares=[1, 1, 1, 1]))
    assert set_coverage(v2, ("c0",)) == (pytest.approx(0.5), pytest.approx(0.5))
    assert effective_ratio(v2, ("c0",)) == pytest.approx(0.25)
    assert effective_ratio(v2, ("c0", "c1")) == pytest.approx(1.0)  # together: every class evenly
    half = _doc(version=1, histograms=False)
    half["clients"][0]["num_samples"] = 100
    v1 = scenario_from_dict(half)
    assert np.array_equal(_losses(v2, ("c0",)), _losses(v1, ("c0",)))
    # A client without a histogram gives the version-1 meaning to every set it is in.
    mixed = _doc(label_shares=[1, 1, 1, 1])
    del mixed["clients"][1]["label_histogram"]
    mixed_s = scenario_from_dict(mixed)
    assert set_coverage(mixed_s, ("c0", "c1")) is None
    assert effective_ratio(mixed_s, ("c0", "c1")) == pytest.approx(1.0)
    assert effective_ratio(mixed_s, ("c0",)) == pytest.approx(0.25)


def test_unseen_classes_lift_the_final_loss_towards_the_floor() -> None:
    # c2 never shows class 3 (reference share 1/4): judged = 0.75 * L + 0.25 * F.
    with_floor = scenario_from_dict(_doc(label_shares=[1, 1, 1, 1], coverage_floor_loss=4.0))
    no_floor = scenario_from_dict(_doc(label_shares=[1, 1, 1, 1]))
    assert set_coverage(with_floor, ("c2",))[1] == pytest.approx(0.25)
    walk = _losses(no_floor, ("c2",))
    judged = _losses(with_floor, ("c2",))
    assert np.allclose(judged, 0.75 * walk + 1.0)
    assert np.all(judged > 1.0)  # however long one trains
    # A set that shows every class is not lifted.
    assert np.array_equal(_losses(with_floor, ("c0", "c1")), _losses(no_floor, ("c0", "c1")))
    res = evaluate_plan(with_floor, _rounds(("c2",), 40), Targets(0.8, 0.9, 1e9))
    assert res["valid"] and res["probability"] == 0.0


def test_eval_std_splits_the_spread_into_walk_and_one_final_draw() -> None:
    # Constant profile, r = 1: variance after K rounds is K (s^2 - 2 e^2) + e^2 instead of K s^2.
    doc = _doc(histograms=False, reference_samples=200)
    s, e, k, n = 0.04, 0.025, 20, 100_000
    doc["loss"]["run"]["full"]["eval_std"] = [e, e]
    v2 = scenario_from_dict(doc)
    v1 = scenario_from_dict(_doc(version=1, histograms=False, reference_samples=200))
    rounds = _rounds(("c0",), k)
    var2 = simulate_final_losses(v2, rounds, n, 3).var()
    var1 = simulate_final_losses(v1, rounds, n, 3).var()
    assert var1 == pytest.approx(k * s * s, rel=0.03)
    assert var2 == pytest.approx(k * (s * s - 2 * e * e) + e * e, rel=0.03)
    # The mean is unchanged (the evaluation noise has mean 0).
    mean2 = simulate_final_losses(v2, rounds, n, 3).mean()
    assert mean2 == pytest.approx(2.0 - k * 0.05, abs=3 * np.sqrt(var2 / n))
    # The walk alone (judged=False) has no final draw.
    walk = simulate_final_losses(v2, rounds, n, 3, judged=False)
    assert walk.var() == pytest.approx(k * (s * s - 2 * e * e), rel=0.03)


def test_judged_probability_integrates_the_evaluation_noise() -> None:
    doc = _doc(label_shares=[1, 1, 1, 1], coverage_floor_loss=3.0)
    doc["loss"]["run"]["full"]["eval_std"] = [0.028, 0.02]
    scenario = scenario_from_dict(doc)
    rounds = _rounds(("c2",), 15)
    walk = simulate_final_losses(scenario, rounds, 50_000, 11, judged=False)
    judged = judged_losses(scenario, rounds[-1], walk, np.random.default_rng(5))
    for target in (1.6, 1.75, 1.9):
        exact = judged_probability(scenario, rounds[-1], walk, target)
        assert 0.0 < exact < 1.0
        assert np.mean(judged <= target) == pytest.approx(exact, abs=0.01)


def _noisy_walks(trajectories: int, seeds: int):
    """Per oscillation kind (normal, Student-t): the scenario, a 4-round plan on c2 and ``seeds``
    rows of ``trajectories`` walk losses, under a map with evaluation noise and judged error
    (with the Student-t degrees of freedom, None for normal)."""
    doc = _doc(label_shares=[1, 1, 1, 1], coverage_floor_loss=3.0)
    doc["loss"]["run"]["full"]["eval_std"] = [0.028, 0.02]
    doc["loss"]["judged_error"] = 0.01
    for dof in (None, 3.4):
        doc["loss"]["eval_dof"] = dof
        scenario = scenario_from_dict(doc)
        rounds = _rounds(("c2",), 4)
        walks = np.stack([simulate_final_losses(scenario, rounds, trajectories, seed, judged=False)
                          for seed in range(seeds)])
        yield dof, scenario, rounds, walks


def test_judged_probabilities_of_many_walks_equal_one_at_a_time() -> None:
    for _, scenario, rounds, walks in _noisy_walks(2_000, 5):
        many = judged_probabilities(scenario, rounds[-1], walks, 1.8)
        one = [judged_probability(scenario, rounds[-1], walk, 1.8) for walk in walks]
        assert many.tolist() == one and len(set(one)) == 5


def test_judged_reaches_is_the_comparison_of_the_judged_probabilities_row_by_row() -> None:
    for dof, scenario, rounds, walks in _noisy_walks(2_001, 6):
        probs = judged_probabilities(scenario, rounds[-1], walks, 2.2)
        assert 0.05 < probs.min() < probs.max() < 0.95 and len(set(probs)) == 6
        # Far from every row (decided on the first slices), at each row's own figure and one
        # rounding step either side of it (decided on the mean of all the terms).
        needs = [0.0, 0.01, 0.5, 0.99, 1.0, *probs, *np.nextafter(probs, 2.0), *np.nextafter(probs, -1.0)]
        for need in needs:
            assert judged_reaches(scenario, rounds[-1], walks, 2.2, need).tolist() \
                == (probs >= need).tolist(), (dof, need)


def _student_t_row() -> tuple:
    """A Student-t scenario with a small judged error, its last round and one walk of 4,000 trajectories."""
    doc = _doc(label_shares=[1, 1, 1, 1], coverage_floor_loss=3.0)
    doc["loss"]["run"]["full"]["eval_std"] = [0.028, 0.02]
    doc["loss"]["eval_dof"] = 3.4
    doc["loss"]["judged_error"] = 1e-4
    scenario = scenario_from_dict(doc)
    rounds = _rounds(("c2",), 4)
    return scenario, rounds[-1], simulate_final_losses(scenario, rounds, 4_000, 3, judged=False)[None, :]


def test_judged_reaches_decides_a_clear_row_on_its_first_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    import depl_fl.contract.semantics as semantics

    scenario, last, walk = _student_t_row()
    fmap = semantics.final_map(scenario, last)
    z = semantics._judged_scores(fmap, walk[0], 2.2, semantics._quadrature_points(fmap))
    open_terms = int(np.count_nonzero((z < semantics.NDTR_ONE) & (z > semantics.NDTR_ZERO)))
    assert 0 < open_terms < z.size  # some terms known without ndtr, some not
    seen: list[int] = []
    ndtr = semantics.ndtr
    monkeypatch.setattr(semantics, "ndtr", lambda x: seen.append(np.size(x)) or ndtr(x))
    prob = float(judged_probabilities(scenario, last, walk, 2.2)[0])
    seen.clear()
    assert not judged_reaches(scenario, last, walk, 2.2, (1.0 + prob) / 2.0)[0]
    assert sum(seen) < open_terms  # rejected before every open term was computed
    seen.clear()
    assert judged_reaches(scenario, last, walk, 2.2, prob)[0]
    # At the row's own figure: every open term on the slices, then the whole row's mean decides.
    assert sum(seen[:-1]) == open_terms and seen[-1] == (z.size if 2 * open_terms > z.size else open_terms)


def test_open_bands_split_every_trajectory_where_its_terms_are_exactly_one_and_zero() -> None:
    from scipy.special import ndtr

    import depl_fl.contract.semantics as semantics

    scenario, last, walk = _student_t_row()
    fmap = semantics.final_map(scenario, last)
    points = semantics._quadrature_points(fmap)
    seen = np.zeros(3, dtype=int)  # terms split off as ones, zeros, open
    for target in (1.5, 1.9, 2.2, 2.6):
        z = semantics._judged_scores(fmap, walk[0], target, points)  # (points, trajectories)
        bands = semantics._open_bands(fmap, walk[0], target, points)
        j = np.arange(points.size)[:, None]
        ones, zeros = j < bands.first[None, :], j >= bands.stop[None, :]
        assert np.all(ndtr(z[ones]) == 1.0) and np.all(ndtr(z[zeros]) == 0.0)
        assert np.all((z[~(ones | zeros)] < semantics.NDTR_ONE) | (z[~(ones | zeros)] > semantics.NDTR_ZERO))
        assert np.array_equal(bands.scores(0, walk.size, points), z.T[(~(ones | zeros)).T])
        seen += [np.count_nonzero(ones), np.count_nonzero(zeros), np.count_nonzero(~(ones | zeros))]
    assert np.all(seen > 0)


def test_ndtr_is_computed_off_its_exact_tails_only_with_the_same_doubles() -> None:
    from scipy.special import ndtr

    from depl_fl.contract.semantics import NDTR_ONE, NDTR_ZERO, _ndtr

    rng = np.random.default_rng(9)
    tails = np.concatenate([rng.uniform(NDTR_ONE, 1e6, 100_000), -rng.uniform(-NDTR_ZERO, 1e6, 100_000),
                            [np.inf, -np.inf, NDTR_ONE, NDTR_ZERO]])
    assert np.array_equal(ndtr(tails), (tails > 0).astype(float))  # what the step relies on
    for z in (rng.normal(0.0, 30.0, (32, 500)), rng.normal(0.0, 1.0, 700), np.append(tails, [np.nan, 0.3])):
        assert np.array_equal(_ndtr(z), ndtr(z), equal_nan=True)


def test_the_normal_probability_below_a_gap_is_the_masked_quotients_bit_for_bit() -> None:
    from scipy.special import ndtr

    from depl_fl.contract.semantics import _normal_below

    rng = np.random.default_rng(4)
    gap = rng.normal(size=(32, 500))
    for std in (np.abs(rng.normal(size=(1, 500))) + 1e-3, np.abs(rng.normal(size=(32, 500))) + 1e-3):
        masked = ndtr(np.where(std > 0.0, gap / np.where(std > 0.0, std, 1.0), 0.0))
        assert np.array_equal(_normal_below(gap, std), masked)
    std = np.abs(rng.normal(size=500))
    std[:50] = 0.0  # no spread: a step at the gap
    std[50] = np.nan
    got = _normal_below(gap[0], std)
    assert np.array_equal(got[:50], (gap[0, :50] >= 0.0).astype(float))
    assert np.array_equal(got[51:], ndtr(gap[0, 51:] / std[51:])) and got[50] in (0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):  # the masked formula, step included
        for gaps, spread in ((gap[0], std), (gap, std[None, :]), (np.float64(-0.5), np.float64(0.0))):
            masked = np.where(spread > 0.0, gaps / np.where(spread > 0.0, spread, 1.0),
                              np.where(gaps >= 0.0, np.inf, -np.inf))
            assert np.array_equal(_normal_below(gaps, spread), ndtr(masked))
    assert np.array_equal(_normal_below(gap, None), (gap >= 0.0).astype(float))


def test_sets_outside_the_measured_coverage_make_a_plan_invalid(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    doc = _doc(label_shares=[1, 1, 1, 1], min_coverage=0.8, max_uncovered=0.0)
    scenario = scenario_from_dict(doc)
    targets = Targets(1.5, 0.9, 1e9)
    assert plan_errors(scenario, _rounds(("c0", "c1")), targets) == []
    errors = plan_errors(scenario, _rounds(("c0",), 1), targets)
    assert errors == ["round 0: label coverage c_S=0.5 outside the profile's measured range [0.8, 1]"]
    loose = scenario_from_dict(_doc(label_shares=[1, 1, 1, 1], max_uncovered=0.1))
    assert "uncovered label share u_S=0.25" in plan_errors(loose, _rounds(("c2",), 1), targets)[0]
    # Through the command line: evaluate reports the plan invalid, naming the round.
    path, plan = tmp_path / "s.json", tmp_path / "p.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    plan.write_text(json.dumps({"version": 1, "method": "depl", "feasible": True, "rounds": [
        {"model": "full", "clients": ["c0", "c1"], "levels": {"A": 0}},
        {"model": "full", "clients": ["c0"], "levels": {"A": 0}}]}), encoding="utf-8")
    main(["evaluate", str(path), str(plan), "--target-loss", "1.5", "--target-prob", "0.9",
          "--deadline-s", "1e9"])
    out = capsys.readouterr().out
    assert "round 1: label coverage c_S=0.5" in out


def test_scenario_builder_writes_version_2_when_nodes_report_histograms() -> None:
    from depl_fl.orchestration.scenario_builder import build_scenario
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config([])
    models = [{"id": "full", "compression": 0.0, "flops_per_sample": 1e6, "size_bytes": 1e4}]
    loss = {"initial": 2.3, "run": {"full": {"levels": [0.0, 3.0], "mean": [0.0, 0.1],
                                             "std": [0.02, 0.05]}},
            "min_coverage": 0.6, "max_uncovered": 0.0}
    props = {"c0": {"cluster": "A", "num-samples": 4, "label-histogram": [3, 1, 0]},
             "c1": {"cluster": "B", "num-samples": 6, "label-histogram": [0, 1, 5]}}
    scen = build_scenario(cfg, props, models, loss)
    assert scen.version == 2 and scen.loss.min_coverage == 0.6 and scen.loss.max_uncovered == 0.0
    assert scen.client("c1").label_histogram == (0, 1, 5)
    assert set_coverage(scen, ("c0", "c1")) == (pytest.approx(1.0), 0.0)
    errors = plan_errors(scen, _rounds(("c0",), 1), Targets(1.0, 0.9, 1e9))
    assert "round 0: label coverage c_S=0.5 outside the profile's measured range [0.6, 1]" in errors
    # Without histograms (older nodes) the profile's coverage fields keep the version-1 meaning.
    old = {cid: {k: v for k, v in p.items() if k != "label-histogram"} for cid, p in props.items()}
    assert build_scenario(cfg, old, models, loss).version == 1
    # A profile with an evaluation-noise split is version 2 even without histograms.
    noisy = copy.deepcopy(loss)
    noisy["run"]["full"]["eval_std"] = [0.01, 0.02]
    scen = build_scenario(cfg, old, models, noisy)
    assert scen.version == 2 and scen.loss.run["full"].eval_std == (0.01, 0.02)
    assert scen.loss.label_shares is None


def _shifted(mean: float = 1.0, std: float = 0.0) -> Scenario:
    return scenario_from_dict(_doc(set_shift={"mean": mean, "std": std}))


def test_a_first_round_on_a_new_set_pays_the_set_shift_scaled_by_its_coverage_gap() -> None:
    # The model was trained on every client (the default): a round on c0 (coverage gap 0.417)
    # adds 0.417 * Normal(1, 0); a round on every client (gap 0) and a re-plan on the set
    # the model last trained on pay nothing -- and draw nothing: bit for bit the plain walk.
    plain, shifted = scenario_from_dict(_doc()), _shifted()
    gap = 1.0 - set_coverage(shifted, ("c0",))[0]
    assert gap == pytest.approx(1.0 - (1 / 3 + 1 / 4))
    one = _rounds(("c0",), 1)
    jumped = simulate_final_losses(shifted, one, 4000, 7, judged=False)
    base = simulate_final_losses(plain, one, 4000, 7, judged=False)
    assert jumped.mean() - base.mean() == pytest.approx(gap, abs=0.01)
    assert np.array_equal(simulate_final_losses(shifted, one, 4000, 7, previous_clients=("c0",)),
                          simulate_final_losses(plain, one, 4000, 7))
    everyone = ("c0", "c1", "c2")
    assert np.array_equal(_losses(shifted, everyone), _losses(plain, everyone))
    # Later rounds on the same set do not jump again; a change to another set does.
    later = simulate_final_losses(shifted, _rounds(("c0",), 5), 4000, 7, judged=False).mean() \
        - simulate_final_losses(plain, _rounds(("c0",), 5), 4000, 7, judged=False).mean()
    assert later == pytest.approx(gap, abs=0.02)
    two_sets = _rounds(("c0",), 1) + _rounds(("c2",), 1)
    gap2 = 1.0 - set_coverage(shifted, ("c2",))[0]
    both = simulate_final_losses(shifted, two_sets, 4000, 7, judged=False).mean() \
        - simulate_final_losses(plain, two_sets, 4000, 7, judged=False).mean()
    assert both == pytest.approx(gap + gap2, abs=0.02)


def test_set_shift_moments_match_the_monte_carlo_and_round_trip() -> None:
    from depl_fl.planner import PlanStart, predict_quantile

    shifted = _shifted(0.8, 0.5)
    rounds = _rounds(("c0",), 3) + _rounds(("c0", "c1"), 3)
    losses = simulate_final_losses(shifted, rounds, 40000, 3)
    _, mean, std = predict_quantile(shifted, rounds, 0.9)
    assert mean == pytest.approx(losses.mean(), abs=0.01)
    assert std == pytest.approx(losses.std(), rel=0.05)
    start = PlanStart(2.0, 0.0, None, previous_clients=("c0",))
    assert predict_quantile(shifted, _rounds(("c0",), 3), 0.9, start=start)[1] \
        == pytest.approx(predict_quantile(scenario_from_dict(_doc()), _rounds(("c0",), 3), 0.9)[1])
    written = scenario_to_dict(shifted)
    assert written["loss"]["set_shift"] == {"mean": 0.8, "std": 0.5}
    assert scenario_from_dict(json.loads(json.dumps(written))).loss.set_shift == shifted.loss.set_shift
    assert scenario_from_dict(_doc(version=1, set_shift={"mean": 1.0, "std": 0.0})).loss.set_shift is None
    with pytest.raises(Exception, match="set_shift"):
        scenario_from_dict(_doc(set_shift={"mean": 1.0, "std": -0.1}))


def test_open_bands_split_trajectories_at_loss_zero_as_their_steps() -> None:
    from scipy.special import ndtr

    import depl_fl.contract.semantics as semantics

    # No unseen classes: a walk at loss 0 has no judged spread, and no oscillation where eval_std is 0.
    for eval_std in ([0.0, 0.02], [0.01, 0.02]):
        doc = _doc(eval_dof=3.4, judged_error=1e-4)
        doc["loss"]["run"]["full"]["eval_std"] = eval_std
        scenario = scenario_from_dict(doc)
        last = _rounds(("c0", "c1"), 4)[-1]
        walk = simulate_final_losses(scenario, _rounds(("c0", "c1"), 4), 4_000, 3, judged=False)[None, :]
        walk[0, ::500] = 0.0
        fmap = semantics.final_map(scenario, last)
        points = semantics._quadrature_points(fmap)
        assert np.count_nonzero(fmap.judged_std(walk[0]) == 0.0) == 8
        for target in (0.0, 1.5, 1.7, 1.8, 2.2):
            z = semantics._judged_scores(fmap, walk[0], target, points)
            bands = semantics._open_bands(fmap, walk[0], target, points)
            assert bands is not None
            j = np.arange(points.size)[:, None]
            ones, zeros = j < bands.first[None, :], j >= bands.stop[None, :]
            assert np.all(ndtr(z[ones]) == 1.0) and np.all(ndtr(z[zeros]) == 0.0)
            assert np.all(np.isfinite(z[~(ones | zeros)]))
            assert np.array_equal(bands.scores(0, walk.size, points), z.T[(~(ones | zeros)).T])
            prob = float(judged_probabilities(scenario, last, walk, target)[0])
            for need in (prob, np.nextafter(prob, 2.0), np.nextafter(prob, -1.0), 0.5):
                assert judged_reaches(scenario, last, walk, target, need)[0] == (prob >= need)
