"""What the DepL ClientApp replies to each message (Message API), computed in the calling process.

Message protocol (docs/ARCHITECTURE.md, "Message protocol"):

* ``query``: reply ``ConfigRecord "properties"`` with ``cluster``,
  ``num-samples``, ``partition-id`` and ``label-histogram`` (samples per class,
  a list of ints: it reveals no sample; also the data fingerprint of the
  profile cache).

Training data: the node config's ``data-dir`` (a folder ``<class>/<image>.png``
of this node's own samples, :mod:`depl_fl.task.folder_data`) when set, and
always for ``dataset=folder``; otherwise (simulation) the partition
``partition-id`` of the configured dataset. A client never opens
``dataset.test_dir``.
* ``train``: receive ``ArrayRecord "arrays"`` (the planned variant's entries,
  sliced from the global state by the server and named as in the full
  network) and ``ConfigRecord "config"`` (``model-id``, ``compression``,
  ``level``, ``local-epochs``, ``lr``, ``batch-size``, ``server-round``,
  ``seed``, and ``compressions``/``kept-whole``: the job's compressed variants
  and the layers the server keeps whole); rebuild the sub-network from the
  network cut to the job's compressions (this node's configuration's, which
  keeps the same groups whole as the server's: checked against
  ``kept-whole``) and ``compression``, load the entries, fine-tune locally
  and reply with ``ArrayRecord "arrays"`` (the same entries, trained) and ``MetricRecord "metrics"``
  (``num-examples``, ``train-loss`` in the units of ``model.loss``, ``train-time-s``, what the round's
  ``level`` applied and the reply's measured bytes and energy, :func:`train_content`).
* ``evaluate``: loss (``model.loss``, cross-entropy by default) and accuracy of
  the global (full) model on the local partition.

Training and evaluation run on the node's device: its node config's
``device`` when set (``--node-config "device='cuda'"``), else the job's
``train.device`` (:func:`depl_fl.task.devices.node_device`: the node's own
setting wins, it knows its machine); the arrays of every reply are CPU numpy.

The run configuration reaches the handlers by closure
(:func:`clients.client_app.make_client_app`, used by ``depl_fl.main``) or, for
``flwr run .``, from the run config
(:func:`depl_fl.runs.runconfig.config_from_run_config`).

A Flower deployment runs every message in a fresh process, so this module
imports only flwr and numpy; torch is imported by the handlers that train or
evaluate. For ``flwr run .`` the composed configuration and the node's
partition are kept in the node cache (:func:`depl_fl.diskcache.node_cache_dir`),
so only a node's first message loads the dataset (scikit-learn/Hugging Face),
splits it (Flower Datasets) and composes the configuration (Hydra). In a
deployment the ClientApp process does not even do that: it forwards the
message to the node's warm worker (:mod:`clients.warm_client`), which runs
:data:`HANDLERS` with torch already imported, and falls back to running them
in the ClientApp process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord, RecordDict

from depl_fl.diskcache import node_cache_dir, path_stamp
from depl_fl.orchestration.faults import apply_faults
from depl_fl.runs.runconfig import client_seed, cluster_assignment, config_from_run_config, job_network
from depl_fl.task.node_data import NodeData, cached_node_data


def node_partition(context: Context) -> tuple[int, int]:
    """``(partition-id, num-partitions)`` of this node from its node config."""
    node_config = context.node_config
    try:
        if node_config.get("data-dir") and "num-partitions" not in node_config:
            return int(node_config["partition-id"]), int(node_config["partition-id"]) + 1
        return int(node_config["partition-id"]), int(node_config["num-partitions"])
    except KeyError:
        raise ValueError("node config needs partition-id and num-partitions "
                         "(flower-supernode --node-config 'partition-id=0 num-partitions=10')") from None


def _local_paths(cfg: Mapping[str, Any], context: Context) -> list[Any]:
    """Stamps of the local files/folders the node's data may be read from."""
    values = [*cfg["dataset"].values(), *context.node_config.values()]
    return [stamp for stamp in map(path_stamp, values) if stamp is not None]


def node_data(cfg: Mapping[str, Any], context: Context, cache_dir: Path | None = None) -> NodeData:
    """This node's training partition and the task geometry.

    Cached in memory per process and, with ``cache_dir``, on the node's disk
    under a hash of the dataset and partition settings, the seed, the node
    config and the modification times of the local data paths.
    """
    pid, num = node_partition(context)
    key = {"dataset": cfg["dataset"], "partition": cfg["partition"], "seed": cfg["seed"],
           "arch": cfg["model"]["arch"], "partition-id": pid, "num-partitions": num,
           "node-config": dict(context.node_config), "paths": _local_paths(cfg, context)}

    return cached_node_data(cache_dir, key, lambda: _read_node_data(cfg, context, pid, num))


def _read_node_data(cfg: Mapping[str, Any], context: Context, pid: int, num: int) -> NodeData:
    """The node config's ``data-dir`` folder (always for ``dataset=folder``), else the partition."""
    from depl_fl.task.partitions import client_partition, geometry, is_folder

    data_dir = context.node_config.get("data-dir")
    if data_dir:
        from depl_fl.task.folder_data import folder_classes, geometry_of, read_folder

        data = read_folder(str(data_dir), folder_classes(cfg), field="node config data-dir")
        return NodeData(data.x, data.y, geometry_of(str(cfg["model"]["arch"]), data))
    if is_folder(cfg):
        from depl_fl.task.data import DataError

        raise DataError("node config data-dir: dataset=folder needs each node's own folder "
                        "(flower-supernode --node-config 'partition-id=0 data-dir=\"PATH\"')")
    x, y = client_partition(cfg, pid, num)
    return NodeData(x, y, geometry(cfg))


def node_properties(cfg: Mapping[str, Any], context: Context,
                    cache_dir: Path | None = None) -> dict[str, Any]:
    """Cluster, number of samples, partition id and label histogram of this node.

    The cluster is the node config's ``cluster`` when set (a real deployment);
    in simulation only ``partition-id``/``num-partitions`` exist and the cluster
    comes from the configured split of partition ids across node classes. A
    node config key that misspells one DepL reads is refused in one line
    (:func:`depl_fl.task.node_config.check_node_config`).
    """
    from depl_fl.task.node_config import check_node_config

    check_node_config(context.node_config)
    pid, num = node_partition(context)
    cluster = context.node_config.get("cluster")
    if cluster is None:
        cluster = cluster_assignment(num, cfg["clusters"]["classes"])[pid]
    data = node_data(cfg, context, cache_dir)
    # Counts per class only: no sample leaves the node (contract v2 label coverage).
    histogram = np.bincount(np.asarray(data.y, dtype=np.int64), minlength=data.geometry.num_classes)
    return {"cluster": str(cluster), "num-samples": int(len(data.y)), "partition-id": pid,
            "label-histogram": [int(v) for v in histogram]}


def query_content(content: RecordDict, context: Context, cfg: Mapping[str, Any],
                  cache_dir: Path | None = None) -> RecordDict:
    """The reply content to a QUERY: this node's properties."""
    return RecordDict({"properties": ConfigRecord(node_properties(cfg, context, cache_dir))})


def _state_of(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: arr.numpy() for name, arr in record.items()}


def train_content(content: RecordDict, context: Context, cfg: Mapping[str, Any],
                  cache_dir: Path | None = None) -> RecordDict:
    """Load the received sub-network, fine-tune it locally: its trained entries and metrics.

    The round's ``level`` is applied while training (:mod:`depl_fl.task.device_levels`:
    torch threads, CPU affinity); the metrics say what was applied and what the
    reply measured: ``train-time-s``, ``reply-time-s`` (the whole handler: data, training,
    faults), ``bytes-down``/``bytes-up`` (the arrays
    received and sent), ``energy-j`` with ``energy-source-code`` (an index into
    :data:`depl_fl.task.energy_meter.SOURCES`; no ``energy-j`` when the node
    has neither a meter nor a declared power). Only a deployment passes
    ``cache_dir`` (the node cache), so only there do the default levels act.
    """
    from depl_fl.task.device_levels import applied, level_setting
    from depl_fl.task.devices import node_device
    from depl_fl.task.energy_meter import SOURCES, meter_for, reply_energy
    from depl_fl.task.local_update import local_update
    from depl_fl.task.losses import loss_spec
    from depl_fl.task.subnets import check_kept_whole

    t0 = time.perf_counter()
    conf = content["config"]
    sub_state = _state_of(content["arrays"])
    pid, _ = node_partition(context)
    data = node_data(cfg, context, cache_dir)
    network = job_network(cfg, data.geometry)  # this node knows the job's compressions
    if "kept-whole" in conf:
        check_kept_whole(network, list(conf["kept-whole"]))
    train = cfg["train"]
    device = node_device(train.get("device", "cpu"), context.node_config)
    server_round = int(conf.get("server-round", 0))
    setting = level_setting(context.node_config, int(conf.get("level", 0)), deployment=cache_dir is not None)
    meter = meter_for(context.node_config.get("energy-meter"), device)
    with applied(setting) as level_metrics:
        before = meter.read_uj() if meter is not None else None
        result = local_update(
            sub_state, network, float(conf.get("compression", 0.0)), data.x, data.y,
            epochs=int(conf.get("local-epochs", train["local_epochs"])),
            lr=float(conf.get("lr", train["lr"])),
            batch_size=int(conf.get("batch-size", train["batch_size"])),
            seed=client_seed(int(conf.get("seed", cfg["seed"])), server_round, pid),
            loss=loss_spec(cfg), device=device,
        )
        metered = meter.joules_between(before, meter.read_uj()) if meter is not None else None
    state, sent = apply_faults(cfg, context, server_round, result.kept_state, {  # faults: experiments only
        "num-examples": result.num_examples, "train-loss": result.train_loss,
        "train-time-s": result.train_time_s}, phase=str(conf.get("phase", "train")))
    energy, source = reply_energy(metered, setting.watts, float(sent["train-time-s"]))
    sent = {**sent, **level_metrics, "energy-source-code": SOURCES.index(source),
            "bytes-down": _nbytes(sub_state), "bytes-up": _nbytes(state),
            "reply-time-s": time.perf_counter() - t0}
    if energy is not None:
        sent["energy-j"] = energy
    arrays = ArrayRecord({k: Array(np.require(v, requirements="C")) for k, v in state.items()})
    return RecordDict({"arrays": arrays, "metrics": MetricRecord(sent)})


def _nbytes(state: Mapping[str, Any]) -> int:
    """Bytes of the arrays of a model state (what travels, without framing)."""
    return int(sum(np.asarray(v).nbytes for v in state.values()))


def evaluate_content(content: RecordDict, context: Context, cfg: Mapping[str, Any],
                     cache_dir: Path | None = None) -> RecordDict:
    """Loss and accuracy of the received global model on the local partition."""
    import torch

    from depl_fl.task.devices import node_device
    from depl_fl.task.local_update import evaluate_state
    from depl_fl.task.losses import loss_spec

    torch.set_num_threads(1)
    device = node_device(cfg["train"].get("device", "cpu"), context.node_config)
    data = node_data(cfg, context, cache_dir)
    loss, acc = evaluate_state(_state_of(content["arrays"]), data.geometry, data.x, data.y,
                               loss=loss_spec(cfg), device=device)
    return RecordDict({"metrics": MetricRecord({"num-examples": int(len(data.y)), "eval-loss": loss,
                                                "eval-acc": acc})})


#: Reply content of each message type, computed in this process.
HANDLERS = {"query": query_content, "train": train_content, "evaluate": evaluate_content}


def run_config_of(context: Context) -> tuple[Mapping[str, Any], Path]:
    """The composed run configuration of ``flwr run .`` and the node cache folder."""
    cache_dir = node_cache_dir(context.node_config)
    return config_from_run_config(context.run_config, cache_dir), cache_dir
