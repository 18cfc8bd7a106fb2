"""``simulation.ray_address``: find the running Ray cluster it names before ``ray.init`` joins it.

``ray.init(address=HOST:PORT)`` with nothing answering there (a cluster that is
down, a wrong port) retries for minutes, printing a warning every 30 s, and
``auto`` without a cluster raises a multi-line ``ConnectionError``. The job asks
first and stops with one line (:class:`~depl_fl.errors.ScenarioError`, exit
status 2) before anything starts.
"""

from __future__ import annotations

import socket

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

    try:
        resolved = canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError):
        raise _refused(address, "no running Ray cluster found on this machine (start one with "
                                "`ray start --head`, or give the head's HOST:PORT)") from None
    if resolved is None:  # pragma: no cover - only for address None/"local", which the schema refuses
        raise _refused(address, "names no cluster")
    return resolved


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
