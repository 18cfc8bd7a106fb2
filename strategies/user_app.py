"""DepL inside a user's own Flower ServerApp: a DepLStrategy for the user's network and ``test``.

The user's ServerApp builds the strategy for its network, and the evaluate
function from that strategy, then calls ``start``::

    network = UserNetwork(Net, (3, 32, 32), "Net")
    strategy = depl_strategy(network, num_clients=2, compressions=(0.0, 0.5),
                             overrides=["target.loss=1.0", "target.prob=0.8"])
    result = strategy.start(grid, initial_arrays(network),
                            evaluate_fn=evaluate_fn(strategy, test, testloader))

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
compressions (:func:`depl_fl.task.subnets.kept_whole`), so the evaluate
function is built from the strategy, which holds its network cut to them
(:attr:`DepLStrategy.job_network <strategies.depl_strategy.DepLStrategy>`): the
variants it evaluates are those that strategy trains (the nodes learn them from
every train message), whatever other strategy the process built for the same
network and in whatever order. Nothing is recorded between the two calls, so
the network alone does not say which variants to evaluate and
``evaluate_fn(network, ...)`` is refused in one line. (The other way, a
network that carries its compressions, would split the job's configuration
between the network and the strategy, and the nodes' network carries none.)
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

#: How a refusal advises training the full network alone: DepL's override, and this app's argument.
FULL_ONLY_OVERRIDE, FULL_ONLY_ARGUMENT = "model.compressions=[0]", "depl_strategy(..., compressions=(0.0,))"

#: The variants of a user's app when neither ``compressions`` nor a ``model.compressions`` override does.
DEFAULT_COMPRESSIONS = (0.0, 0.5)


def depl_config(num_clients: int, compressions: Sequence[float] | None = None,
                overrides: Sequence[str] = ()) -> dict[str, Any]:
    """DepL's composed configuration for a user's app (validated; one-line errors).

    The variants are given once: by ``compressions`` or by a
    ``model.compressions`` override (with or without ``+``); given both, they
    must be the same list, else one line names both (neither silently wins).
    Neither given: :data:`DEFAULT_COMPRESSIONS`. ``model.variants`` is refused:
    here the variants are compressions of the user's network; so is a
    ``num_clients`` override other than ``num_clients``, and every key a user's
    app does not read (``train.lr``, ``dataset.*``, ``faults.*``, ...:
    :data:`depl_fl.runs.mode_keys.RULES` for :data:`~depl_fl.runs.mode_keys.USER_APP`).
    """
    from depl_fl.runs.mode_keys import USER_APP
    from depl_fl.runs.runconfig import compose_config

    variant_keys = {"model.compressions", "model.variants"}
    written = [key for key in map(_override_key, overrides) if key in variant_keys]
    if "model.variants" in written:
        raise ScenarioError("model.variants: in your own app the variants are compressions of your network; "
                            "give them as depl_strategy(..., compressions=(0.0, 0.5)) instead")
    asked = None if compressions is None else [float(c) for c in compressions]
    values = ", ".join(repr(c) for c in (DEFAULT_COMPRESSIONS if asked is None else asked))
    # The user's own override comes after this one, so write it as a change, not a second add.
    own = [o[1:] if o.startswith("+model.compressions=") else o for o in overrides]
    cfg = compose_config([f"num_clients={int(num_clients)}", f"+model.compressions=[{values}]", *own],
                         entry=USER_APP)
    if int(cfg["num_clients"]) != int(num_clients):
        raise ScenarioError(f"num_clients: depl_strategy(num_clients={int(num_clients)}) and the override "
                            f"num_clients={cfg['num_clients']} disagree; give it once, as the argument")
    if (cfg.get("model") or {}).get("loss") is not None:
        raise ScenarioError("model.loss: in your own app the loss is the one your train and test "
                            "functions compute (targets in its units); drop the model.loss override")
    if cfg["model"].get("compressions") is None:
        raise ScenarioError("~model.compressions: in your own app the variants are compressions of your "
                            "network; give them as depl_strategy(..., compressions=(0.0, 0.5)) instead")
    composed = [float(c) for c in cfg["model"]["compressions"]]
    if asked is not None and written and composed != asked:
        raise ScenarioError(f"compressions: depl_strategy(compressions={tuple(asked)}) and the override "
                            f"model.compressions={composed} name different variants; give them once "
                            "(drop one of the two)")
    return cfg


def _override_key(override: str) -> str:
    """The dotted key an override ``[+|++|~]key=value`` names."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def depl_strategy(network: UserNetwork, *, num_clients: int, compressions: Sequence[float] | None = None,
                  overrides: Sequence[str] = ()) -> DepLStrategy:
    """A :class:`DepLStrategy` for the user's network.

    Parameters
    ----------
    network : UserNetwork
        The network builder and one input sample's shape.
    num_clients : int
        Nodes to wait for before planning.
    compressions : sequence of float, optional
        The variants (fraction of channels removed; 0 is the full network).
        Not given: a ``model.compressions`` override's, else ``(0.0, 0.5)``.
        Given together with a ``model.compressions`` override (the run
        config's overrides, say), both must name the same variants.
    overrides : sequence of str
        Hydra overrides of DepL's configuration (``target.loss=...``,
        ``target.prob=...``, ``target.deadline_s=...``, ``clusters=...``).

    Raises
    ------
    depl_fl.errors.ScenarioError
        A bad override, ``compressions`` and a ``model.compressions`` override
        that disagree, or a network that cannot be pruned structurally (one line).
    """
    from strategies.server_app import build_strategy

    try:
        return build_strategy(depl_config(num_clients, compressions, overrides), network=network)
    except ScenarioError as exc:  # the variants' advice in this app's own words: the argument
        raise ScenarioError(str(exc).replace(FULL_ONLY_OVERRIDE, FULL_ONLY_ARGUMENT)) from None


def initial_arrays(network: UserNetwork, seed: int = 0) -> ArrayRecord:
    """The full network's seeded initial state as an ArrayRecord."""
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import full_network

    return state_to_arrays(get_state(full_network(network, seed=seed)))


def evaluate_fn(strategy: DepLStrategy, test: TestFn, testloader: Any,
                device: str = "cpu") -> Callable[[int, ArrayRecord, float], MetricRecord]:
    """``evaluate_fn(server_round, arrays, compression)`` running the user's ``test`` on that variant.

    Parameters
    ----------
    strategy : DepLStrategy
        The strategy :func:`depl_strategy` built: its network, cut to its
        compressions, gives the variants evaluated.
    test : callable
        ``test(net, testloader, device) -> (loss, accuracy)``.
    testloader : object
        The server's test loader, handed to ``test``.
    device : str
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when the server has it).

    Raises
    ------
    depl_fl.errors.ScenarioError
        ``strategy`` is not a strategy built for a user's network (one line).
    """
    from depl_fl.task.devices import resolve_device

    network = _job_network(strategy)
    device = resolve_device(device, field="evaluate_fn device")

    def evaluate(server_round: int, arrays: ArrayRecord, compression: float = 0.0) -> MetricRecord:
        loss, accuracy = user_evaluate(network, arrays_to_state(arrays), float(compression), test,
                                       testloader, device)
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    return evaluate


def _job_network(strategy: Any) -> UserNetwork:
    """The user's network cut to the compressions ``strategy`` trains at (else a one-line error)."""
    if isinstance(strategy, UserNetwork):
        raise ScenarioError(f"evaluate_fn takes the strategy depl_strategy built for {strategy.name}, "
                            "not the network: its variants depend on that strategy's compressions; "
                            "write evaluate_fn(strategy, test, testloader)")
    network = strategy.job_network if isinstance(strategy, DepLStrategy) else None
    if not isinstance(network, UserNetwork):
        raise ScenarioError(f"evaluate_fn takes the strategy depl_strategy built for a user's network, got "
                            f"{type(strategy).__name__}")
    return network
