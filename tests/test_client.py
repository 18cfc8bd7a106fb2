"""ClientApp train/query reply content: prune -> train -> scatter-back, deterministic sub-networks."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402

from clients.handlers import query_content, train_content  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import client_partition, geometry  # noqa: E402
from depl_fl.task.pruning import aggregate_pruned, compute_structure, extract  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import arrays_to_state, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402


@pytest.fixture(scope="module")
def cfg():
    return compose_config(["num_clients=4", "simulation=inprocess"])


def _context(pid: int, num: int, **extra) -> Context:
    node_config = {"partition-id": pid, "num-partitions": num, **extra}
    return Context(run_id=1, node_id=100 + pid, node_config=node_config, state=RecordDict(), run_config={})


def _train_msg(state, compression: float, server_round: int = 1) -> Message:
    InProcessGrid(lambda m, c: m, 1)  # sets Flower's task identity needed by Message()
    conf = ConfigRecord({"model-id": "p50", "compression": compression, "level": 0, "local-epochs": 1,
                         "lr": 0.05, "batch-size": 32, "server-round": server_round, "seed": 0})
    return Message(RecordDict({"arrays": state_to_arrays(state), "config": conf}), dst_node_id=100,
                   message_type=MessageType.TRAIN)


def test_train_handler_prunes_trains_and_scatters_back(cfg):
    geo = geometry(cfg)
    full = initial_state(geo, seed=0)
    structure = compute_structure(network_layout(geo), full, 0.5)
    reply = train_content(_train_msg(extract(full, structure), 0.5).content, _context(1, 4), cfg)
    kept = arrays_to_state(reply["arrays"])
    metrics = reply["metrics"]
    # Only the kept weights come back, with the pruned (smaller) shapes.
    assert {k: v.shape for k, v in kept.items()} == structure.sub_shapes()
    assert sum(v.size for v in kept.values()) < 0.5 * sum(v.size for v in full.values())
    assert metrics["num-examples"] == len(client_partition(cfg, 1, 4)[1])
    assert np.isfinite(metrics["train-loss"]) and metrics["train-time-s"] > 0
    merged = aggregate_pruned(full, [(kept, metrics["num-examples"])], structure)
    # Trained entries changed, pruned-away conv1 channels kept their global values.
    dropped = sorted(set(range(full["conv1.weight"].shape[0])) - set(structure.keep[0]))
    assert dropped
    np.testing.assert_array_equal(merged["conv1.weight"][dropped], full["conv1.weight"][dropped])
    assert not np.allclose(merged["conv1.weight"][list(structure.keep[0])],
                           full["conv1.weight"][list(structure.keep[0])])


def test_every_client_derives_the_same_subnetwork(cfg):
    geo = geometry(cfg)
    full = initial_state(geo, seed=3)
    sub = extract(full, compute_structure(network_layout(geo), full, 0.5))
    replies = [train_content(_train_msg(sub, 0.5).content, _context(pid, 4), cfg) for pid in range(4)]
    names = [sorted(arrays_to_state(r["arrays"])) for r in replies]
    shapes = [{k: v.shape for k, v in arrays_to_state(r["arrays"]).items()} for r in replies]
    assert all(n == names[0] for n in names) and all(s == shapes[0] for s in shapes)
    # The structure is a function of the global weights only.
    a, b = (compute_structure(network_layout(geo), f, 0.5) for f in (full, dict(full)))
    assert all(np.array_equal(x, y) for x, y in zip(a.keep, b.keep, strict=True))


def test_train_is_deterministic_for_a_seed(cfg):
    full = initial_state(geometry(cfg), seed=1)
    a = arrays_to_state(train_content(_train_msg(full, 0.0).content, _context(2, 4), cfg)["arrays"])
    b = arrays_to_state(train_content(_train_msg(full, 0.0).content, _context(2, 4), cfg)["arrays"])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_query_reports_cluster_samples_and_partition(cfg):
    InProcessGrid(lambda m, c: m, 1)
    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=100, message_type=MessageType.QUERY)
    props = query_content(msg.content, _context(3, 4), cfg)["properties"]
    # 4 clients split 0.4/0.6 across A/B -> partitions 0,1 in A and 2,3 in B.
    assert props["cluster"] == "B" and props["partition-id"] == 3
    assert props["num-samples"] == len(client_partition(cfg, 3, 4)[1])
    # A node config cluster (real deployment) takes precedence.
    assert query_content(msg.content, _context(3, 4, cluster="A"), cfg)["properties"]["cluster"] == "A"


@pytest.mark.parametrize("key, meant", [("clustr", "cluster"), ("data_dir", "data-dir"),
                                        ("level-thread", "level-threads")])
def test_query_refuses_a_node_config_key_that_misspells_one_depl_reads(cfg, key, meant):
    from depl_fl.errors import ScenarioError

    InProcessGrid(lambda m, c: m, 1)
    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=100, message_type=MessageType.QUERY)
    with pytest.raises(ScenarioError) as err:
        query_content(msg.content, _context(3, 4, **{key: "A"}), cfg)
    assert str(err.value).startswith(f"node config {key}: unknown key; did you mean {meant}?")


def test_query_leaves_another_apps_node_config_keys_alone(cfg):
    InProcessGrid(lambda m, c: m, 1)
    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=100, message_type=MessageType.QUERY)
    other = {"partition": 7, "cluster-id": "x", "lr": 0.1}
    assert query_content(msg.content, _context(3, 4, **other), cfg)["properties"]["partition-id"] == 3


def test_every_node_config_key_the_code_names_is_known():
    from clients import warm_client
    from depl_fl.task.devices import NODE_DEVICE_KEY
    from depl_fl.task.node_config import NODE_CONFIG_KEYS

    named = {NODE_DEVICE_KEY, warm_client.ENABLE_KEY, warm_client.IDLE_KEY, warm_client.START_KEY,
             warm_client.REPLY_KEY}
    assert named <= NODE_CONFIG_KEYS


def test_query_reports_the_label_histogram_of_the_partition_only(cfg):
    InProcessGrid(lambda m, c: m, 1)
    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=100, message_type=MessageType.QUERY)
    props = query_content(msg.content, _context(2, 4), cfg)["properties"]
    _, y = client_partition(cfg, 2, 4)
    hist = list(props["label-histogram"])
    assert len(hist) == geometry(cfg).num_classes and sum(hist) == props["num-samples"]
    assert hist == np.bincount(y, minlength=geometry(cfg).num_classes).tolist()
