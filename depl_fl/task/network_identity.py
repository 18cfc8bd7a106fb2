"""What identifies a user's network for the loss profile's cache: its entries, modules and code.

DepL's own jobs key a cached loss profile on their configuration, which
names the network (``model.arch``, ``model.factory``). A user's own Flower
app hands its network to :func:`strategies.user_app.depl_strategy` as a
:class:`~depl_fl.task.subnets.UserNetwork`, which the configuration does not
see: without this digest a job would reuse the profile measured on the
network the app had before its ``task.py`` changed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any

from depl_fl.task.subnets import UserNetwork, full_network, input_shape_of


def _source(obj: Any) -> str | None:
    """The source code of ``obj``'s class (its ``forward`` among it), when Python can find it."""
    try:
        return inspect.getsource(type(obj))
    except (OSError, TypeError):
        return None


def network_digest(network: UserNetwork) -> dict[str, Any]:
    """``{"name", "digest"}`` of a user's network: a hash of its input shape, state entries, modules and code.

    The digest changes with an entry's name, shape or dtype, a module (``repr``
    lists every layer, activation modules included) and the source of the
    network's class (its ``forward``). A change it cannot see (code outside
    the class, e.g. a helper ``forward`` calls) needs ``profile.force=true``
    or another ``profile.cache_dir``.
    """
    model = full_network(network, seed=0)
    described = {"input_shape": list(input_shape_of(network)),
                 "entries": [[name, list(t.shape), str(t.dtype)] for name, t in model.state_dict().items()],
                 "modules": repr(model), "source": _source(model)}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
    return {"name": network.name, "digest": digest}
