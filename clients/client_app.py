"""The DepL Flower ClientApp (Message API).

Message protocol (docs/ARCHITECTURE.md, "Message protocol"):

* ``query``: reply ``ConfigRecord "properties"`` with ``cluster``,
  ``num-samples``, ``partition-id`` and ``label-histogram`` (samples per class,
  a list of ints: it reveals no sample).
* ``train``: receive ``ArrayRecord "arrays"`` (full global weights) and
  ``ConfigRecord "config"`` (``model-id``, ``compression``, ``level``,
  ``local-epochs``, ``lr``, ``batch-size``, ``server-round``, ``seed``); prune
  deterministically from the global weights, fine-tune locally and reply with
  ``ArrayRecord "arrays"`` (kept weights only, named as in the full model) and
  ``MetricRecord "metrics"`` (``num-examples``, ``train-loss``, ``train-time-s``).
* ``evaluate``: loss/accuracy of the global (full) model on the local partition.

The run configuration reaches the app by closure (:func:`make_client_app`,
used by ``depl_fl.main``) or, for ``flwr run .``, from the run config
(:func:`depl_fl.runs.runconfig.config_from_run_config`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients.faults import apply_faults
from depl_fl.runs.runconfig import client_seed, cluster_assignment, config_from_run_config
from depl_fl.task.local_update import evaluate_state, local_update
from depl_fl.task.partitions import client_partition, geometry

ConfigSource = Callable[[Context], Mapping[str, Any]]


def node_partition(context: Context) -> tuple[int, int]:
    """``(partition-id, num-partitions)`` of this node from its node config."""
    node_config = context.node_config
    try:
        return int(node_config["partition-id"]), int(node_config["num-partitions"])
    except KeyError:
        raise ValueError("node config needs partition-id and num-partitions "
                         "(flower-supernode --node-config 'partition-id=0 num-partitions=10')") from None


def node_properties(cfg: Mapping[str, Any], context: Context) -> dict[str, Any]:
    """Cluster, number of samples, partition id and label histogram of this node.

    The cluster is the node config's ``cluster`` when set (a real deployment);
    in simulation only ``partition-id``/``num-partitions`` exist and the cluster
    comes from the configured split of partition ids across node classes.
    """
    pid, num = node_partition(context)
    cluster = context.node_config.get("cluster")
    if cluster is None:
        cluster = cluster_assignment(num, cfg["clusters"]["classes"])[pid]
    _, y = client_partition(cfg, pid, num)
    # Counts per class only: no sample leaves the node (contract v2 label coverage).
    histogram = np.bincount(np.asarray(y, dtype=np.int64), minlength=geometry(cfg).num_classes)
    return {"cluster": str(cluster), "num-samples": int(len(y)), "partition-id": pid,
            "label-histogram": [int(v) for v in histogram]}


def handle_query(msg: Message, context: Context, cfg: Mapping[str, Any]) -> Message:
    """Reply to a QUERY message with this node's properties."""
    props = node_properties(cfg, context)
    return Message(RecordDict({"properties": ConfigRecord(props)}), reply_to=msg)


def _state_of(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: arr.numpy() for name, arr in record.items()}


def handle_train(msg: Message, context: Context, cfg: Mapping[str, Any]) -> Message:
    """Prune from the received global weights, fine-tune locally, reply with the kept weights."""
    torch.set_num_threads(1)
    content = msg.content
    conf = content["config"]
    global_state = _state_of(content["arrays"])
    pid, num = node_partition(context)
    x, y = client_partition(cfg, pid, num)
    train = cfg["train"]
    server_round = int(conf.get("server-round", 0))
    result = local_update(
        global_state, geometry(cfg), float(conf.get("compression", 0.0)), x, y,
        epochs=int(conf.get("local-epochs", train["local_epochs"])),
        lr=float(conf.get("lr", train["lr"])),
        batch_size=int(conf.get("batch-size", train["batch_size"])),
        seed=client_seed(int(conf.get("seed", cfg["seed"])), server_round, pid),
    )
    state, sent = apply_faults(cfg, context, server_round, result.kept_state, {  # faults: experiments only
        "num-examples": result.num_examples, "train-loss": result.train_loss,
        "train-time-s": result.train_time_s})
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
    metrics = MetricRecord(sent)
    return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)


def handle_evaluate(msg: Message, context: Context, cfg: Mapping[str, Any]) -> Message:
    """Loss and accuracy of the received global model on the local partition."""
    torch.set_num_threads(1)
    pid, num = node_partition(context)
    x, y = client_partition(cfg, pid, num)
    loss, acc = evaluate_state(_state_of(msg.content["arrays"]), geometry(cfg), x, y)
    metrics = MetricRecord({"num-examples": int(len(y)), "eval-loss": loss, "eval-acc": acc})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def make_client_app(cfg: Mapping[str, Any] | None = None) -> ClientApp:
    """Build the ClientApp.

    Parameters
    ----------
    cfg : mapping, optional
        The composed run configuration (plain dict, see :mod:`depl_fl.runs.runconfig`).
        ``None`` reads it from ``context.run_config`` (``flwr run .``).
    """
    app = ClientApp()

    def config(context: Context) -> Mapping[str, Any]:
        return cfg if cfg is not None else config_from_run_config(context.run_config)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return handle_query(msg, context, config(context))

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return handle_train(msg, context, config(context))

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return handle_evaluate(msg, context, config(context))

    return app


#: ClientApp for ``flwr run .`` (configuration from the run config).
app = make_client_app()
