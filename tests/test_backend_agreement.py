"""One seed, one result: the job does not depend on node ids or the order replies arrive in.

Flower's Ray backend gives the simulated nodes random ids and returns the
replies in the order the ClientApp actors finish; the in-process grid numbers
nodes by partition and returns replies in node order. The server must sum the
replies alike on both.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import Context, Message, MetricRecord  # noqa: E402

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.contract.plan import Plan, RoundDecision, Targets  # noqa: E402
from depl_fl.orchestration.scenario_builder import build_scenario, model_docs  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import DepLStrategy, arrays_to_state, partition_order, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402

N = 8
LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")},
        "switch": [{"from": "full", "to": "p50", "mean": 0.1, "std": 0.05},
                   {"from": "p50", "to": "full", "mean": 0.1, "std": 0.05}]}


class ArrivalOrderGrid(InProcessGrid):
    """As Flower's Ray backend: node ids unrelated to the partitions, replies in another order.

    Node ids are scrambled (a seeded permutation of large ids) and each round's
    replies come back in a seeded random order, as from actors finishing at
    different times.
    """

    def __init__(self, client_app, num_nodes: int, seed: int) -> None:
        super().__init__(client_app, num_nodes)
        rng = np.random.default_rng(seed)
        ids = rng.choice(2**40, size=num_nodes, replace=False) + 2**20
        self.contexts = {int(nid): Context(run_id=ctx.run_id, node_id=int(nid), node_config=ctx.node_config,
                                           state=ctx.state, run_config=ctx.run_config)
                         for nid, ctx in zip(ids, self.contexts.values(), strict=True)}
        self._rng = rng

    def pull_messages(self, message_ids):
        replies = list(super().pull_messages(message_ids))
        return [replies[i] for i in self._rng.permutation(len(replies))]


@pytest.fixture(scope="module")
def cfg():
    return compose_config([f"num_clients={N}", "simulation=inprocess", "tracking.enabled=false",
                           "train.lr=0.05"])


def _job(cfg, grid: InProcessGrid) -> tuple[DepLStrategy, dict[int, dict[str, np.ndarray]]]:
    geo = geometry(cfg)
    models = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    clients = tuple(f"c{i}" for i in range(N))
    plan = Plan("given", True, [RoundDecision("full", clients, {"A": 0, "B": 0})] * 2
                + [RoundDecision("p50", clients, {"A": 0, "B": 0})] * 2)
    strategy = DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6), plan=plan, plan_fn=None,
        scenario_fn=lambda props: build_scenario(cfg, props, models, LOSS), num_clients=N,
        train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": int(cfg["seed"])},
        node_wait_timeout_s=1.0)
    seen: dict[int, dict[str, np.ndarray]] = {}

    def evaluate(rnd, arrays, compression):
        seen[rnd] = arrays_to_state(arrays)
        return MetricRecord({"loss": 1.0, "accuracy": 0.5})

    strategy.start(grid, state_to_arrays(initial_state(geo, seed=0)), evaluate_fn=evaluate)
    return strategy, seen


def test_partition_order_puts_known_partitions_first_by_partition_id():
    props = {"c10": {"partition-id": 10}, "c2": {"partition-id": 2}, "c9": {"partition-id": 9}}
    names = ["unknown node 7", "c10", "c9", "c2"]
    assert sorted(names, key=lambda c: partition_order(c, props)) == ["c2", "c9", "c10", "unknown node 7"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_job_is_bit_identical_whatever_the_node_ids_and_reply_order(cfg, seed):
    ours, seen = _job(cfg, InProcessGrid(make_client_app(cfg), N))
    other, other_seen = _job(cfg, ArrivalOrderGrid(make_client_app(cfg), N, seed))
    assert list(other.properties) == list(ours.properties) == [f"c{i}" for i in range(N)]
    assert sorted(seen) == sorted(other_seen) == [0, 1, 2, 3, 4]
    for rnd, state in seen.items():
        for name, value in state.items():
            assert np.array_equal(value, other_seen[rnd][name]), (rnd, name)
    keys = ("replied", "rejected", "train_loss", "measured_energy_j", "energy_j", "bytes_up", "bytes_down")
    for a, b in zip(ours.controller.records, other.controller.records, strict=True):
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
        assert list(a.get("replies") or {}) == list(b.get("replies") or {})


def test_replies_in_any_order_give_the_same_aggregate(cfg):
    """The cause itself: the aggregate of one round's replies, fed in two orders, is the same bit for bit."""
    strategy, _ = _job(cfg, InProcessGrid(make_client_app(cfg), N))
    # The last round's messages answered again (the strategy still holds its model and messages).
    grid = InProcessGrid(make_client_app(cfg), N)
    replies = [grid.deliver(message) for message, _ in strategy._sent]
    assert all(isinstance(reply, Message) for reply in replies)
    # Train losses whose weighted sum depends on the order of the terms: 1e16 swallows a lone 1.0.
    for i, reply in enumerate(replies):
        reply.content["metrics"]["train-loss"] = 1e16 if i == 0 else 1.0
    orders = (replies, replies[::-1], replies[1::2] + replies[::2])
    results = [strategy.aggregate_train(4, order) for order in orders]
    (arrays, metrics), others = results[0], results[1:]
    assert arrays is not None and metrics is not None
    for other_arrays, other_metrics in others:
        assert other_metrics["train-loss"] == metrics["train-loss"]
        a, b = arrays_to_state(arrays), arrays_to_state(other_arrays)
        assert all(np.array_equal(a[k], b[k]) for k in a)


#: Round fields that are measured wall times, different in any two runs.
WALL_FIELDS = {"wall_s", "comparable_wall_s", "steps_s", "train_time_s"}
#: Reply fields that are measured (wall times, the CPUs a process was given).
MEASURED_REPLY_FIELDS = {"train_time_s", "reply_time_s", "arrival_s", "level_cpus", "level_cpu_mask"}


def _comparable(record: dict) -> dict:
    out = {k: v for k, v in record.items() if k not in WALL_FIELDS}
    out["replies"] = {cid: {k: v for k, v in reply.items() if k not in MEASURED_REPLY_FIELDS}
                      for cid, reply in (record.get("replies") or {}).items()}
    return out


@pytest.mark.slow
def test_a_non_iid_job_on_ray_equals_the_in_process_job(tmp_path):
    """Eight exploration rounds of 20 non-IID clients (4 Ray actors), then no plan: the rounds agree."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    job = ["dataset=synthetic", "model=synthetic_mlp", "num_clients=40", "profile.explore.max_clients=20",
           "target.loss=1.3", "target.max_rounds=3"]
    backends = {"ray": ["simulation=ray", "simulation.client_num_cpus=0.5"],
                "inprocess": ["simulation=inprocess"]}
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "RAY_DEDUP_LOGS": "0"}
    rounds = {}
    for backend, overrides in backends.items():
        out = tmp_path / backend
        proc = subprocess.run([sys.executable, "-m", "depl_fl.main", *job, *overrides,
                               f"profile.cache_dir={out / 'cache'}", f"hydra.run.dir={out}"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 3, proc.stderr[-3000:]  # the target is out of reach in 3 rounds
        rounds[backend] = json.loads((out / "results.json").read_text())["rounds"]
    assert len(rounds["ray"]) == len(rounds["inprocess"]) == 8
    for on_ray, in_process in zip(rounds["ray"], rounds["inprocess"], strict=True):
        assert _comparable(on_ray) == _comparable(in_process), on_ray["round"]
