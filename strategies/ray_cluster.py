"""``simulation.ray_address``: find the running Ray cluster it names before ``ray.init`` joins it.

``ray.init(address=HOST:PORT)`` with nothing answering there (a cluster that is
down, a wrong port) retries for minutes, printing a warning every 30 s, and
``auto`` without a cluster raises a multi-line ``ConnectionError``. The job asks
first and stops with one line (:class:`~depl_fl.errors.ScenarioError`, exit
status 2) before anything starts; the line names what answered nothing and the
Ray clusters that do run on this machine.

``auto`` joins only a *cluster*: Ray instances started by ``ray start``, told
apart from a job's own Ray (``ray.init`` without an address, which ends with
its job) by Ray's own record: every ``ray start`` (head or worker node) writes
its cluster's GCS address to ``ray_current_cluster`` in its temp dir (named on
each raylet's command line), and ``ray.init`` records nothing. Ray's own
``auto`` joins *any* instance running here when no ``ray start`` recorded one
in ``/tmp/ray``: another job's Ray, whose actors then compete with the job's
and which goes away with it. ``RAY_ADDRESS`` still comes first (Ray's rule).

Once Ray runs, :func:`check_room` compares the client resources with the
cluster's nodes: Flower sizes its ClientApp actor pool from the nodes' total
CPUs (``node CPUs / client_num_cpus`` per node), so a client larger than every
node ends the simulation with Flower's multi-line error, and a cluster whose
CPUs other jobs hold leaves the actors waiting in silence.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from depl_fl.errors import ScenarioError

#: Seconds to wait for the cluster's GCS port to accept a connection.
CONNECT_TIMEOUT_S = 5.0
#: Ray's temp dir when ``ray start`` / ``ray.init`` get no other (and ``TMPDIR`` is unset).
DEFAULT_TEMP_DIR = "/tmp/ray"
#: The file in a Ray temp dir where every ``ray start`` records its cluster's GCS address.
RECORD = "ray_current_cluster"
#: Memory (bytes) of one ClientApp actor at least: a Python worker with torch and Flower imported
#: (about 210 MiB a Ray worker measured with the digits CNN; larger models need more).
ACTOR_BYTES_FLOOR = 200 * 2**20


def _refused(address: str, why: str) -> ScenarioError:
    return ScenarioError(f"simulation.ray_address={address}: {why}")


@dataclass(frozen=True)
class RayInstance:
    """A Ray instance with a raylet on this machine.

    Attributes
    ----------
    address : str
        Its GCS ``HOST:PORT``, as its raylets name it.
    recorded : bool
        A ``ray start`` recorded it (a cluster); False for a job's own Ray.
    """

    address: str
    recorded: bool


def raylet_flags(cmdline: Sequence[str], default_temp_dir: str = DEFAULT_TEMP_DIR) -> tuple[str, str] | None:
    """``(GCS address, temp dir)`` from a raylet's command line; None for any other process.

    The raylet names both in its own flags and in the worker command it carries
    as one argument, so every argument is split on spaces (as Ray's own search
    for ``--gcs-address`` does).
    """
    if not cmdline or "raylet" not in os.path.basename(cmdline[0]):
        return None
    flags: dict[str, str] = {}
    for arg in cmdline:
        for token in arg.split(" "):
            name, sep, value = token.partition("=")
            if sep and name in ("--gcs-address", "--temp_dir", "--temp-dir") and value not in ("", "None"):
                flags.setdefault(name.replace("_", "-"), value)
    if "--gcs-address" not in flags:
        return None
    return flags["--gcs-address"], flags.get("--temp-dir", default_temp_dir)


def classify(raylets: Iterable[tuple[str, str]], record_in: Callable[[str], str | None]) -> list[RayInstance]:
    """One :class:`RayInstance` per GCS address of ``raylets`` (``(address, temp dir)`` pairs).

    ``record_in(temp_dir)`` is the address a ``ray start`` recorded there, or
    None; an instance is recorded when any of its raylets' temp dirs names it.
    """
    recorded: dict[str, bool] = {}
    for address, temp_dir in raylets:
        recorded[address] = recorded.get(address, False) or record_in(temp_dir) == address
    return [RayInstance(address, recorded[address]) for address in sorted(recorded)]


def _record_in(temp_dir: str) -> str | None:
    try:
        return Path(temp_dir, RECORD).read_text().strip() or None
    except OSError:
        return None


def running_instances() -> list[RayInstance]:
    """The Ray instances with a raylet on this machine, each marked cluster or job's own."""
    import psutil
    from ray._common.utils import get_default_ray_temp_dir

    default_temp_dir = get_default_ray_temp_dir()
    raylets = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            flags = raylet_flags(proc.info["cmdline"] or [], default_temp_dir)
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if flags:
            raylets.append(flags)
    return classify(raylets, _record_in)


def choose_auto(instances: Sequence[RayInstance], recorded_default: str | None) -> str:
    """The GCS address ``auto`` joins among ``instances``; one line when it is none or unclear.

    Parameters
    ----------
    instances : sequence of RayInstance
        The Ray instances on this machine (:func:`running_instances`).
    recorded_default : str or None
        What the last ``ray start`` without ``--temp-dir`` recorded in ``/tmp/ray``
        (Ray's own choice among several clusters), also when it no longer runs.

    Raises
    ------
    ScenarioError
        No cluster runs here (only jobs' own Ray, or nothing), or several do and
        none is the one ``/tmp/ray`` records.
    """
    clusters = [i.address for i in instances if i.recorded]
    own = [i.address for i in instances if not i.recorded]
    if recorded_default is not None and recorded_default in clusters:
        return recorded_default
    if len(clusters) == 1:
        return clusters[0]
    if clusters:
        raise _refused("auto", f"{len(clusters)} Ray clusters run on this machine ({', '.join(clusters)}) "
                               "and none is the one the last `ray start` without --temp-dir recorded; give "
                               "the cluster's HOST:PORT (or set RAY_ADDRESS)")
    if own:
        raise _refused("auto", f"no Ray cluster runs on this machine, only {_own(own)} (started by "
                               "`ray.init`, each ends with its job), which auto does not join; start a "
                               "cluster (`ray start --head`) or give its HOST:PORT")
    stale = (f" (the last `ray start` recorded {recorded_default} in Ray's temp dir ({RECORD}), which "
             "no longer runs)") if recorded_default else ""
    raise _refused("auto", f"no running Ray cluster found on this machine{stale}; start one with "
                           "`ray start --head`, or give the head's HOST:PORT")


def _own(addresses: Sequence[str]) -> str:
    """``1 job's own Ray (A)`` / ``2 jobs' own Ray instances (A, B)``."""
    if len(addresses) == 1:
        return f"1 job's own Ray ({addresses[0]})"
    return f"{len(addresses)} jobs' own Ray instances ({', '.join(addresses)})"


def resolve_address(address: str) -> str:
    """``HOST:PORT`` of the cluster ``address`` names.

    ``auto`` is ``RAY_ADDRESS`` if set, else the cluster :func:`choose_auto`
    picks among the Ray instances here; ``HOST:PORT`` is Ray's canonical form
    (``127.0.0.1`` and ``localhost`` become this machine's address).
    """
    from ray._private.services import canonicalize_bootstrap_address, find_bootstrap_address

    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        return choose_auto(running_instances(), find_bootstrap_address(None))
    try:
        resolved = canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError):  # the schema checked HOST:PORT, so RAY_ADDRESS for auto
        raise _refused(address, f"RAY_ADDRESS={os.environ.get('RAY_ADDRESS', '')!r} is not a Ray "
                                "cluster's HOST:PORT; fix or unset it") from None
    if resolved is None:  # pragma: no cover - only for address None/"local", which the schema refuses
        raise _refused(address, "names no cluster")
    return resolved


def unreachable_line(address: str, given: str, host_port: str, why: str,
                     instances: Sequence[RayInstance], named_by: str = "") -> str:
    """The one line for ``simulation.ray_address=address`` when nothing answers at ``host_port``.

    ``given`` is the address as the user wrote it (the value, or ``RAY_ADDRESS``
    for ``auto``: ``named_by``), ``host_port`` the one Ray connects to; the line
    ends with the clusters that do run on this machine, so a wrong port shows the right one.
    """
    port = host_port.rpartition(":")[2]
    tried = given if given == host_port else f"{given} (Ray connects to {host_port})"
    if named_by:
        tried += f", which {named_by} names"
    clusters = [i.address for i in instances if i.recorded]
    own = [i.address for i in instances if not i.recorded]
    if clusters:
        here = f"the Ray cluster(s) running on this machine: {', '.join(clusters)}"
    else:
        here = "no Ray cluster runs on this machine"
        if own:
            here += f", only {_own(own)}"
    fix = "check the host name" if why.startswith("cannot resolve") else \
        f"start its head (`ray start --head --port {port}`)"
    return (f"simulation.ray_address={address}: no Ray cluster answers at {tried} ({why}); {here}; give a "
            f"running cluster's HOST:PORT or {fix}")


def check_reachable(host_port: str, address: str, timeout_s: float = CONNECT_TIMEOUT_S,
                    given: str | None = None, named_by: str = "") -> None:
    """Raise a one-line :class:`ScenarioError` unless something accepts connections at ``host_port``.

    ``address`` is the value of ``simulation.ray_address``, ``given`` the address
    it stands for as written (default ``address``), ``named_by`` where that came from.
    """
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.gaierror):
            why = f"cannot resolve {host}: {why}"
        raise ScenarioError(unreachable_line(address, given or address, host_port, why,
                                             running_instances(), named_by)) from None


def find_cluster(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """The address ``ray.init`` is to join for ``simulation.ray_address``; one line if no cluster answers.

    ``auto`` becomes the ``HOST:PORT`` it stands for (``ray.init("auto")`` would
    apply Ray's own rule again, which may pick another job's Ray); ``HOST:PORT``
    stays as given.
    """
    resolved = resolve_address(address)
    if address != "auto":
        check_reachable(resolved, address, timeout_s)
        return address
    env = os.environ.get("RAY_ADDRESS")
    if env:
        check_reachable(resolved, address, timeout_s, given=env, named_by="RAY_ADDRESS")
    else:
        check_reachable(resolved, address, timeout_s, given=resolved, named_by="`ray start`'s record")
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
        No node has the resources of one client (Flower's actor pool would be empty),
        or a node would get more ClientApp actors than its Ray memory holds
        (:func:`crowded_node`).

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
    crowded = crowded_node(nodes, client)
    if crowded is not None:
        cpus, actors, memory = crowded
        share = float(client["num_cpus"])
        raise ScenarioError(
            f"simulation.client_num_cpus={share:g}: Flower would start {actors} ClientApp actors on a node "
            f"of {where} ({cpus:g} CPUs / {share:g}; as many whatever the number of clients), each a Python "
            f"process of at least {ACTOR_BYTES_FLOOR / 2**20:.0f} MiB, more than the node's "
            f"{memory / 2**30:.1f} GiB of Ray memory; raise simulation.client_num_cpus (to at least "
            f"{cpus * ACTOR_BYTES_FLOOR / memory:.2g} there)")
    if actor_room([free], client) == 0:
        return (f"{where}: its free resources hold no client of {want} now ({float(free.get('CPU', 0.0)):g} "
                "CPUs free; other jobs hold the rest): the ClientApp actors wait until they are freed")
    return None


def crowded_node(nodes: Sequence[Mapping[str, float]],
                 client: Mapping[str, float]) -> tuple[float, int, float] | None:
    """``(CPUs, actors, memory bytes)`` of the first node whose actors cannot all fit its Ray memory.

    Flower starts ``node CPUs / client_num_cpus`` actors on each node before the
    first round, however few clients the job has, so a tiny CPU share (0.01 on
    2 CPUs: 200 processes) exhausts the machine's memory. A node without a
    ``memory`` resource is not judged.
    """
    for resources in nodes:
        memory = float(resources.get("memory", 0.0))
        actors = actor_room([resources], client)
        if memory > 0 and actors * ACTOR_BYTES_FLOOR > memory:
            return float(resources.get("CPU", 0.0)), actors, memory
    return None


def check_room(client: Mapping[str, float], where: str) -> str | None:
    """:func:`room_verdict` of the Ray cluster this process has joined (after ``ray.init``)."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive") and node.get("Resources")]
    return room_verdict(nodes, ray.available_resources(), client, where)
