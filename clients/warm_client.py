"""Shim side of the warm per-node trainer: forward a message to the node's worker.

Flower 1.41 starts one ``flwr-clientapp`` process per message; importing
torch alone costs it about 2 CPU-s, more than the training. In a deployment
the ClientApp is therefore a thin shim (flwr + numpy): it sends the message
content to a long-lived worker of its node (:mod:`clients.warm_worker`) over a
Unix socket in a private folder (mode 0700) and returns the worker's reply.
The worker keeps torch imported and the node's data and configuration loaded,
and runs exactly the handlers of :mod:`clients.handlers`.

The socket's name is a hash of the app's code and configuration files, the
node config, the node cache folder, the Python interpreter and the SuperNode
(the ClientApp's parent process, with its start time): an updated app never
talks to an old worker, and every SuperNode has its own. The shim starts the
worker (detached, a new session) when the socket is missing or stale, under a
lock file so that concurrent shims start one. When the worker cannot be
started, the node handles its messages in the ClientApp process for the next
10 minutes (logged once, a ``.failed`` marker next to the socket); when it dies during a
message, that message is handled in the process (logged) and the next one
starts a new worker.

Node config keys (``flower-supernode --node-config``):

``warm-worker``          ``true``/``false``; default: on in a deployment
                         (the process is ``flwr-clientapp``), off elsewhere
``warm-worker-idle-s``   the worker exits after this many idle seconds (600)
``warm-worker-start-s``  how long a shim waits for a new worker's socket (60)
``warm-worker-reply-s``  how long a shim waits for the worker's reply (900); a
                         worker that neither replies nor dies in that time is
                         taken as hung: the message is handled in the process,
                         the socket is removed so the next message starts a new
                         worker, and the hung one is killed
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from clients.warm_protocol import (
    WireError,
    code_digest,
    private_dir,
    process_identity,
    records_from_wire,
    records_to_wire,
    recv_frame,
    send_frame,
    socket_path,
)
from depl_fl.diskcache import node_cache_dir

LOG = logging.getLogger("depl_fl.client.warm")
ENABLE_KEY = "warm-worker"
IDLE_KEY = "warm-worker-idle-s"
START_KEY = "warm-worker-start-s"
REPLY_KEY = "warm-worker-reply-s"
DEFAULT_IDLE_S = 600.0
DEFAULT_START_S = 60.0
DEFAULT_REPLY_S = 900.0
#: How long a failed start keeps a node in the ClientApp process before it tries again.
RETRY_AFTER_S = 600.0


class WorkerTaskError(RuntimeError):
    """The worker ran the handler and it raised (the ClientApp replies with an error)."""


@dataclass(frozen=True)
class Endpoint:
    """Where a node's worker listens and what it needs to start."""

    path: Path
    root: Path
    watch_pid: int

    @property
    def failed_marker(self) -> Path:
        return self.path.with_suffix(".failed")

    @property
    def log_file(self) -> Path:
        return self.path.with_suffix(".log")


def enabled(node_config: Mapping[str, Any], argv0: str | None = None) -> bool:
    """Whether this node uses a warm worker (node config ``warm-worker``, default: deployment only)."""
    value = node_config.get(ENABLE_KEY, "auto")
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return Path(sys.argv[0] if argv0 is None else argv0).name == "flwr-clientapp"
        if text in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return text in ("1", "true", "yes", "on")
        raise ValueError(f"node config {ENABLE_KEY}: expected true, false or auto, got {value!r}")
    return bool(value)


def app_root() -> Path:
    """The folder that holds the ``clients`` package (the installed app or the checkout)."""
    import clients

    return Path(clients.__file__).resolve().parent.parent


def endpoint(node_config: Mapping[str, Any], watch_pid: int | None = None) -> Endpoint:
    """The worker endpoint of this node, app code and SuperNode (``watch_pid``: default the parent)."""
    watch = os.getppid() if watch_pid is None else watch_pid
    cache = node_cache_dir(node_config)
    root = app_root()
    key = {"node-config": dict(node_config), "cache": str(cache), "supernode": process_identity(watch)}
    return Endpoint(socket_path(private_dir(cache / "workers"), code_digest(root), key), root, watch)


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        return sock
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def spawn(ep: Endpoint, idle_s: float) -> subprocess.Popen:
    """Start the worker of ``ep`` detached from this process (its own session)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ep.root), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "clients.warm_worker", "--socket", str(ep.path),
           "--idle-s", str(idle_s), "--watch-pid", str(ep.watch_pid)]
    with open(ep.log_file, "ab") as log:
        return subprocess.Popen(cmd, cwd=ep.root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_socket(ep: Endpoint, proc: subprocess.Popen, start_s: float) -> socket.socket | None:
    deadline = time.monotonic() + start_s
    while time.monotonic() < deadline:
        conn = _connect(ep.path)
        if conn is not None:
            return conn
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def _recently_failed(ep: Endpoint) -> bool:
    try:
        return time.time() - ep.failed_marker.stat().st_mtime < RETRY_AFTER_S
    except FileNotFoundError:
        return False


def connect(ep: Endpoint, node_config: Mapping[str, Any]) -> socket.socket | None:
    """A connection to the node's worker, started if needed; ``None`` when it cannot be had."""
    conn = _connect(ep.path)
    if conn is not None or _recently_failed(ep):
        return conn
    with _locked(ep.path.with_suffix(".lock")):
        conn = _connect(ep.path)  # another shim may have started it meanwhile
        if conn is not None:
            return conn
        ep.path.unlink(missing_ok=True)  # a stale socket: its worker is gone
        proc = spawn(ep, float(node_config.get(IDLE_KEY, DEFAULT_IDLE_S)))
        conn = _wait_for_socket(ep, proc, float(node_config.get(START_KEY, DEFAULT_START_S)))
        if conn is None:
            if proc.poll() is None:
                proc.kill()
            reason = f"the warm worker did not start (exit status {proc.wait()}, log {ep.log_file})"
            ep.failed_marker.write_text(reason + "\n")
            LOG.warning("%s; this node handles its messages in the ClientApp process", reason)
        return conn


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def retire_hung_worker(ep: Endpoint, inode: int | None) -> None:
    """Remove a hung worker's socket (the next message starts a new one) and kill it.

    ``inode`` is the socket file the shim talked to: when another shim has
    already replaced the worker, the new one is left alone.
    """
    pid_file = ep.path.with_suffix(".pid")
    with _locked(ep.path.with_suffix(".lock")):
        if inode is None or _inode(ep.path) != inode:
            return
        ep.path.unlink(missing_ok=True)
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return
        pid_file.unlink(missing_ok=True)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _request(kind: str, content: Any, context: Any) -> tuple[dict[str, Any], list]:
    records, arrays = records_to_wire(content)
    header = {"kind": kind, "records": records, "run_id": int(context.run_id),
              "node_id": int(context.node_id), "node_config": dict(context.node_config),
              "run_config": dict(context.run_config)}
    return header, arrays


def forward(kind: str, content: Any, context: Any) -> Any | None:
    """The reply content computed by the node's warm worker, or ``None`` to handle it here.

    Raises :class:`WorkerTaskError` when the handler itself failed in the
    worker (the same error the ClientApp would raise in process).
    """
    if not enabled(context.node_config):
        return None
    try:
        header, arrays = _request(kind, content, context)
        ep = endpoint(context.node_config)
        conn = connect(ep, context.node_config)
    except (OSError, WireError) as exc:
        LOG.warning("warm worker unavailable (%s); handling the message in the ClientApp process", exc)
        return None
    if conn is None:
        return None
    inode = _inode(ep.path)
    try:
        with conn:
            conn.settimeout(float(context.node_config.get(REPLY_KEY, DEFAULT_REPLY_S)))
            send_frame(conn, header, arrays)
            reply, out_arrays = recv_frame(conn)
    except TimeoutError:
        LOG.warning("warm worker %s sent no reply to a %s message in %s s; handling it in the ClientApp "
                    "process, the next message starts a new worker", ep.path.name, kind,
                    context.node_config.get(REPLY_KEY, DEFAULT_REPLY_S))
        retire_hung_worker(ep, inode)
        return None
    except (OSError, WireError) as exc:
        LOG.warning("warm worker %s failed during a %s message (%s); handling it in the ClientApp process",
                    ep.path.name, kind, exc)
        return None
    if not reply.get("ok"):
        raise WorkerTaskError(str(reply.get("error", "unknown error in the warm worker")))
    return records_from_wire(reply["records"], out_arrays)
