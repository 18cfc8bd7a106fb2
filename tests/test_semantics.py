"""Semantics: cost model on hand-computed examples, Monte Carlo against closed forms, validity rules."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

from depl_fl.contract.plan import RoundDecision, Targets
from depl_fl.contract.scenario import Scenario, scenario_from_dict
from depl_fl.contract.semantics import (
    client_energy,
    client_time,
    data_ratio,
    empirical_quantile,
    evaluate_plan,
    plan_errors,
    plan_totals,
    round_energy,
    round_time,
    simulate_final_losses,
)
from depl_fl.errors import ScenarioError

BASE = {
    "local_epochs": 2,
    "clusters": [
        {"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9},
                               {"flops_per_s": 4e9, "joules_per_flop": 2e-9}],
         "bytes_per_s": 1e6, "joules_per_byte": 1e-6, "activation_joules": 10.0,
         "max_clients": 2},
        {"id": "B", "levels": [{"flops_per_s": 2e9, "joules_per_flop": 5e-10}],
         "bytes_per_s": 5e5, "joules_per_byte": 4e-6, "activation_joules": 3.0,
         "max_clients": 1},
    ],
    "clients": [{"id": "a1", "cluster": "A", "num_samples": 100},
                {"id": "a2", "cluster": "A", "num_samples": 300},
                {"id": "a3", "cluster": "A", "num_samples": 50},
                {"id": "b1", "cluster": "B", "num_samples": 200},
                {"id": "b2", "cluster": "B", "num_samples": 150}],
    "models": [{"id": "full", "compression": 0.0, "flops_per_sample": 1e7, "size_bytes": 1e6},
               {"id": "half", "compression": 0.5, "flops_per_sample": 5e6, "size_bytes": 5e5}],
    "loss": {
        "initial": 100.0, "reference_samples": 400,
        "data_exponent_mean": 0.5, "data_exponent_std": 1.0,
        "run": {"full": {"levels": [0.0, 200.0], "mean": [0.5, 0.5], "std": [0.2, 0.2]},
                "half": {"levels": [0.0, 200.0], "mean": [0.3, 0.3], "std": [0.1, 0.1]}},
        "switch": [{"from": "full", "to": "half", "mean": 0.4, "std": 0.3}],
    },
}


def _scenario(**loss_changes: object) -> Scenario:
    doc = copy.deepcopy(BASE)
    doc["loss"].update(loss_changes)
    return scenario_from_dict(doc)


def _targets(deadline: float = 1e6, max_rounds: int | None = None,
             loss: float = 99.0, prob: float = 0.9) -> Targets:
    return Targets(target_loss=loss, target_prob=prob, deadline_s=deadline, max_rounds=max_rounds)


# ---------------------------------------------------------------------------
# Cost model
# ---------------------------------------------------------------------------
def test_client_time_and_energy_by_hand() -> None:
    s = _scenario()
    # a2 at level 1 with "full": W = 2 * 300 * 1e7 = 6e9 FLOPs.
    assert client_time(s, "a2", "full", 1) == pytest.approx(6e9 / 4e9 + 2 * 1e6 / 1e6)  # 3.5
    assert client_energy(s, "a2", "full", 1) == pytest.approx(6e9 * 2e-9 + 2 * 1e6 * 1e-6)  # 14
    # b1 with "half": W = 2 * 200 * 5e6 = 2e9 FLOPs.
    assert client_time(s, "b1", "half", 0) == pytest.approx(2e9 / 2e9 + 2 * 5e5 / 5e5)  # 3
    assert client_energy(s, "b1", "half", 0) == pytest.approx(2e9 * 5e-10 + 2 * 5e5 * 4e-6)  # 5


def test_round_time_is_max_and_energy_sums_plus_activation() -> None:
    s = _scenario()
    decision = RoundDecision("full", ("a1", "a2", "b1"), {"A": 0, "B": 0})
    times = {"a1": 2e9 / 1e9 + 2.0, "a2": 6e9 / 1e9 + 2.0, "b1": 4e9 / 2e9 + 4.0}
    energies = {"a1": 2e9 * 1e-9 + 2.0, "a2": 6e9 * 1e-9 + 2.0, "b1": 4e9 * 5e-10 + 8.0}
    assert round_time(s, decision) == pytest.approx(max(times.values()))  # 8.0 (a2)
    assert round_energy(s, decision) == pytest.approx(sum(energies.values()) + 10.0 + 3.0)
    # Only the active cluster's activation energy is paid.
    only_a = RoundDecision("full", ("a1",), {"A": 1})
    assert round_energy(s, only_a) == pytest.approx(2e9 * 2e-9 + 2.0 + 10.0)
    cost, total = plan_totals(s, [decision, only_a])
    assert cost == pytest.approx(round_energy(s, decision) + round_energy(s, only_a))
    assert total == pytest.approx(8.0 + 2e9 / 4e9 + 2.0)


def test_cost_functions_reject_bad_ids_and_levels() -> None:
    s = _scenario()
    with pytest.raises(ScenarioError, match="unknown client"):
        client_time(s, "zz", "full", 0)
    with pytest.raises(ScenarioError, match="unknown model"):
        client_energy(s, "a1", "tiny", 0)
    with pytest.raises(ScenarioError, match="out of range"):
        client_time(s, "b1", "full", 1)
    with pytest.raises(ScenarioError, match="no clients"):
        round_time(s, RoundDecision("full", (), {}))
    with pytest.raises(ScenarioError, match="no level"):
        round_energy(s, RoundDecision("full", ("a1", "b1"), {"A": 0}))


# ---------------------------------------------------------------------------
# Loss Monte Carlo
# ---------------------------------------------------------------------------
def test_monte_carlo_matches_closed_form_with_constant_profile() -> None:
    s = _scenario()
    clients = ("a1", "b1")  # r = 300 / 400
    r = 300 / 400
    rounds = [RoundDecision("full", clients, {"A": 0, "B": 0})] * 2 \
        + [RoundDecision("half", clients, {"A": 0, "B": 0})]
    assert data_ratio(s, clients) == pytest.approx(r)
    n = 40000
    losses = simulate_final_losses(s, rounds, n, np.random.default_rng(1))
    assert losses.shape == (n,)
    # L = 100 - X1 - X2 + Y - X3; all draws independent, no clamping this far from 0.
    mean = 100.0 - 2 * 0.5 * r ** 0.5 + 0.4 - 0.3 * r ** 0.5
    var = 2 * (0.2 / r) ** 2 + 0.3 ** 2 + (0.1 / r) ** 2
    assert losses.mean() == pytest.approx(mean, abs=4 * np.sqrt(var / n))
    assert losses.var(ddof=1) == pytest.approx(var, rel=4 * np.sqrt(2 / (n - 1)))


def test_mean_and_std_interpolate_over_current_loss() -> None:
    run = {"full": {"levels": [1.0, 3.0], "mean": [0.1, 0.5], "std": [0.0, 0.0]},
           "half": {"levels": [0.0, 1.0], "mean": [0.0, 0.2], "std": [0.0, 0.0]}}
    s = _scenario(initial=2.5, run=run, switch=[], data_exponent_mean=1.0)
    rounds = [RoundDecision("full", ("a2", "a3", "b2"), {"A": 0, "B": 0})]  # 500 samples
    r = 500 / 400
    one = simulate_final_losses(s, rounds, 5, np.random.default_rng(0))
    # mu(2.5) = 0.1 + 0.4 * (1.5 / 2) = 0.4, scaled by r**a with a = 1.
    np.testing.assert_allclose(one, 2.5 - 0.4 * r)
    # Per-trajectory start losses, including values clamped at the ends of `levels`.
    start = np.array([0.5, 2.0, 10.0])
    out = simulate_final_losses(s, rounds, 3, np.random.default_rng(0), start_loss=start)
    np.testing.assert_allclose(out, start - np.array([0.1, 0.3, 0.5]) * r)
    with pytest.raises(ScenarioError, match="start_loss"):
        simulate_final_losses(s, rounds, 4, np.random.default_rng(0), start_loss=start)


def test_loss_is_clamped_at_zero() -> None:
    run = {"full": {"levels": [0.0, 1.0], "mean": [5.0, 5.0], "std": [0.0, 0.0]},
           "half": {"levels": [0.0, 1.0], "mean": [0.0, 0.0], "std": [1e-3, 1e-3]}}
    s = _scenario(initial=1.0, run=run)
    losses = simulate_final_losses(s, [RoundDecision("full", ("a1",), {"A": 0})], 100, 0)
    assert np.all(losses == 0.0)
    # The clamp applies every round, so a later round starts from 0, not from -4.
    two = simulate_final_losses(s, [RoundDecision("full", ("a1",), {"A": 0})] * 2
                                + [RoundDecision("half", ("a1",), {"A": 0})], 20000, 0)
    assert np.all(two >= 0.0)
    assert two.mean() == pytest.approx(0.4, abs=0.05)  # switch jump 0.4 from 0, std tiny


def test_previous_model_triggers_a_switch_and_disallowed_switch_raises() -> None:
    s = _scenario()
    half = [RoundDecision("half", ("a1",), {"A": 0})]
    base = simulate_final_losses(s, half, 20000, 3)
    switched = simulate_final_losses(s, half, 20000, 3, previous_model="full")
    assert switched.mean() - base.mean() == pytest.approx(0.4, abs=0.05)
    with pytest.raises(ScenarioError, match="not allowed"):
        simulate_final_losses(s, [half[0], RoundDecision("full", ("a1",), {"A": 0})], 10, 0)


def test_seeded_reproducibility() -> None:
    s = _scenario()
    rounds = [RoundDecision("full", ("a1", "b2"), {"A": 0, "B": 0})] * 5
    first = simulate_final_losses(s, rounds, 1000, np.random.default_rng(42))
    again = simulate_final_losses(s, rounds, 1000, np.random.default_rng(42))
    other = simulate_final_losses(s, rounds, 1000, np.random.default_rng(43))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    t = _targets(loss=98.5)
    assert evaluate_plan(s, rounds, t, n=20000, seed=7) == evaluate_plan(s, rounds, t, n=20000,
                                                                         seed=7)


# ---------------------------------------------------------------------------
# Validity
# ---------------------------------------------------------------------------
GOOD = [RoundDecision("full", ("a1", "a2", "b1"), {"A": 0, "B": 0}),
        RoundDecision("half", ("a3",), {"A": 1})]


def test_valid_plan_has_no_errors() -> None:
    assert plan_errors(_scenario(), GOOD, _targets()) == []


@pytest.mark.parametrize("rounds, needle", [
    ([GOOD[1], GOOD[0]], "switch 'half' -> 'full' is not allowed"),
    ([RoundDecision("full", ("a1", "a2", "a3"), {"A": 0})], "capacity is 2"),
    ([RoundDecision("full", ("b1", "b2"), {"B": 0})], "capacity is 1"),
    ([RoundDecision("tiny", ("a1",), {"A": 0})], "unknown model id 'tiny'"),
    ([RoundDecision("full", ("a1", "zz"), {"A": 0})], "unknown client id 'zz'"),
    ([RoundDecision("full", ("a1",), {"A": 0, "Q": 0})], "unknown cluster 'Q'"),
    ([RoundDecision("full", ("a1",), {"A": 0, "B": 0})], "no client in this round"),
    ([RoundDecision("full", ("a1", "b1"), {"A": 0})], "no level for active cluster 'B'"),
    ([RoundDecision("full", ("a1",), {"A": 2})], "out of range"),
    ([RoundDecision("full", ("a1",), {"A": -1})], "out of range"),
    ([RoundDecision("full", (), {})], "no clients"),
    ([RoundDecision("full", ("a1", "a1"), {"A": 0})], "listed 2 times"),
])
def test_plan_errors_reports(rounds: list[RoundDecision], needle: str) -> None:
    errors = plan_errors(_scenario(), rounds, _targets())
    assert any(needle in e for e in errors), errors


def test_unknown_model_gives_one_error_not_a_spurious_switch() -> None:
    rounds = [RoundDecision("tiny", ("a1",), {"A": 0}), RoundDecision("full", ("a1",), {"A": 0})]
    assert plan_errors(_scenario(), rounds, _targets()) == ["round 0: unknown model id 'tiny'"]
    assert plan_errors(_scenario(), rounds[1:], _targets(), previous_model="tiny") == [
        "previous model: unknown model id 'tiny'"]


def test_deadline_and_max_rounds() -> None:
    s = _scenario()
    total = plan_totals(s, GOOD)[1]
    assert plan_errors(s, GOOD, _targets(deadline=total)) == []
    errors = plan_errors(s, GOOD, _targets(deadline=total * 0.999))
    assert len(errors) == 1 and "exceeds the deadline" in errors[0]
    errors = plan_errors(s, GOOD, _targets(max_rounds=1))
    assert errors == ["plan has 2 rounds, max_rounds is 1"]
    # Re-planning mid-run: earlier time and rounds count, the previous model is a switch.
    assert plan_errors(s, GOOD, _targets(deadline=total + 5), elapsed_s=6.0)
    assert plan_errors(s, GOOD, _targets(max_rounds=3), rounds_done=2)
    assert plan_errors(s, GOOD, _targets(), previous_model="half")


def test_evaluate_plan_figures() -> None:
    s = _scenario()
    rounds = GOOD + [RoundDecision("half", ("a1", "b1"), {"A": 1, "B": 0})] * 3
    t = _targets(loss=98.6, prob=0.8)
    result = evaluate_plan(s, rounds, t, n=20000, seed=0)
    losses = simulate_final_losses(s, rounds, 20000, np.random.default_rng(0))
    cost, total = plan_totals(s, rounds)
    assert result["valid"] and result["errors"] == []
    assert result["rounds"] == 5
    assert result["probability"] == pytest.approx(np.mean(losses <= 98.6))
    assert result["loss_quantile"] == pytest.approx(empirical_quantile(losses, 0.8))
    assert (result["cost_joules"], result["time_s"]) == pytest.approx((cost, total))
    assert result["dependable"] == (result["probability"] >= 0.8)
    # The quantile and the probability agree on dependability.
    assert (result["loss_quantile"] <= 98.6) == (result["probability"] >= 0.8)


def test_evaluate_plan_invalid_cases() -> None:
    s = _scenario()
    late = evaluate_plan(s, GOOD, _targets(deadline=1.0), n=1000)
    assert not late["valid"] and not late["dependable"]
    assert late["probability"] is not None and late["time_s"] > 1.0
    broken = evaluate_plan(s, [GOOD[1], GOOD[0]], _targets(), n=1000)
    assert not broken["valid"] and broken["probability"] is None
    assert any("not allowed" in e for e in broken["errors"])


def test_empirical_quantile_is_inverted_cdf() -> None:
    values = np.array([4.0, 1.0, 3.0, 2.0])
    assert empirical_quantile(values, 0.5) == 2.0
    assert empirical_quantile(values, 0.51) == 3.0
    assert empirical_quantile(values, 0.99) == 4.0


def test_fused_interpolation_equals_numpy_interp_bit_for_bit() -> None:
    from depl_fl.contract.semantics import _InterpTable

    rng = np.random.default_rng(5)
    for n_levels in (1, 2, 3, 5, 12):  # 12: np.interp per profile
        levels = np.sort(rng.choice(np.linspace(0.0, 3.0, 301), n_levels, replace=False))
        mean, std = rng.uniform(-0.2, 0.5, n_levels), rng.uniform(0.0, 0.2, n_levels)
        x = rng.uniform(-1.0, 4.0, 2000)
        x[::9] = rng.choice(levels, x[::9].size)  # exactly on nodes
        mu, sigma = _InterpTable(tuple(levels), tuple(mean), tuple(std))(x)
        assert np.array_equal(mu, np.interp(x, levels, mean))
        assert np.array_equal(sigma, np.interp(x, levels, std))
        if n_levels > 1:  # every value inside one segment (its left node included)
            inner = np.append(rng.uniform(levels[-2], levels[-1], 500), levels[-2])
            mu, sigma = _InterpTable(tuple(levels), tuple(mean), tuple(std))(inner)
            assert np.array_equal(mu, np.interp(inner, levels, mean))
            assert np.array_equal(sigma, np.interp(inner, levels, std))


def test_interpolation_over_the_spanned_levels_is_numpys_bit_for_bit() -> None:
    from depl_fl.contract.semantics import _interp, _InterpTable

    rng = np.random.default_rng(21)
    for n_levels in (2, 4, 9, 13, 20):
        levels = np.sort(rng.choice(np.linspace(0.0, 3.0, 301), n_levels, replace=False))
        mean, std = rng.uniform(-0.2, 0.5, n_levels), rng.uniform(0.0, 0.2, n_levels)
        evals = rng.uniform(0.0, 0.05, n_levels)
        table = _InterpTable(tuple(levels), tuple(mean), tuple(std), tuple(evals))
        walks = ((1.5, 0.05), (1.5, 0.4), (0.2, 2.0), (levels[-1], 0.3))
        for (centre, spread), size in itertools.product(walks, (300, 5000)):  # np.interp's and the fused form
            x = rng.normal(centre, spread, size)
            x[::7] = rng.choice(levels, x[::7].size)  # exactly on nodes
            mu, sigma = table(x)
            want_sigma = np.interp(x, levels, std)
            want_eval = np.interp(x, levels, evals)
            assert np.array_equal(mu, np.interp(x, levels, mean))
            assert np.array_equal(sigma, np.sqrt(np.maximum(want_sigma ** 2 - 2.0 * want_eval ** 2, 0.0)))
            assert np.array_equal(_interp(x, tuple(levels), tuple(mean)), np.interp(x, levels, mean))
        with_nan = np.append(rng.uniform(0.0, 3.0, 100), np.nan)
        assert np.array_equal(table(with_nan)[0], np.interp(with_nan, levels, mean), equal_nan=True)
        assert np.array_equal(_interp(with_nan, tuple(levels), tuple(mean)),
                              np.interp(with_nan, levels, mean), equal_nan=True)
    # Equal levels (a non-finite slope): np.interp's own handling.
    levels, values = (0.0, 1.0, 1.0, 2.0), (0.0, 0.5, 0.7, 1.0)
    x = rng.uniform(-0.5, 2.5, 500)
    assert np.array_equal(_interp(x, levels, values), np.interp(x, levels, values))
    assert np.array_equal(_InterpTable(levels, values, values)(x)[0], np.interp(x, levels, values))


def test_round_iterator_yields_every_prefix_of_the_simulation() -> None:
    from depl_fl.contract.semantics import iter_round_losses

    scen = _scenario(run={"full": {"levels": [0.0, 50.0, 200.0], "mean": [0.1, 0.5, 0.9],
                                   "std": [0.1, 0.2, 0.4]},
                          "half": {"levels": [0.0, 200.0], "mean": [0.3, 0.3], "std": [0.1, 0.1]}})
    rounds = [RoundDecision(m, ("a1", "b1"), {}) for m in ("full", "full", "half", "half")]
    prefixes = [losses.copy() for losses in iter_round_losses(scen, rounds, 500, 3)]
    assert len(prefixes) == len(rounds)
    # same seed: the first k rounds consume the same random stream as a k-round run
    for k, losses in enumerate(prefixes, start=1):
        assert np.array_equal(losses, simulate_final_losses(scen, rounds[:k], 500, 3))
    assert not np.array_equal(prefixes[0], prefixes[1])


def test_a_known_start_loss_gives_the_walk_of_an_array_of_that_loss_bit_for_bit(monkeypatch) -> None:
    import depl_fl.contract.semantics as semantics

    levels = list(np.linspace(0.0, 3.0, 12))  # many levels: np.interp per profile
    scen = _scenario(run={"half": {"levels": levels, "mean": list(np.linspace(0.0, 0.2, 12)),
                                   "std": list(np.linspace(0.01, 0.1, 12))},
                          "full": {"levels": [0.0, 3.0], "mean": [0.1, 0.05], "std": [0.02, 0.03]}})
    rounds = [RoundDecision("half", ("a1", "b1"), {}) for _ in range(3)]
    sizes: list[int] = []
    profile_at = semantics._profile_at
    monkeypatch.setattr(semantics, "_profile_at",
                        lambda interp, losses, equal: sizes.append(1 if equal else losses.size)
                        or profile_at(interp, losses, equal))
    for previous in (None, "full"):  # "full": the first round switches, a draw before it
        known = simulate_final_losses(scen, rounds, 3000, 8, start_loss=1.7, previous_model=previous)
        spread = simulate_final_losses(scen, rounds, 3000, 8, start_loss=np.full(3000, 1.7),
                                       previous_model=previous)
        assert np.array_equal(known, spread) and np.unique(known).size > 100
    # The known start's first round interpolates one loss; with a switch, every trajectory.
    assert sizes == [1, 3000, 3000, 3000, 3000, 3000] + [3000] * 6


def test_interpolation_inside_one_segment_is_numpys_bit_for_bit() -> None:
    from depl_fl.contract.semantics import _interp

    rng = np.random.default_rng(12)
    for _ in range(50):
        levels = tuple(float(v) for v in np.sort(rng.uniform(0.0, 3.0, 12)))
        values = tuple(float(v) for v in rng.uniform(0.0, 0.2, 12))
        j = int(rng.integers(0, 11))
        inside = np.append(rng.uniform(levels[j], levels[j + 1], 300), levels[j])
        across = rng.uniform(-1.0, 4.0, 300)
        for x in (inside, across, inside[:10]):
            assert np.array_equal(_interp(x, levels, values), np.interp(x, levels, values))


def test_walk_moments_are_the_profiles_interpolation_bit_for_bit() -> None:
    from depl_fl.contract.scenario import RunProfile
    from depl_fl.contract.semantics import walk_moments

    rng = np.random.default_rng(8)
    levels = tuple(float(v) for v in np.sort(rng.uniform(0.0, 3.0, 13)))
    mean, std = tuple(rng.uniform(0.0, 0.3, 13)), tuple(rng.uniform(0.01, 0.2, 13))
    for eval_std in (None, tuple(rng.uniform(0.0, 0.05, 13)), (0.0,) * 13):
        profile = RunProfile(levels, mean, std, eval_std=eval_std)
        for x in (rng.normal(1.4, 0.6, 4000), rng.normal(1.0, 0.4, (3, 2000)), np.array([levels[4]] * 80)):
            mu, sigma = walk_moments(profile, x)
            assert np.array_equal(mu, profile.mean_at(x)) and np.array_equal(sigma, profile.walk_std_at(x))


def test_segments_are_the_searchsorted_segments_in_bytes_and_past_255_levels() -> None:
    from depl_fl.contract.semantics import _segments, _span

    rng = np.random.default_rng(8)
    for n_levels in (2, 13, 256, 300):
        levels = np.sort(rng.choice(np.linspace(0.0, 3.0, 3001), n_levels, replace=False))
        x = np.clip(rng.uniform(-0.5, 3.5, 6000), levels[0], levels[-1])
        x[::11] = rng.choice(levels, x[::11].size)  # exactly on nodes
        seg = _segments(x, levels, _span(x, levels))
        assert seg.dtype == np.intp
        assert np.array_equal(seg, np.searchsorted(levels, x, side="right") - 1)
