"""Aggregation that one client cannot break: weight bounds, dtypes, norms, rollback, robust rules."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import MetricRecord  # noqa: E402

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.contract.plan import Plan, RoundDecision, Targets  # noqa: E402
from depl_fl.orchestration.reply_checks import check_update  # noqa: E402
from depl_fl.orchestration.scenario_builder import build_scenario, model_docs  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import DepLStrategy, arrays_to_state, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.robust_aggregation import (  # noqa: E402
    AggregationSettings,
    aggregate_problem,
    bounded_weight,
    combine,
    norm_rejection,
    norm_threshold,
)
from strategies.server_app import aggregation_settings  # noqa: E402

N = 4
LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")},
        "switch": [{"from": "full", "to": "p50", "mean": 0.1, "std": 0.05},
                   {"from": "p50", "to": "full", "mean": 0.1, "std": 0.05}]}


def _cfg(*overrides: str) -> dict:
    return compose_config([f"num_clients={N}", "simulation=inprocess", "tracking.enabled=false",
                           *overrides])


def _run(cfg: dict, clients=None, model: str = "full", rounds: int = 1, evaluate=None, node_configs=None):
    """Run a given plan in process; returns (strategy, {round: state seen by evaluation})."""
    geo = geometry(cfg)
    models = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    clients = tuple(clients or (f"c{i}" for i in range(N)))
    plan = Plan("given", True, [RoundDecision(model, clients, {"A": 0, "B": 0})] * rounds)
    strategy = DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6), plan=plan,
        plan_fn=None,
        scenario_fn=lambda props: build_scenario(cfg, props, models, LOSS), num_clients=N,
        train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": int(cfg["seed"])},
        node_wait_timeout_s=1.0, aggregation=aggregation_settings(cfg))
    seen: dict[int, dict] = {}

    def record(rnd, arrays, compression):
        seen[rnd] = arrays_to_state(arrays)
        if evaluate is not None:
            return evaluate(rnd, arrays, compression)
        return MetricRecord({"loss": 1.0, "accuracy": 0.5})

    init = state_to_arrays(initial_state(geo, seed=int(cfg["seed"])))
    strategy.start(InProcessGrid(make_client_app(cfg), N, node_configs=node_configs), init,
                   evaluate_fn=record)
    return strategy, seen


def _close(a: dict, b: dict, atol: float = 1e-6) -> bool:
    return all(np.allclose(a[k], b[k], atol=atol) for k in a)


def _rejected(strategy) -> dict[str, str]:
    return {r["client"]: r["reason"] for r in strategy.controller.records[0]["rejected"]}


# --------------------------------------------------------------------------- replies
def test_client_claiming_1e9_samples_cannot_dominate(caplog):
    honest_only = _run(_cfg(), clients=["c1", "c2", "c3"])[1][1]
    with caplog.at_level(logging.WARNING, logger="depl_fl"):
        strategy, seen = _run(_cfg("faults.clients=[c0]", "faults.kind=num_examples"))
    assert "num-examples" in _rejected(strategy)["c0"]
    assert "rejected reply from c0" in caplog.text and "node 1" not in caplog.text
    assert _close(seen[1], honest_only)


def test_weight_is_bounded_by_queried_samples_and_the_cap():
    assert bounded_weight(50, 100, [100, 100, 100], cap=10) == 50
    assert bounded_weight(100, 100, [100, 100], cap=10) == 100
    # A node that already lied when queried weighs at most cap x the median.
    assert bounded_weight(1e9, 1e9, [100, 110, 1e9], cap=10) == pytest.approx(1100)


@pytest.mark.parametrize("kind", ["huge", "scale"])
def test_one_huge_update_is_rejected_by_norm(kind):
    honest_only = _run(_cfg(), clients=["c1", "c2", "c3"])[1][1]
    strategy, seen = _run(_cfg("faults.clients=[c0]", f"faults.kind={kind}"))
    assert "update norm" in _rejected(strategy)["c0"]
    assert _close(seen[1], honest_only)


def test_norm_rejection_names_the_threshold_and_the_reference():
    # The threshold is factor x the reference: 1.63 = 10 x 0.163, not a reference of 1.63.
    assert norm_rejection(1.71, 1.63, 10.0) == \
        "update norm 1.71 exceeds 1.63 = 10 x the reference norm (0.163)"


def test_all_replies_1e30_leave_the_model_unchanged():
    cfg = _cfg("faults.clients=[c0,c1,c2,c3]", "faults.kind=huge")
    strategy, seen = _run(cfg)
    init = initial_state(geometry(cfg), seed=int(cfg["seed"]))
    assert set(_rejected(strategy)) == {"c0", "c1", "c2", "c3"}
    assert _close(seen[1], init, atol=0.0)


@pytest.mark.parametrize("dtype", [np.complex64, np.int64, np.int8, np.bool_])
def test_complex_and_integer_arrays_are_rejected(dtype):
    state = {"w": np.ones((2, 3), dtype=dtype)}
    problems = check_update(state, {"num-examples": 10}, {"w": (2, 3)})
    assert problems and "dtype" in problems[0]


def test_dtype_and_shape_faults_are_rejected_end_to_end():
    for kind, word in (("dtype", "dtype"), ("shape", "shape")):
        strategy, _ = _run(_cfg("faults.clients=[c2]", f"faults.kind={kind}"))
        assert word in _rejected(strategy)["c2"], kind


def test_crashing_client_is_recorded_and_the_job_goes_on():
    strategy, seen = _run(_cfg("faults.clients=[c3]", "faults.kind=crash"), rounds=2)
    assert len(strategy.controller.records) == 2
    assert "injected fault" in _rejected(strategy)["c3"]


def test_aggregate_with_non_finite_loss_is_rolled_back():
    cfg = _cfg()
    init = initial_state(geometry(cfg), seed=int(cfg["seed"]))
    calls = []

    def evaluate(rnd, arrays, compression):
        calls.append(rnd)
        # The first evaluation of round 1 (the aggregate) diverges; the re-evaluation does not.
        loss = math.nan if calls.count(1) == 1 and rnd == 1 else 2.0
        return MetricRecord({"loss": loss, "accuracy": 0.1})

    strategy, seen = _run(cfg, evaluate=evaluate)
    rec = strategy.controller.records[0]
    assert rec["rolled_back"] and rec["loss"] == 2.0
    assert calls == [0, 1, 1]
    # The re-evaluation (the last one of round 1) saw the previous, i.e. initial, model.
    assert _close(seen[1], init, atol=0.0)


def test_aggregate_problem_finds_nan_and_huge_updates():
    old = {"w": np.zeros(3)}
    assert "NaN" in aggregate_problem({"w": np.array([0.0, np.nan, 0.0])}, old, 1.0)
    assert "norm" in aggregate_problem({"w": np.array([0.0, 5.0, 0.0])}, old, 1.0)
    assert aggregate_problem({"w": np.array([0.0, 0.5, 0.0])}, old, 1.0) is None


def test_norm_threshold_uses_the_lower_median_and_the_model_norm():
    # Two replies, one 1e6 times larger: the lower median is the honest one.
    assert norm_threshold([1.0, 1e6], [], 10.0) == pytest.approx(10.0)
    # Every reply huge: the model's own norm bounds the reference.
    assert norm_threshold([1e30, 1e30], [], 10.0, model_norm=3.0) == pytest.approx(30.0)
    assert math.isinf(norm_threshold([], [], 10.0))


# --------------------------------------------------------------------------- rules
def test_median_and_trimmed_mean_resist_an_outlier():
    states = [{"w": np.full(4, v)} for v in (1.0, 1.1, 0.9, 1.05, 1e6)]
    weights = [1.0] * 5
    med = combine(states, weights, AggregationSettings(rule="median"))["w"]
    trim = combine(states, weights, AggregationSettings(rule="trimmed_mean", trim_fraction=0.2))["w"]
    avg = combine(states, weights, AggregationSettings(rule="fedavg"))["w"]
    assert np.allclose(med, 1.05) and np.all(trim < 1.2) and np.all(avg > 1e5)


def test_aggregation_is_a_config_group():
    assert _cfg("aggregation=median")["aggregation"]["rule"] == "median"
    assert _cfg("aggregation=trimmed_mean")["aggregation"]["rule"] == "trimmed_mean"
    assert _cfg()["aggregation"]["rule"] == "fedavg"


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_robust_rules_run_end_to_end_on_pruned_variants(rule):
    cfg = _cfg(f"aggregation={rule}")
    strategy, seen = _run(cfg, model="p50", rounds=2)
    init = initial_state(geometry(cfg), seed=int(cfg["seed"]))
    assert all(np.all(np.isfinite(v)) for v in seen[2].values())
    assert not _close(seen[2], init)
    assert [r["rejected"] for r in strategy.controller.records] == [[], []]


def test_node_config_faults_and_a_bad_node_do_not_abort_the_job():
    # Deployment style: the nodes' own config makes c0 send NaN and c2 carry a bad fault key.
    nodes = [{"faults-kind": "nan"}, {}, {"faults-kind": "meteor"}, {}]
    strategy, seen = _run(_cfg(), rounds=2, node_configs=nodes)
    rejected = _rejected(strategy)
    assert set(rejected) == {"c0", "c2"}
    assert "NaN" in rejected["c0"] and "faults kind" in rejected["c2"]
    assert len(strategy.controller.records) == 2
    assert all(np.all(np.isfinite(v)) for v in seen[2].values())


@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.array(7, dtype=np.int64), np.array([True, False]), np.array([1 + 2j], dtype=np.complex64),
    np.array([1.5, np.nan, np.inf], dtype=">f8"), np.zeros((0, 3), dtype=np.float32),
    np.array([[1, 2]], dtype=np.uint8)])
def test_a_reply_array_reads_as_array_numpy_reads_it(array):
    from flwr.app import Array

    from depl_fl.orchestration.npy_arrays import array_of

    record = Array(array)
    for _ in range(2):  # the header parsed, then found again
        got, want = array_of(record), record.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.flags.f_contiguous == want.flags.f_contiguous and got.flags.writeable
        assert np.array_equal(got, want, equal_nan=True) and not np.shares_memory(got, want)


def test_an_unreadable_reply_array_fails_as_np_load_fails():
    import io

    from depl_fl.orchestration.npy_arrays import npy_loads

    buffer = io.BytesIO()
    np.save(buffer, np.arange(10, dtype=np.float64))
    data = buffer.getvalue()
    for bad in (data[:-8], b"not an array at all", data[:6] + b"\x09\x00" + data[8:]):
        with pytest.raises(ValueError):
            npy_loads(bad)
    with pytest.raises(ValueError, match="allow_pickle"):
        buffer = io.BytesIO()
        np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        npy_loads(buffer.getvalue())
