"""The warm per-node trainer: a long-lived process that handles a node's messages.

Started by a ClientApp shim (:mod:`clients.warm_client`) as::

    python -m clients.warm_worker --socket PATH --idle-s 600 --watch-pid PID

It binds the Unix socket ``PATH`` (in a mode-0700 folder), imports torch and
the training code once, then serves one connection at a time (so one message
at a time per node: the accept loop is the lock). Each connection carries one
request (the message type, its content, the node and run config; see
:mod:`clients.warm_protocol`) and gets one reply, computed by the very
handlers the ClientApp runs in process (:data:`clients.handlers.HANDLERS`),
with the composed configuration and the node's data kept in memory between
messages. A handler that raises produces an error reply, never a dead worker.

It exits after ``--idle-s`` seconds without a message, when the process
``--watch-pid`` (the SuperNode's SuperExec) is gone, or on SIGTERM/SIGINT; it
removes its socket first and still answers the connections already queued.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, Callable

from clients.warm_protocol import WireError, records_from_wire, records_to_wire, recv_frame, send_frame

POLL_S = 0.5


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def bind(path: Path) -> socket.socket | None:
    """Listen on ``path``; ``None`` when a live worker already listens there."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
    except OSError:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            probe.close()
            server.close()
            return None  # someone else serves this node already
        except OSError:
            probe.close()
        path.unlink(missing_ok=True)  # stale socket of a dead worker
        server.bind(str(path))
    os.chmod(path, 0o600)
    server.listen(16)
    return server


def _peer_uid(conn: socket.socket) -> int | None:
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def handle_request(header: dict[str, Any], arrays: list) -> tuple[dict[str, Any], list]:
    """Run the ClientApp handler of one request; the reply header and arrays."""
    from flwr.app import Context, RecordDict

    from clients.handlers import HANDLERS, run_config_of

    context = Context(run_id=int(header["run_id"]), node_id=int(header["node_id"]),
                      node_config=dict(header["node_config"]), state=RecordDict(),
                      run_config=dict(header["run_config"]))
    content = records_from_wire(header["records"], arrays)
    reply = HANDLERS[str(header["kind"])](content, context, *run_config_of(context))
    records, out = records_to_wire(reply)
    return {"ok": True, "records": records}, out


def serve_one(conn: socket.socket) -> None:
    """Answer the one request of ``conn`` (errors of the handler become an error reply)."""
    with conn:
        conn.settimeout(None)
        if _peer_uid(conn) not in (None, os.getuid()):
            return  # the folder is private; this is a second line of defence
        try:
            header, arrays = recv_frame(conn)
        except (OSError, WireError) as exc:
            print(f"warm worker: bad request: {exc}", file=sys.stderr, flush=True)
            return
        try:
            reply, out = handle_request(header, arrays)
        except Exception as exc:  # noqa: BLE001 - the ClientApp turns it into an error reply
            reply, out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, []
        try:
            send_frame(conn, reply, out)
        except (OSError, WireError) as exc:
            print(f"warm worker: reply not sent: {exc}", file=sys.stderr, flush=True)


def _drain(server: socket.socket) -> None:
    server.setblocking(False)
    while True:
        try:
            conn, _ = server.accept()
        except (BlockingIOError, OSError):
            return
        serve_one(conn)


def serve(server: socket.socket, path: Path, idle_s: float, watch_pid: int,
          stop: Callable[[], bool] = lambda: False) -> str:
    """Serve until idle, orphaned or stopped; returns why it stopped."""
    inode = path.stat().st_ino
    server.settimeout(POLL_S)
    last = time.monotonic()
    reason = "stopped"
    while not stop():
        try:
            conn, _ = server.accept()
        except socket.timeout:
            if time.monotonic() - last > idle_s:
                reason = "idle"
                break
            if not _alive(watch_pid):
                reason = "SuperNode gone"
                break
            continue
        serve_one(conn)
        last = time.monotonic()
    try:  # no new clients from here on; those already queued are still answered
        if path.stat().st_ino == inode:
            path.unlink()
    except OSError:
        pass
    _drain(server)
    server.close()
    return reason


def _preload() -> None:
    import torch

    torch.set_num_threads(1)
    import clients.handlers  # noqa: F401
    import depl_fl.task.local_update  # noqa: F401
    import depl_fl.task.models  # noqa: F401
    import depl_fl.task.training  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--idle-s", type=float, default=600.0)
    parser.add_argument("--watch-pid", type=int, default=os.getppid())
    args = parser.parse_args(argv)
    server = bind(args.socket)
    if server is None:
        return 0
    pid_file = args.socket.with_suffix(".pid")
    pid_file.write_text(f"{os.getpid()}\n")
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    _preload()
    reason = serve(server, args.socket, args.idle_s, args.watch_pid, stop=lambda: bool(stopping))
    if pid_file.read_text().strip() == str(os.getpid()):
        pid_file.unlink(missing_ok=True)
    log = args.socket.with_suffix(".log")
    if log.exists() and log.stat().st_size == 0:
        log.unlink()  # nothing went wrong: leave no trace but the (empty) lock file
    else:
        print(f"warm worker {args.socket.name}: exit ({reason})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
