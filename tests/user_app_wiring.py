"""The ClientApp of a user's own Flower app around a :class:`clients.user_app.DepLClient`, for the tests.

What a user writes (see the module docstring of :mod:`clients.user_app`): a
``query`` handler and a ``train`` handler that hand the message, the context
and the node's data loader to the DepL client.
"""

from __future__ import annotations

from typing import Any, Callable

from flwr.clientapp import ClientApp
from torch import nn

from clients.user_app import DepLClient


def user_client_app(client: DepLClient, loader: Callable[[], Any], *, train: bool = True) -> ClientApp:
    """A ClientApp whose handlers call ``client`` with ``loader()``; ``train=False``: query only."""
    app = ClientApp()

    @app.query()
    def query(msg, context):
        return client.query(msg, context, loader())

    if train:
        @app.train()
        def train_(msg, context):
            return client.train(msg, context, loader())

    return app


def small_mlp() -> nn.Module:
    """4 inputs, 8 hidden units, 3 classes."""
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
