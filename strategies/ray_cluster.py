"""``simulation.ray_address``: find the running Ray cluster it names before ``ray.init`` joins it.

``ray.init(address=HOST:PORT)`` with nothing answering there (a cluster that is
down, a wrong port) retries for minutes, printing a warning every 30 s, and
``auto`` without a cluster raises a multi-line ``ConnectionError``. The job asks
first and stops with one line (:class:`~depl_fl.errors.ScenarioError`, exit
status 2) before anything starts.

``auto`` with no ``RAY_ADDRESS`` and no cluster of a ``ray start`` recorded on
this machine joins *any* Ray instance running here (Ray's rule); with several
(another job's own Ray beside a cluster started with ``--temp-dir``) it would
pick one of them at random, so the job asks for ``HOST:PORT`` instead.

Once Ray runs, :func:`check_room` compares the client resources with the
cluster's nodes: Flower sizes its ClientApp actor pool from the nodes' total
CPUs (``node CPUs / client_num_cpus`` per node), so a client larger than every
node ends the simulation with Flower's multi-line error, and a cluster whose
CPUs other jobs hold leaves the actors waiting in silence.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

from depl_fl.errors import ScenarioError

#: Seconds to wait for the cluster's GCS port to accept a connection.
CONNECT_TIMEOUT_S = 5.0


def _refused(address: str, why: str) -> ScenarioError:
    return ScenarioError(f"simulation.ray_address={address}: {why}")


def resolve_address(address: str) -> str:
    """``HOST:PORT`` of the cluster ``address`` names, as ``ray.init`` would find it.

    ``auto`` is ``RAY_ADDRESS``, else the cluster of the last ``ray start`` on
    this machine, else any Ray instance running here (Ray's own rules).
    """
    from ray._private.services import canonicalize_bootstrap_address

    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        _refuse_ambiguous_auto(address)
    try:
        resolved = canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError):
        raise _refused(address, "no running Ray cluster found on this machine (start one with "
                                "`ray start --head`, or give the head's HOST:PORT)") from None
    if resolved is None:  # pragma: no cover - only for address None/"local", which the schema refuses
        raise _refused(address, "names no cluster")
    return resolved


def _refuse_ambiguous_auto(address: str) -> None:
    """One line when ``auto`` would pick one of several Ray instances at random."""
    from ray._private.services import find_bootstrap_address, find_gcs_addresses

    running = sorted(set(find_gcs_addresses()))
    if len(running) > 1 and find_bootstrap_address(None) is None:
        raise _refused(address, f"{len(running)} Ray instances run on this machine ({', '.join(running)}) "
                                "and none is the cluster of a `ray start` without --temp-dir; give the "
                                "cluster's HOST:PORT (or set RAY_ADDRESS)")


def check_reachable(host_port: str, address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise a one-line :class:`ScenarioError` unless something accepts connections at ``host_port``."""
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise _refused(address, f"no Ray cluster answers at {host_port} ({why}); is its head running "
                                f"(`ray start --head --port {port}`)?") from None


def find_cluster(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """The running cluster's ``HOST:PORT`` for ``simulation.ray_address``; one line if there is none."""
    resolved = resolve_address(address)
    check_reachable(resolved, address, timeout_s)
    return resolved


def actor_room(nodes: Sequence[Mapping[str, float]], client: Mapping[str, float]) -> int:
    """ClientApp actors that ``nodes`` (each a node's resources) hold, counted node by node as Flower does.

    Parameters
    ----------
    nodes : sequence of mappings
        Each node's resources (``CPU``, ``GPU``), totals or what is free.
    client : mapping
        Flower's ``client_resources``: ``num_cpus`` and ``num_gpus`` of one client.

    Returns
    -------
    int
        The actors that fit (``flwr``'s ``pool_size_from_resources``).
    """
    room = 0
    for resources in nodes:
        actors = int(float(resources.get("CPU", 0.0)) / float(client["num_cpus"]))
        gpus = float(client.get("num_gpus") or 0.0)
        if gpus > 0:
            actors = min(actors, int(float(resources.get("GPU", 0.0)) / gpus))
        room += actors
    return room


def room_verdict(nodes: Sequence[Mapping[str, float]], free: Mapping[str, float],
                 client: Mapping[str, float], where: str) -> str | None:
    """Refuse clients no node holds; a warning line when the cluster's free resources hold none now.

    Raises
    ------
    ScenarioError
        No node has the resources of one client (Flower's actor pool would be empty).

    Returns
    -------
    str or None
        A warning when other jobs hold the resources (the actors wait for them), else None.
    """
    want = f"{float(client['num_cpus']):g} CPUs"
    if float(client.get("num_gpus") or 0.0) > 0:
        want += f" and {float(client['num_gpus']):g} GPU"
    if actor_room(nodes, client) == 0:
        have = ", ".join(f"{float(n.get('CPU', 0.0)):g}" for n in nodes) or "none"
        raise ScenarioError(f"simulation.client_num_cpus: no node of {where} has the {want} of one client "
                            f"(CPUs per node: {have}); lower simulation.client_num_cpus / client_num_gpus")
    if actor_room([free], client) == 0:
        return (f"{where}: its free resources hold no client of {want} now ({float(free.get('CPU', 0.0)):g} "
                "CPUs free; other jobs hold the rest): the ClientApp actors wait until they are freed")
    return None


def check_room(client: Mapping[str, float], where: str) -> str | None:
    """:func:`room_verdict` of the Ray cluster this process has joined (after ``ray.init``)."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive") and node.get("Resources")]
    return room_verdict(nodes, ray.available_resources(), client, where)
