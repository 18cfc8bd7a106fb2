"""The value stop is not judged on the fresh model's plateau.

Protects :mod:`depl_fl.tracking.plateau` (where the plateau ends, how many
rounds follow it), :func:`depl_fl.orchestration.exploration_value.value_judged`
and its use by the exploration (:class:`strategies.federated_profiling.FederatedProfiler`):
a trajectory still within one oscillation of the fresh loss explores on even
where the value stop would end it; a descending one stops as before.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from depl_fl.orchestration.exploration_value import value_judged
from depl_fl.tracking.plateau import first_below_plateau, plateau_end, rate_measurable, rounds_past_plateau

#: Band at the fresh loss 2.3 with oscillation 0.2: 0.2 sqrt(2.3) = 0.303.
PLATEAU = [2.30, 2.29, 2.27, 2.25, 2.23, 2.20, 2.19]
DESCENDING = [2.30, 1.90, 1.55, 1.30, 1.12]


def test_where_the_plateau_ends_and_how_many_rounds_follow():
    assert first_below_plateau(PLATEAU, 0.2) is None
    assert rounds_past_plateau(PLATEAU, 0.2) == 0
    assert plateau_end(PLATEAU, 0.2) == 0  # the trend fit's window then starts at the fresh loss
    assert first_below_plateau(DESCENDING, 0.2) == 1
    assert rounds_past_plateau(DESCENDING, 0.2) == 4
    late = [2.30, 2.29, 2.28, 1.90, 1.50]
    assert first_below_plateau(late, 0.2) == 3
    assert (plateau_end(late, 0.2), rounds_past_plateau(late, 0.2)) == (2, 2)
    assert first_below_plateau([], 0.2) is None
    # the band is one oscillation: a smaller one ends the same plateau earlier
    assert rounds_past_plateau(PLATEAU, 0.02) == 4


def test_the_rate_is_measurable_three_rounds_after_the_plateau():
    assert not rate_measurable(PLATEAU, 0.2)
    assert rate_measurable(DESCENDING, 0.2)
    assert not rate_measurable([2.30, 2.29, 2.28, 1.90, 1.50], 0.2)  # two rounds after the plateau
    assert rate_measurable([2.30, 2.29, 2.28, 1.90, 1.50, 1.30], 0.2)
    assert not rate_measurable(DESCENDING[:3], 0.2)
    assert not rate_measurable(DESCENDING, float("nan"))  # no band can be drawn: not measurable


def test_the_value_stop_is_judged_only_off_the_plateau():
    assert not value_judged(PLATEAU, 0.2)
    assert value_judged(DESCENDING, 0.2)
    # an exploration at 2.23 after four rounds from 2.30 is still on the plateau
    assert not value_judged([2.30, 2.31, 2.28, 2.26, 2.23], 0.16)


def test_the_plateau_is_read_from_the_first_trained_round():
    # an untrained network above the chance level: its first round falls onto the plateau and stays
    on_plateau = [3.16, 2.24, 2.16, 2.27, 2.24]
    assert rate_measurable(on_plateau, 0.23)  # measured from the fresh loss it would have left it
    assert not value_judged(on_plateau, 0.23)
    assert not value_judged([*on_plateau, 1.85, 1.60], 0.23)  # left it, two rounds ago
    assert value_judged([*on_plateau, 1.85, 1.60, 1.42], 0.23)


def test_the_rounds_past_the_plateau_the_guard_needs_are_a_parameter():
    late = [2.30, 2.29, 2.28, 1.90, 1.50]  # two rounds after the plateau
    assert rate_measurable(late, 0.2, rounds=2) and not rate_measurable(late, 0.2, rounds=3)
    assert not rate_measurable(late[:4], 0.2, rounds=2)
    assert not rate_measurable(PLATEAU, 0.2, rounds=1)  # on the plateau: never, whatever the rounds
    on_plateau = [3.16, 2.24, 2.16, 2.27, 2.24]
    assert value_judged([*on_plateau, 1.85, 1.60], 0.23, rounds=2)
    assert not value_judged([*on_plateau, 1.85], 0.23, rounds=2)


def _profiler(trajectory: list[float]):
    """A profiler after ``len(trajectory) - 1`` exploration rounds whose value judgement (if made) says
    one more round cannot pay for itself."""
    pytest.importorskip("flwr")
    from depl_fl.runs.runconfig import compose_config
    from strategies.federated_profiling import FederatedProfiler

    cfg = compose_config(["num_clients=4", "profile.explore.value_stop=true",
                          "profile.explore.value_from_round=2"])
    profiler = FederatedProfiler(cfg, None, scenario_of=lambda properties, loss: None)
    profiler.records = [{"loss_before": before, "loss": after, "energy_j": 7.0}
                        for before, after in zip(trajectory[:-1], trajectory[1:], strict=True)]
    profiler.trajectories = {m: (list(trajectory), [1.0] * (len(trajectory) - 1)) for m in profiler.models}
    cost = {"cost_joules": 100.0}
    profiler._fit = lambda observations, fresh, properties: {}
    profiler._remaining = lambda targets: targets
    profiler._value_planner = lambda strategy, fitted, targets: (
        lambda loss: SimpleNamespace(feasible=True, predicted=cost))
    properties = {f"c{i}": {"num-samples": 180, "cluster": "B"} for i in range(4)}
    return profiler, SimpleNamespace(properties=properties, targets=None)


def test_the_exploration_explores_on_while_on_the_plateau():
    profiler, strategy = _profiler(PLATEAU)
    assert profiler._worth_stopping(strategy, len(PLATEAU) - 1, [], PLATEAU[0]) is False
    assert profiler.values == [] and profiler.value_round is None  # not judged at all


def test_a_descending_exploration_stops_as_before():
    profiler, strategy = _profiler(DESCENDING)
    assert profiler._worth_stopping(strategy, len(DESCENDING) - 1, [], DESCENDING[0]) is True
    assert profiler.value_round == len(DESCENDING) - 1
    assert profiler.values[-1]["plan_j"] == 100.0
