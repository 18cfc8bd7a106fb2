"""DepL inside a user's own Flower ServerApp: a DepLStrategy for the user's network and ``test``.

The user's ServerApp builds the strategy for its network and calls ``start``::

    network = UserNetwork(Net, (3, 32, 32), "Net")
    strategy = depl_strategy(network, num_clients=2, compressions=(0.0, 0.5),
                             overrides=["target.loss=1.0", "target.prob=0.8"])
    result = strategy.start(grid, initial_arrays(network),
                            evaluate_fn=evaluate_fn(network, test, testloader))

Everything else comes from DepL's configuration (``conf/``: node classes,
targets, planner, the exploration that measures the loss profile), changed
by Hydra-style ``overrides``. The variants are derived from the network
(:mod:`depl_fl.task.subnets`); a network that cannot be pruned structurally
is refused before the first round. The loss DepL plans on is the loss the
user's ``test`` returns on the server's test loader (the variant trained in
the round is evaluated, as in DepL's own jobs), and the clients minimise
whatever the user's ``train`` minimises: a custom loss goes into those two
functions (``target.loss`` in its units), so the Hydra path's ``model.loss``
is refused here rather than silently ignored.

Which channel groups every variant keeps whole depends on the job's
compressions (:func:`depl_fl.task.subnets.kept_whole`): :func:`depl_strategy`
records them for its network, and :func:`evaluate_fn` cuts the same network to
them, so the variants it evaluates are those the strategy trains (the nodes
learn them from every train message).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flwr.app import ArrayRecord, MetricRecord

from depl_fl.errors import ScenarioError
from depl_fl.task.subnets import UserNetwork
from depl_fl.task.user_update import TestFn, user_evaluate
from strategies.depl_strategy import DepLStrategy, arrays_to_state, state_to_arrays

__all__ = ["UserNetwork", "depl_config", "depl_strategy", "evaluate_fn", "initial_arrays"]

#: The compressions of the strategy built for each network (without its compressions) in this process.
_JOB_COMPRESSIONS: dict[UserNetwork, tuple[float, ...]] = {}


def depl_config(num_clients: int, compressions: Sequence[float] = (0.0, 0.5),
                overrides: Sequence[str] = ()) -> dict[str, Any]:
    """DepL's composed configuration for a user's app (validated; one-line errors)."""
    from depl_fl.runs.runconfig import compose_config

    values = ", ".join(repr(float(c)) for c in compressions)
    cfg = compose_config([f"num_clients={int(num_clients)}", f"+model.compressions=[{values}]",
                          *overrides])
    if (cfg.get("model") or {}).get("loss") is not None:
        raise ScenarioError("model.loss: in your own app the loss is the one your train and test "
                            "functions compute (targets in its units); drop the model.loss override")
    return cfg


def depl_strategy(network: UserNetwork, *, num_clients: int, compressions: Sequence[float] = (0.0, 0.5),
                  overrides: Sequence[str] = ()) -> DepLStrategy:
    """A :class:`DepLStrategy` for the user's network.

    Parameters
    ----------
    network : UserNetwork
        The network builder and one input sample's shape.
    num_clients : int
        Nodes to wait for before planning.
    compressions : sequence of float
        The variants (fraction of channels removed; 0 is the full network).
    overrides : sequence of str
        Hydra overrides of DepL's configuration (``target.loss=...``,
        ``target.prob=...``, ``target.deadline_s=...``, ``clusters=...``).

    Raises
    ------
    depl_fl.errors.ScenarioError
        A bad override, or a network that cannot be pruned structurally (one line).
    """
    from depl_fl.task.geometry import job_compressions
    from depl_fl.task.subnets import plain_network
    from strategies.server_app import build_strategy

    strategy = build_strategy(depl_config(num_clients, compressions, overrides), network=network)
    _JOB_COMPRESSIONS[plain_network(network)] = job_compressions(compressions)
    return strategy


def initial_arrays(network: UserNetwork, seed: int = 0) -> ArrayRecord:
    """The full network's seeded initial state as an ArrayRecord."""
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import full_network

    return state_to_arrays(get_state(full_network(network, seed=seed)))


def evaluate_fn(network: UserNetwork, test: TestFn, testloader: Any,
                device: str = "cpu") -> Callable[[int, ArrayRecord, float], MetricRecord]:
    """``evaluate_fn(server_round, arrays, compression)`` running the user's ``test`` on that variant.

    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when the server has it).
    The variants are those of the strategy :func:`depl_strategy` built for
    ``network`` in this process (cut to its compressions).
    """
    from depl_fl.task.devices import resolve_device
    from depl_fl.task.geometry import with_compressions
    from depl_fl.task.subnets import plain_network

    device = resolve_device(device, field="evaluate_fn device")

    def evaluate(server_round: int, arrays: ArrayRecord, compression: float = 0.0) -> MetricRecord:
        plain = plain_network(network)
        job = with_compressions(plain, _JOB_COMPRESSIONS.get(plain, network.compressions))
        loss, accuracy = user_evaluate(job, arrays_to_state(arrays), float(compression), test,
                                       testloader, device)
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    return evaluate
