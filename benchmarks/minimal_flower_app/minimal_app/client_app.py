"""ClientApp: one gradient step of least squares on 200 random samples (numpy only)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Receive the weights, take one step on local random data, send them back."""
    w = msg.content["arrays"]["w"].numpy()
    rng = np.random.default_rng(int(msg.content["config"]["server-round"]))
    x = rng.normal(size=(200, w.size))
    y = x @ np.arange(w.size, dtype=float)
    w = w - 0.1 * x.T @ (x @ w - y) / len(y)
    loss = float(np.mean((x @ w - y) ** 2))
    return Message(RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                               "metrics": MetricRecord({"num-examples": len(y), "train-loss": loss})}),
                   reply_to=msg)
