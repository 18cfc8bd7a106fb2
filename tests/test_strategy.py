"""DepLStrategy: FedAvg equivalence, bad replies, node waiting, reply checks."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import ConfigRecord, Error, Message, MetricRecord  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.contract.plan import Plan, RoundDecision, Targets  # noqa: E402
from depl_fl.orchestration.reply_checks import check_update  # noqa: E402
from depl_fl.orchestration.scenario_builder import build_scenario, model_docs  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from depl_fl.task.pruning import compute_structure  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import DepLStrategy, NodesUnavailableError, arrays_to_state, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import make_evaluate_fn  # noqa: E402

N = 4
LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")},
        "switch": [{"from": "full", "to": "p50", "mean": 0.1, "std": 0.05},
                   {"from": "p50", "to": "full", "mean": 0.1, "std": 0.05}]}


@pytest.fixture(scope="module")
def cfg():
    return compose_config([f"num_clients={N}", "simulation=inprocess", "tracking.enabled=false",
                           "train.lr=0.05"])


def _strategy(cfg, plan: Plan) -> DepLStrategy:
    geo = geometry(cfg)
    models = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    return DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6), plan=plan, plan_fn=None,
        scenario_fn=lambda props: build_scenario(cfg, props, models, LOSS), num_clients=N,
        train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": int(cfg["seed"])},
        node_wait_timeout_s=1.0)


def _plan(model: str, rounds: int, clients=None) -> Plan:
    clients = tuple(clients or (f"c{i}" for i in range(N)))
    return Plan("given", True, [RoundDecision(model, clients, {"A": 0, "B": 0})] * rounds)


def test_full_method_without_pruning_equals_flower_fedavg(cfg):
    geo = geometry(cfg)
    init = state_to_arrays(initial_state(geo, seed=int(cfg["seed"])))
    evaluate = make_evaluate_fn(cfg)
    ours = _strategy(cfg, _plan("full", 3))
    res_ours = ours.start(InProcessGrid(make_client_app(cfg), N), init, evaluate_fn=evaluate)

    train_config = ConfigRecord({"compression": 0.0, "local-epochs": 1, "lr": 0.05, "batch-size": 32,
                                 "seed": int(cfg["seed"])})
    fedavg = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=N, min_train_nodes=N)
    res_flwr = fedavg.start(InProcessGrid(make_client_app(cfg), N), init, num_rounds=3,
                            train_config=train_config)
    a, b = arrays_to_state(res_ours.arrays), arrays_to_state(res_flwr.arrays)
    assert set(a) == set(b)
    init_state = arrays_to_state(init)
    assert max(np.abs(a[k] - init_state[k]).max() for k in a) > 1e-3  # it really trained
    diff = max(np.abs(a[k] - b[k]).max() for k in a)
    assert diff < 1e-6, diff
    assert len(ours.controller.records) == 3


class FaultyGrid(InProcessGrid):
    """Partition 0 never answers, 1 answers with an error, 2 sends NaN weights, 3 is fine."""

    def deliver(self, msg: Message):
        pid = self.contexts[msg.metadata.dst_node_id].node_config["partition-id"]
        if msg.metadata.message_type != "train" or pid == 3:
            return super().deliver(msg)
        if pid == 0:
            return None
        if pid == 1:
            return Message(Error(code=1, reason="simulated crash"), reply_to=msg)
        reply = super().deliver(msg)
        arrays = reply.content["arrays"]
        state = arrays_to_state(arrays)
        state["fc1.bias"] = np.full_like(state["fc1.bias"], np.nan)
        reply.content["arrays"] = state_to_arrays(state)
        return reply


def test_dropped_error_and_nan_replies_are_logged_and_excluded(cfg, caplog):
    geo = geometry(cfg)
    init_state = initial_state(geo, seed=0)
    strategy = _strategy(cfg, _plan("p50", 1))
    seen = {}

    def evaluate(rnd, arrays, compression):
        seen[rnd] = arrays_to_state(arrays)
        return MetricRecord({"loss": 1.0, "accuracy": 0.5})

    with caplog.at_level(logging.INFO, logger="depl_fl"):
        strategy.start(FaultyGrid(make_client_app(cfg), N), state_to_arrays(init_state), evaluate_fn=evaluate)
    text = caplog.text
    assert "rejected reply from c1" in text and "simulated crash" in text
    assert "rejected reply from c2" in text and "NaN" in text
    assert "rejected reply from c0: no reply" in text
    rec = strategy.controller.records[0]
    assert rec["replied"] == ["c3"]
    assert {r["client"] for r in rec["rejected"]} == {"c0", "c1", "c2"}
    assert all(r["reason"] for r in rec["rejected"])
    # The new global model is client 3's update alone, scattered back.
    good = make_client_app(cfg)
    grid = InProcessGrid(good, N)
    structure = compute_structure(network_layout(geo), init_state, 0.5)
    ref_strategy = _strategy(cfg, _plan("p50", 1, ["c3"]))
    ref_seen = {}
    ref_strategy.start(grid, state_to_arrays(init_state),
                       evaluate_fn=lambda r, a, c: ref_seen.setdefault(r, arrays_to_state(a)) and
                       MetricRecord({"loss": 1.0, "accuracy": 0.5}))
    for k in seen[1]:
        np.testing.assert_allclose(seen[1][k], ref_seen[1][k], atol=1e-7)
    assert all(np.all(np.isfinite(v)) for v in seen[1].values())
    assert tuple(len(k) for k in structure.keep) == (8, 16, 32)


def test_all_replies_bad_keeps_global_model(cfg, caplog):
    class Broken(InProcessGrid):
        def deliver(self, msg):
            if msg.metadata.message_type == "train":
                return Message(Error(code=1, reason="down"), reply_to=msg)
            return super().deliver(msg)

    init_state = initial_state(geometry(cfg), seed=0)
    out = {}
    with caplog.at_level(logging.INFO, logger="depl_fl"):
        _strategy(cfg, _plan("full", 1)).start(
            Broken(make_client_app(cfg), N), state_to_arrays(init_state),
            evaluate_fn=lambda r, a, c: out.setdefault(r, arrays_to_state(a)) and MetricRecord({"loss": 2.0}))
    assert "global model unchanged" in caplog.text
    for k, v in init_state.items():
        np.testing.assert_array_equal(out[1][k], v)


def test_missing_nodes_give_a_clear_error(cfg):
    strategy = _strategy(cfg, _plan("full", 1))
    with pytest.raises(NodesUnavailableError, match=f"only 2 of {N} clients connected") as err:
        strategy.start(InProcessGrid(make_client_app(cfg), 2),
                       state_to_arrays(initial_state(geometry(cfg), 0)),
                       evaluate_fn=lambda r, a, c: MetricRecord({"loss": 1.0}))
    # what to change, for a simulation whose federation has Flower's default 2 SuperNodes too
    assert str(err.value).endswith(f"start more SuperNodes (a Flower simulation: flwr federation "
                                   f"simulation-config ... --num-supernodes {N}) or plan for fewer "
                                   "clients (num_clients)")


def test_check_update_flags_shapes_names_nan_and_weights():
    shapes = {"w": (2, 3), "b": (2,)}
    good = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(2, np.float32)}
    assert check_update(good, {"num-examples": 5}, shapes) == []
    ok = {"num-examples": 5}
    assert any("shape" in p for p in check_update({**good, "w": np.zeros((3, 3))}, ok, shapes))
    assert any("missing" in p for p in check_update({"w": good["w"]}, {"num-examples": 5}, shapes))
    assert any("NaN" in p for p in check_update({**good, "b": np.array([0, np.inf])}, ok, shapes))
    assert any("num-examples" in p for p in check_update(good, {"num-examples": 0}, shapes))
    assert any("num-examples" in p for p in check_update(good, {}, shapes))


def test_summary_line_states_the_verdict_and_survives_missing_figures():
    from strategies.server_app import summary_line

    line = summary_line({"method": "depl", "seed": 3, "final_loss": 0.2596, "final_test_loss": 0.2711,
                         "target_loss": 0.35, "target_prob": 0.9, "met": True, "cost_j": 92.26,
                         "profile_energy_j": 300.5, "total_energy_j": 392.76,
                         "time_s": 48.99, "rounds": 27, "replans": 1})
    assert line == ("summary: depl seed 3: final test loss 0.2711 (validation 0.2596) vs target 0.35 "
                    "(met; pi=0.9), energy 392.8 J (training 92.26 J + profiling 300.5 J), "
                    "modeled time 48.99 s, 27 rounds, 1 re-plans")
    broken = summary_line({"method": "full", "seed": 0, "final_loss": None, "target_loss": 0.35,
                           "target_prob": 0.9, "met": False, "rounds": 2})
    assert "final test loss n/a (validation n/a)" in broken and "(NOT met;" in broken


def test_summary_line_of_a_resumed_job_splits_the_round_it_resumed_after():
    from strategies.server_app import summary_line

    base = {"method": "depl", "seed": 0, "met": True, "rounds": 13, "profile_rounds": 8}
    finished = summary_line({**base, "resumed_from": 21})
    assert finished.endswith("13 rounds, 0 re-plans, resumed after round 21 (8 exploration + 13 training "
                             "rounds); the job had already finished: no round left to run")
    went_on = summary_line({**base, "resumed_from": 10})
    assert went_on.endswith("13 rounds, 0 re-plans, resumed after round 10 "
                            "(8 exploration + 2 training rounds)")
    in_exploration = summary_line({**base, "resumed_from": 5})
    assert in_exploration.endswith("resumed after round 5 (5 exploration rounds)")


def test_compressed_rounds_keep_one_structure_and_a_switch_starts_from_their_function(cfg):
    # Function-preserving switch (pruning.silence_dropped): the p50 rounds train one fixed
    # channel set, and the full model handed to the switch round computes the p50 model.
    import torch

    from depl_fl.task.models import set_state
    from depl_fl.task.pruning import extract
    from depl_fl.task.subnets import build_skeleton, full_network

    geo = geometry(cfg)
    clients = tuple(f"c{i}" for i in range(N))
    plan = Plan("given", True, [RoundDecision("p50", clients, {"A": 0, "B": 0})] * 3
                + [RoundDecision("full", clients, {"A": 0, "B": 0})])
    seen = {}

    def evaluate(rnd, arrays, compression):
        seen[rnd] = arrays_to_state(arrays)
        return MetricRecord({"loss": 1.0, "accuracy": 0.5})

    _strategy(cfg, plan).start(InProcessGrid(make_client_app(cfg), N),
                               state_to_arrays(initial_state(geo, seed=0)), evaluate_fn=evaluate)
    structures = [compute_structure(network_layout(geo), seen[r], 0.5) for r in (1, 2, 3)]
    for other in structures[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(structures[0].keep, other.keep, strict=True))
    x = torch.randn(4, geo.in_channels, geo.image_size, geo.image_size,
                    generator=torch.Generator().manual_seed(0))
    big = full_network(geo)
    set_state(big, seen[3])
    small = build_skeleton(geo, 0.5)
    set_state(small, extract(seen[3], structures[2]))
    with torch.no_grad():
        torch.testing.assert_close(big(x), small(x), rtol=1e-4, atol=1e-5)
    assert any(not np.array_equal(seen[4][k], seen[3][k]) for k in seen[3])  # the full round trained
