"""ClientApp: DepL's messages answered with the app's own network, data and ``train``."""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from clients.user_app import DepLClient
from depl_fl.task.subnets import UserNetwork
from quickstart_depl.task import Net, load_data, train

app = ClientApp()
depl = DepLClient(UserNetwork(Net, (1, 8, 8), "Net"), train)


def _trainloader(context: Context):
    return load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))[0]


@app.query()
def query(msg: Message, context: Context) -> Message:
    return depl.query(msg, context, _trainloader(context))


@app.train()
def train_(msg: Message, context: Context) -> Message:
    return depl.train(msg, context, _trainloader(context))
