"""The warm per-node trainer (fast rounds): wire format, equality, lifecycle, fallback.

A deployment's ClientApp forwards each message to its node's long-lived
worker (:mod:`clients.warm_client`, :mod:`clients.warm_worker`). These tests
protect that the worker's replies are bit-identical to in-process handling,
that a handler error stays an error, that the worker exits when idle or when
its SuperNode is gone, that a stale socket or a worker that cannot start or
dies never loses a message (in-process fallback), and that concurrent
messages of one node start one worker.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from clients import warm_client, warm_protocol, warm_worker  # noqa: E402
from clients.client_app import make_client_app  # noqa: E402
from clients.handlers import HANDLERS, run_config_of  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402

OVERRIDES = "num_clients=3 seed=4"


def _wait(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"


def _kill_workers(node_config: dict) -> None:
    ep = warm_client.endpoint(node_config)
    pid_file = ep.path.with_suffix(".pid")
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@pytest.fixture(scope="module")
def global_state() -> dict[str, np.ndarray]:
    return initial_state(geometry(compose_config(OVERRIDES.split())), seed=0)


def _node_config(folder: Path, pid: int = 1, **extra) -> dict:
    return {"partition-id": pid, "num-partitions": 3, "warm-worker": True, "cache-dir": str(folder),
            "warm-worker-idle-s": 120, **extra}


def _context(node_config: dict) -> Context:
    return Context(run_id=1, node_id=7, node_config=node_config, state=RecordDict(),
                   run_config={"overrides": OVERRIDES})


def _content(state: dict[str, np.ndarray], compression: float = 0.5, server_round: int = 2) -> RecordDict:
    return RecordDict({
        "config": ConfigRecord({"server-round": server_round, "compression": compression, "seed": 1}),
        "arrays": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})})


@pytest.fixture
def node(tmp_path):
    config = _node_config(tmp_path / "cache")
    yield config
    _kill_workers(config)


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory):
    config = _node_config(tmp_path_factory.mktemp("shared") / "cache")
    yield config
    _kill_workers(config)


def _same_records(a: RecordDict, b: RecordDict) -> None:
    assert list(a.keys()) == list(b.keys())
    for name in a:
        if isinstance(a[name], ArrayRecord):
            assert list(a[name].keys()) == list(b[name].keys())
            for key in a[name]:
                x, y = a[name][key].numpy(), b[name][key].numpy()
                assert x.dtype == y.dtype and x.shape == y.shape
                assert x.tobytes() == y.tobytes(), f"{name}/{key} differs"
        else:
            assert dict(a[name]) == dict(b[name])
            assert [type(v) for v in dict(a[name]).values()] == [type(v) for v in dict(b[name]).values()]


# ---------------------------------------------------------------- wire format

def test_wire_round_trip_keeps_records_dtypes_and_value_types():
    content = RecordDict({
        "arrays": ArrayRecord({"w": Array(np.arange(12, dtype=np.float32).reshape(3, 4) / 7),
                               "i": Array(np.array([-1, 2**40], dtype=np.int64)),
                               "c": Array(np.array([1 + 2j], dtype=np.complex64)),
                               "e": Array(np.zeros((0, 3), dtype=np.float64)),
                               "s": Array(np.array(3.5, dtype=">f8"))}),
        "config": ConfigRecord({"n": 3, "x": 0.1, "name": "p50", "on": True, "hist": [1, 0, 5]}),
        "metrics": MetricRecord({"loss": float("nan"), "num-examples": 479, "acc": [0.5, 0.25]}),
    })
    left, right = socket.socketpair()
    with left, right:
        records, arrays = warm_protocol.records_to_wire(content)
        sender = threading.Thread(target=warm_protocol.send_frame, args=(left, {"records": records}, arrays))
        sender.start()
        header, got_arrays = warm_protocol.recv_frame(right)
        sender.join()
    back = warm_protocol.records_from_wire(header["records"], got_arrays)
    assert list(back["arrays"].keys()) == ["w", "i", "c", "e", "s"]
    for key in content["arrays"]:
        x, y = content["arrays"][key].numpy(), back["arrays"][key].numpy()
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    assert dict(back["config"]) == dict(content["config"])
    assert isinstance(back["config"]["n"], int) and isinstance(back["config"]["on"], bool)
    assert np.isnan(back["metrics"]["loss"]) and back["metrics"]["num-examples"] == 479


def test_wire_refuses_object_arrays_bytes_and_garbage():
    with pytest.raises(warm_protocol.WireError, match="bytes"):
        warm_protocol.records_to_wire(RecordDict({"config": ConfigRecord({"blob": b"\x00"})}))
    left, right = socket.socketpair()
    with left, right:
        with pytest.raises(warm_protocol.WireError, match="object"):
            warm_protocol.send_frame(left, {}, [("a", "x", np.array([None]))])
        text = b'{"arrays": [["a", "x", "|O", [1]]]}'
        left.sendall(warm_protocol._LENGTH.pack(len(text)) + text)
        with pytest.raises(warm_protocol.WireError, match="object"):
            warm_protocol.recv_frame(right)
        left.sendall(warm_protocol._LENGTH.pack(5) + b"{nope")
        with pytest.raises(warm_protocol.WireError, match="malformed"):
            warm_protocol.recv_frame(right)
        left.close()
        with pytest.raises(warm_protocol.WireError, match="closed"):
            warm_protocol.recv_frame(right)


# ---------------------------------------------------------------- addressing

def test_socket_name_follows_code_node_and_supernode(tmp_path):
    (tmp_path / "clients").mkdir()
    (tmp_path / "clients" / "a.py").write_text("x = 1\n")
    before = warm_protocol.code_digest(tmp_path)
    (tmp_path / "clients" / "a.py").write_text("x = 2\n")
    after = warm_protocol.code_digest(tmp_path)
    assert before != after
    paths = {warm_protocol.socket_path(tmp_path, code, {"node": node, "supernode": sn})
             for code in (before, after) for node in (0, 1) for sn in ("1-5", "1-6")}
    assert len(paths) == 8
    assert warm_protocol.process_identity(os.getpid()) != warm_protocol.process_identity(os.getppid())


def test_worker_folder_is_private(tmp_path):
    folder = warm_protocol.private_dir(tmp_path / "workers")
    assert folder.stat().st_mode & 0o777 == 0o700
    long = tmp_path / ("x" * 90)
    fallback = warm_protocol.private_dir(long)
    assert fallback != long and fallback.stat().st_mode & 0o777 == 0o700
    assert len(str(fallback)) + 40 < warm_protocol.MAX_SOCKET_PATH


def test_enabled_by_default_only_in_a_flwr_clientapp_process():
    assert warm_client.enabled({}, argv0="/venv/bin/flwr-clientapp")
    assert not warm_client.enabled({}, argv0="/venv/bin/python")
    assert not warm_client.enabled({"warm-worker": False}, argv0="/venv/bin/flwr-clientapp")
    assert not warm_client.enabled({"warm-worker": "false"}, argv0="flwr-clientapp")
    assert warm_client.enabled({"warm-worker": True}, argv0="/venv/bin/python")
    with pytest.raises(ValueError, match="warm-worker"):
        warm_client.enabled({"warm-worker": "maybe"})
    # Simulation (a composed cfg given by closure) never forwards.
    assert warm_client.forward("query", RecordDict(), _context({"warm-worker": False})) is None


# ---------------------------------------------------------------- equality

@pytest.mark.parametrize("compression", [0.5, 0.0])
def test_worker_reply_is_bit_identical_to_in_process(shared_node, global_state, compression):
    context = _context(shared_node)
    content = _content(global_state, compression)
    local = HANDLERS["train"](content, context, *run_config_of(context))
    remote = warm_client.forward("train", content, context)
    assert remote is not None, "the worker did not answer"
    local["metrics"]["train-time-s"] = remote["metrics"]["train-time-s"]  # wall clock, not a result
    _same_records(local, remote)
    for kind in ("evaluate", "query"):
        _same_records(HANDLERS[kind](content, context, *run_config_of(context)),
                      warm_client.forward(kind, content, context))


def test_handler_error_in_the_worker_is_an_error_reply(shared_node, global_state):
    faulty = {**shared_node, "faults-kind": "crash"}
    try:
        with pytest.raises(warm_client.WorkerTaskError, match="InjectedFault"):
            warm_client.forward("train", _content(global_state), _context(faulty))
    finally:
        _kill_workers(faulty)
    # The worker survives its handler's error: it still answers.
    assert warm_client.forward("evaluate", _content(global_state), _context(shared_node)) is not None


# ---------------------------------------------------------------- lifecycle

@pytest.mark.slow
def test_worker_exits_when_idle_and_a_new_one_starts(tmp_path, global_state):
    config = _node_config(tmp_path / "c", **{"warm-worker-idle-s": 1})
    try:
        assert warm_client.forward("evaluate", _content(global_state), _context(config)) is not None
        ep = warm_client.endpoint(config)
        pid = int(ep.path.with_suffix(".pid").read_text())
        assert _wait(lambda: not _alive(pid)), "idle worker still running"
        # Its SuperNode (this test's parent) lives on: it left because it was idle, cleanly.
        assert not ep.path.exists() and not ep.log_file.exists()
        assert warm_client.forward("evaluate", _content(global_state), _context(config)) is not None
        assert int(ep.path.with_suffix(".pid").read_text()) != pid
    finally:
        _kill_workers(config)


@pytest.mark.slow
def test_worker_exits_when_its_supernode_is_gone(tmp_path):
    supernode = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ep = warm_client.endpoint(_node_config(tmp_path / "c"), watch_pid=supernode.pid)
    worker = warm_client.spawn(ep, idle_s=600)
    try:
        assert _wait(lambda: ep.path.exists()), ep.log_file.read_text()
        supernode.kill()
        supernode.wait()
        assert worker.wait(timeout=60) == 0
        assert not ep.path.exists() and not ep.log_file.exists()  # idle_s=600: it left for its SuperNode
    finally:
        for proc in (supernode, worker):
            if proc.poll() is None:
                proc.kill()


@pytest.mark.slow
def test_stale_socket_is_replaced(node, global_state):
    ep = warm_client.endpoint(node)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(ep.path))  # a socket file nobody listens on: its worker died
    dead.close()
    reply = warm_client.forward("evaluate", _content(global_state), _context(node))
    assert reply is not None and reply["metrics"]["num-examples"] > 0
    assert _alive(int(ep.path.with_suffix(".pid").read_text()))


def test_worker_that_cannot_start_falls_back_in_process_and_logs_once(node, global_state, monkeypatch,
                                                                     caplog):
    started = []

    def broken_spawn(ep, idle_s):
        started.append(ep)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    monkeypatch.setattr(warm_client, "spawn", broken_spawn)
    app = make_client_app()
    msg = _message(MessageType.EVALUATE, _content(global_state))
    with caplog.at_level(logging.WARNING, logger=warm_client.__name__):
        first = app(msg, _context(node))
        second = app(msg, _context(node))
    assert len(started) == 1, "a failed worker start is not retried at once"
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "exit status 3" in caplog.records[0].getMessage()
    context = _context(node)
    expected = HANDLERS["evaluate"](msg.content, context, *run_config_of(context))
    for reply in (first, second):
        assert not reply.has_error()
        _same_records(reply.content, expected)
    # Later it tries again.
    monkeypatch.setattr(warm_client, "RETRY_AFTER_S", 0.0)
    assert not app(msg, _context(node)).has_error()
    assert len(started) == 2


def test_worker_dying_during_a_message_falls_back_in_process(node, global_state, caplog):
    ep = warm_client.endpoint(node)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(ep.path))
    server.listen(1)

    def die_on_first_message():
        conn, _ = server.accept()
        conn.recv(16)
        conn.close()  # like a worker killed mid-message

    thread = threading.Thread(target=die_on_first_message)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger=warm_client.__name__):
            assert warm_client.forward("evaluate", _content(global_state), _context(node)) is None
        assert "failed during a evaluate message" in caplog.text
    finally:
        thread.join(timeout=10)
        server.close()


@pytest.mark.slow
def test_concurrent_messages_of_one_node_start_one_worker(node, global_state, monkeypatch):
    spawned = []
    real_spawn = warm_client.spawn
    monkeypatch.setattr(warm_client, "spawn", lambda *a, **k: spawned.append(1) or real_spawn(*a, **k))
    context = _context(node)
    contents = [_content(global_state, 0.5, server_round=r) for r in (1, 2, 3)]
    replies: dict[int, RecordDict | None] = {}

    def send(i):
        replies[i] = warm_client.forward("train", contents[i], context)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(spawned) == 1
    for i, content in enumerate(contents):
        assert replies[i] is not None
        local = HANDLERS["train"](content, context, *run_config_of(context))
        local["metrics"]["train-time-s"] = replies[i]["metrics"]["train-time-s"]
        _same_records(local, replies[i])


def _message(mtype: str, content: RecordDict) -> Message:
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    msg = Message(content, dst_node_id=7, message_type=mtype, group_id="2")
    msg.metadata.__dict__["_message_id"] = "test"
    return msg


def test_worker_unit_serve_answers_queued_connections_before_exiting(tmp_path):
    path = tmp_path / "w.sock"
    server = warm_worker.bind(path)
    assert warm_worker.bind(path) is None  # a live worker already serves this socket
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    warm_protocol.send_frame(client, {"kind": "nope", "records": {}, "run_id": 1, "node_id": 1,
                                      "node_config": {}, "run_config": {}})
    reason = warm_worker.serve(server, path, idle_s=600, watch_pid=os.getpid(), stop=lambda: True)
    assert reason == "stopped" and not path.exists()
    header, _ = warm_protocol.recv_frame(client)  # answered although the worker was stopping
    assert header["ok"] is False and "KeyError" in header["error"]
    client.close()


@pytest.mark.slow
def test_hung_worker_times_out_falls_back_in_process_and_is_replaced(tmp_path, global_state, caplog):
    node = _node_config(tmp_path / "cache", **{"warm-worker-reply-s": 20})
    ep = warm_client.endpoint(node)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(ep.path))
    server.listen(1)
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ep.path.with_suffix(".pid").write_text(f"{hung.pid}\n")
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()[0]))  # reads, never replies
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger=warm_client.__name__):
            started = time.monotonic()
            assert warm_client.forward("evaluate", _content(global_state), _context(node)) is None
        assert 19 < time.monotonic() - started < 40
        assert "sent no reply to a evaluate message in 20 s" in caplog.text
        assert hung.wait(timeout=10) == -signal.SIGKILL
        assert not ep.path.exists()
        # The next message starts a real worker and gets its reply.
        reply = warm_client.forward("evaluate", _content(global_state), _context(node))
        assert reply is not None and reply["metrics"]["num-examples"] > 0
    finally:
        thread.join(timeout=10)
        for conn in accepted:
            conn.close()
        server.close()
        hung.kill()
        _kill_workers(node)
