"""DepL inside a user's own Flower ClientApp: answer DepL's messages with the user's ``train``.

A ClientApp of Flower's quickstart shape hands DepL's QUERY and TRAIN
messages to a :class:`DepLClient` with its own data loader::

    depl = DepLClient(UserNetwork(Net, (3, 32, 32)), train)

    @app.query()
    def query(msg, context):
        return depl.query(msg, context, load_data(context)[0])

    @app.train()
    def train_(msg, context):
        return depl.train(msg, context, load_data(context)[0])

QUERY is answered with the node's ``partition-id``, ``num-samples`` (the
loader's samples) and ``cluster`` (node config ``cluster=``, else empty: the
server then assigns one by the split of its configured node classes,
``clusters.classes``' fractions in partition-id order, logs which and marks it
``"cluster-source": "assigned"`` in its properties,
:func:`depl_fl.orchestration.scenario_builder.fill_clusters`). TRAIN carries the
planned variant's entries only, the job's compressions and the layers the
server keeps whole; the helper rebuilds that sub-network from the network cut
to those compressions (checking that it keeps the same layers whole,
:func:`depl_fl.task.subnets.check_kept_whole`), loads them, runs the user's
``train(net, trainloader, epochs, device)`` and replies with the trained
entries and ``num-examples``, ``train-time-s`` and ``train-loss`` (left out
when ``train`` returns nothing). The entries go back as CPU numpy arrays
wherever ``train`` left the network (:func:`get_state
<depl_fl.task.models.get_state>`).

The device is the helper's ``device`` (``cpu``, ``cuda``, ``cuda:N`` or
``auto``: CUDA when this node has it, as in Flower's quickstart), unless the
node config sets its own (``--node-config "device='cuda'"``), which wins: the
node's operator knows its machine (:func:`depl_fl.task.devices.node_device`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from depl_fl.task.devices import node_device
from depl_fl.task.geometry import with_compressions
from depl_fl.task.subnets import UserNetwork, check_kept_whole
from depl_fl.task.user_update import TrainFn, sample_count, user_local_update


class DepLClient:
    """Answers DepL's messages on a node with the user's network, ``train`` function and data.

    Parameters
    ----------
    network : UserNetwork
        The same network description as the server's (same builder, same input shape).
    train : callable
        ``train(net, trainloader, epochs, device)``; may return the mean train loss.
    device : str
        Torch device for training: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``
        (a node config ``device`` wins over it).
    """

    def __init__(self, network: UserNetwork, train: TrainFn, device: str = "cpu") -> None:
        self.network = network
        self.train_fn = train
        self.device = device

    def query(self, msg: Message, context: Context, trainloader: Any) -> Message:
        """This node's properties: partition id, number of samples, cluster."""
        props = {"partition-id": int(context.node_config.get("partition-id", 0)),
                 "num-samples": sample_count(trainloader),
                 "cluster": str(context.node_config.get("cluster", ""))}
        return Message(RecordDict({"properties": ConfigRecord(props)}), reply_to=msg)

    def train(self, msg: Message, context: Context, trainloader: Any) -> Message:
        """Train the received sub-network with the user's ``train``; reply with its trained entries."""
        import torch

        torch.set_num_threads(1)
        conf = msg.content["config"]
        sub_state = {name: arr.numpy() for name, arr in msg.content["arrays"].items()}
        # The node learns the job's compressions from the message; the groups kept whole follow.
        network = with_compressions(self.network, conf.get("compressions", ()))
        if "kept-whole" in conf:
            check_kept_whole(network, list(conf["kept-whole"]))
        result = user_local_update(network, sub_state, float(conf.get("compression", 0.0)),
                                   self.train_fn, trainloader, int(conf.get("local-epochs", 1)),
                                   node_device(self.device, context.node_config))
        arrays = ArrayRecord({k: Array(np.require(v, requirements="C"))
                              for k, v in result.kept_state.items()})
        values = {"num-examples": result.num_examples, "train-time-s": result.train_time_s}
        if result.train_loss is not None:  # a train function that returns nothing reports no loss
            values["train-loss"] = result.train_loss
        metrics = MetricRecord(values)
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)
