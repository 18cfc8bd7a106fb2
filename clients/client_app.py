"""The DepL Flower ClientApp: QUERY, TRAIN and EVALUATE answered by :mod:`clients.handlers`.

With a configuration (simulation, ``depl_fl.main``) every message is handled
in this process. For ``flwr run .`` the configuration comes from the run
config; in a deployment each message is forwarded to the node's warm worker
(:mod:`clients.warm_client`), which runs the same handlers with torch already
imported, and is handled here when the worker is off or unreachable.
"""

from __future__ import annotations

from typing import Any, Mapping

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from clients.handlers import HANDLERS, run_config_of


def make_client_app(cfg: Mapping[str, Any] | None = None) -> ClientApp:
    """Build the ClientApp.

    Parameters
    ----------
    cfg : mapping, optional
        The composed run configuration (plain dict, see :mod:`depl_fl.runs.runconfig`);
        every message is then handled in this process (simulation).
        ``None`` reads it from ``context.run_config`` (``flwr run .``) and
        caches it and the node's partition in the node cache folder; in a
        deployment the message is handled by the node's warm worker
        (:mod:`clients.warm_client`) when it can be reached, else here.
    """
    app = ClientApp()

    def reply(kind: str, msg: Message, context: Context) -> Message:
        if cfg is not None:
            return Message(HANDLERS[kind](msg.content, context, cfg), reply_to=msg)
        from clients import warm_client

        content = warm_client.forward(kind, msg.content, context)
        if content is None:  # worker off or unreachable: same code, in this process
            content = HANDLERS[kind](msg.content, context, *run_config_of(context))
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return reply("query", msg, context)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return reply("train", msg, context)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return reply("evaluate", msg, context)

    return app


#: ClientApp for ``flwr run .`` (configuration from the run config).
app = make_client_app()
