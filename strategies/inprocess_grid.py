"""A small in-process Grid: the ServerApp strategy talks to ClientApps in the same process.

It implements Flower's :class:`flwr.serverapp.Grid` by calling the ClientApp
directly for every message, one node at a time, with one persistent
:class:`~flwr.app.Context` per node (``partition-id``/``num-partitions`` in
the node config, as in Flower's simulation). Exceptions raised by the
ClientApp become error replies, like in Flower's simulation runtime. Used by
``simulation.backend=inprocess``, by the profiling pilots' tests and by the
test-suite (subclass it to drop messages or corrupt replies).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

ClientCallable = Callable[[Message, Context], Message]


class InProcessGrid(Grid):
    """Deliver messages synchronously to an in-process ClientApp.

    Parameters
    ----------
    client_app : callable
        A :class:`flwr.clientapp.ClientApp` (or any ``(message, context) -> reply``).
    num_nodes : int
        Number of simulated SuperNodes (partition ids ``0..num_nodes-1``).
    node_configs : sequence of mapping, optional
        Extra node config entries per partition (e.g. ``{"cluster": "A"}``).
    run_config : mapping, optional
        The run config every node's Context carries.
    first_node_id : int
        Node ids are ``first_node_id + partition_id``.
    """

    def __init__(self, client_app: ClientCallable, num_nodes: int,
                 node_configs: Iterable[Mapping[str, Any]] | None = None,
                 run_config: Mapping[str, Any] | None = None, run_id: int = 1,
                 first_node_id: int = 1001) -> None:
        self.client_app = client_app
        extra = list(node_configs) if node_configs is not None else [{}] * num_nodes
        self.contexts: dict[int, Context] = {}
        for pid in range(num_nodes):
            node_config = {"partition-id": pid, "num-partitions": num_nodes, **dict(extra[pid])}
            node_id = first_node_id + pid
            self.contexts[node_id] = Context(run_id=run_id, node_id=node_id, node_config=node_config,
                                             state=RecordDict(), run_config=dict(run_config or {}))
        self._run: Any = None
        # Flower's runtimes set the identity of the server task; Message() needs it.
        TaskIdentity.task_id = 1
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID
        self._ids = itertools.count(1)
        self._pending: dict[str, Message] = {}
        self.sent: list[Message] = []

    # Grid interface ------------------------------------------------------
    def set_run(self, run: Any) -> None:  # noqa: D102 - Grid API
        self._run = run

    @property
    def run(self) -> Any:  # noqa: D102 - Grid API
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:  # noqa: D102 - Grid API
        return Message(content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102 - Grid API
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102 - Grid API
        ids = []
        for msg in messages:
            msg_id = f"m{next(self._ids)}-{uuid4().hex[:8]}"
            msg.metadata.__dict__["_message_id"] = msg_id
            self.sent.append(msg)
            reply = self.deliver(msg)
            if reply is not None:
                reply.metadata.__dict__["_message_id"] = str(uuid4())
                self._pending[msg_id] = reply
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Replies to ``message_ids`` that arrived, in source-node order.

        Flower's FedAvg sums float32 arrays in reply order and samples nodes
        with an unseeded ``random``; returning replies in node order keeps
        in-process runs bit-for-bit reproducible.
        """
        replies = [self._pending.pop(i) for i in message_ids if i in self._pending]
        return sorted(replies, key=lambda reply: reply.metadata.src_node_id)

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:  # noqa: D102 - Grid API
        return self.pull_messages(self.push_messages(messages))

    # Delivery ------------------------------------------------------------
    def deliver(self, msg: Message) -> Message | None:
        """Run the ClientApp of the destination node on ``msg``; ``None`` = no reply."""
        context = self.contexts.get(msg.metadata.dst_node_id)
        if context is None:
            return None
        try:
            return self.client_app(msg, context)
        except Exception as exc:  # like Flower's runtime: a raising ClientApp gives an error reply
            return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                 reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)
