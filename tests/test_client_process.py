"""One ClientApp process per message (Flower deployments): node cache and lazy imports.

Protects fast rounds: once a node has cached its partition and
the composed configuration, a fresh process handling a message imports
neither scikit-learn, Hugging Face datasets, Flower Datasets, Hydra nor
``torch._dynamo``; and what comes from the cache equals what is computed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import Context, RecordDict  # noqa: E402

from clients.handlers import node_data  # noqa: E402
from depl_fl import diskcache  # noqa: E402
from depl_fl.runs import runconfig  # noqa: E402
from depl_fl.runs.runconfig import compose_config, config_from_run_config  # noqa: E402
from depl_fl.task import node_data as node_data_module  # noqa: E402
from depl_fl.task.partitions import client_partition, geometry  # noqa: E402
from depl_fl.task.split import split_dataset  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = "num_clients=3 seed=4 partition.alpha=0.5"
NEVER_WARM = ("sklearn", "datasets", "flwr_datasets", "hydra", "omegaconf", "torch._dynamo")

# What flwr-clientapp does with one message: import the app, call it once, exit.
DRIVER = r"""
import json, sys
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity

kind, overrides, state_file, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
from clients.client_app import app

TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
content = RecordDict({"config": ConfigRecord({"server-round": 2, "compression": 0.5, "seed": 1})})
if kind != "query":
    with np.load(state_file) as npz:
        state = {k: npz[k] for k in npz.files}
    content["arrays"] = ArrayRecord({k: Array(np.require(v, requirements="C")) for k, v in state.items()})
mtype = {"query": MessageType.QUERY, "train": MessageType.TRAIN, "evaluate": MessageType.EVALUATE}[kind]
msg = Message(content, dst_node_id=100, message_type=mtype, group_id="2")
msg.metadata.__dict__["_message_id"] = "test"
context = Context(run_id=1, node_id=100, state=RecordDict(), run_config={"overrides": overrides},
                  node_config={"partition-id": pid, "num-partitions": 3, **extra})
reply = app(msg, context)
assert not reply.has_error(), reply.error.reason
print(json.dumps({"modules": sorted(sys.modules), "content": sorted(reply.content.keys())}))
"""


def _variant_file(state_file: Path) -> Path:
    """The p50 variant's entries of the global state, sliced as the server slices a train message
    (here, so that the driver process imports only what a message's process imports)."""
    out = state_file.with_name(f"{state_file.stem}-p50.npz")
    if not out.exists():
        from depl_fl.task.pruning import compute_structure, extract
        from depl_fl.task.subnets import network_layout

        with np.load(state_file) as npz:
            state = {k: npz[k] for k in npz.files}
        layout = network_layout(geometry(compose_config(OVERRIDES.split())))
        np.savez(out, **extract(state, compute_structure(layout, state, 0.5)))
    return out


def _handle(kind: str, state_file: Path, cache: Path, pid: int = 1, node_config: dict | None = None) -> dict:
    if kind == "train":  # a train message carries the variant's entries
        state_file = _variant_file(state_file)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache))
    env.pop(diskcache.ENV_DIR, None)
    proc = subprocess.run([sys.executable, "-c", DRIVER, kind, OVERRIDES, str(state_file), str(pid),
                           json.dumps(node_config or {})],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_warm_node_handles_messages_without_heavy_imports(tmp_path):
    from depl_fl.task.local_update import initial_state

    cfg = compose_config(OVERRIDES.split())
    state_file = tmp_path / "global.npz"
    np.savez(state_file, **initial_state(geometry(cfg), seed=0))
    cache = tmp_path / "xdg"
    cold = _handle("query", state_file, cache)
    # The first message of a node loads, splits and composes: the check below can fail.
    assert {"sklearn", "flwr_datasets", "hydra"} <= set(cold["modules"])
    assert list((cache / "depl-fl" / "partitions").glob("*.npz"))
    assert list((cache / "depl-fl" / "config").glob("*.json"))
    for kind in ("query", "train", "evaluate"):
        warm = _handle(kind, state_file, cache)
        heavy = [m for m in NEVER_WARM if m in warm["modules"]]
        assert heavy == [], f"{kind} imported {heavy}"
        assert "depl_fl.task.partitions" not in warm["modules"]  # nothing recomputed
        assert warm["content"] == {"query": ["properties"], "train": ["arrays", "metrics"],
                                   "evaluate": ["metrics"]}[kind]
        # Only messages that run a model need torch.
        assert ("torch" in warm["modules"]) == (kind != "query")


@pytest.mark.slow
def test_warm_node_shim_imports_neither_torch_nor_the_config_stack(tmp_path):
    """With the warm worker a message's process is a thin shim: flwr and numpy only."""
    from clients import warm_client
    from depl_fl.task.local_update import initial_state

    cfg = compose_config(OVERRIDES.split())
    state_file = tmp_path / "global.npz"
    np.savez(state_file, **initial_state(geometry(cfg), seed=0))
    never = (*NEVER_WARM, "torch", "pydantic", "depl_fl.contract", "depl_fl.task.partitions")
    node = {"warm-worker": True, "warm-worker-idle-s": 120, "cache-dir": str(tmp_path / "node")}
    try:
        for kind in ("query", "train", "evaluate", "train"):
            shim = _handle(kind, state_file, tmp_path / "xdg", node_config=node)
            heavy = [m for m in never if m in shim["modules"]]
            assert heavy == [], f"{kind} shim imported {heavy}"
            assert shim["content"] == {"query": ["properties"], "train": ["arrays", "metrics"],
                                       "evaluate": ["metrics"]}[kind]
        # The node's worker did the work: it left the partition and the config in the node cache.
        assert list((tmp_path / "node" / "partitions").glob("*.npz"))
        assert list((tmp_path / "node" / "config").glob("*.json"))
    finally:  # the driver's parent, this process, is the worker's "SuperNode"
        ep = warm_client.endpoint({"partition-id": 1, "num-partitions": 3, **node}, watch_pid=os.getpid())
        pid_file = ep.path.with_suffix(".pid")
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert pid_file.exists(), "the node had no worker"


def _context(pid: int, num: int, **extra) -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": pid, "num-partitions": num, **extra},
                   state=RecordDict(), run_config={})


def _forget_memory(monkeypatch) -> None:
    monkeypatch.setattr(runconfig, "_RUN_CONFIG_CACHE", {})
    monkeypatch.setattr(node_data_module, "_MEMORY", {})


def test_cached_config_equals_composed_config(tmp_path, monkeypatch):
    _forget_memory(monkeypatch)
    run_config = {"overrides": "num_clients=5 seed=2 method=full train.lr=0.1"}
    first = config_from_run_config(run_config, tmp_path)
    [cached_file] = (tmp_path / "config").glob("*.json")
    _forget_memory(monkeypatch)
    with monkeypatch.context() as patch:
        patch.setattr(runconfig, "compose_config", lambda _: pytest.fail("composed again"))
        from_disk = config_from_run_config(run_config, tmp_path)
    fresh = compose_config(run_config["overrides"].split())
    assert from_disk == first == fresh
    assert json.loads(cached_file.read_text()) == fresh


def test_config_cache_key_follows_overrides_and_config_files(tmp_path, monkeypatch):
    _forget_memory(monkeypatch)
    config_from_run_config({"overrides": "seed=1"}, tmp_path)
    config_from_run_config({"overrides": "seed=2"}, tmp_path)
    assert len(list((tmp_path / "config").glob("*.json"))) == 2
    conf = tmp_path / "conf"
    (conf / "sub").mkdir(parents=True)
    (conf / "config.yaml").write_text("a: 1\n")
    before = runconfig.conf_digest(str(conf))
    (conf / "sub" / "x.yaml").write_text("b: 2\n")
    assert runconfig.conf_digest(str(conf)) != before


def test_cached_partition_equals_computed_partition(tmp_path, monkeypatch):
    cfg = compose_config(["num_clients=4", "seed=3", "partition.alpha=0.3"])
    _forget_memory(monkeypatch)
    computed = node_data(cfg, _context(2, 4), tmp_path)
    [cached_file] = (tmp_path / "partitions").glob("*.npz")
    _forget_memory(monkeypatch)
    with monkeypatch.context() as patch:
        patch.setattr("depl_fl.task.partitions.client_partition",
                      lambda *a, **k: pytest.fail("partition computed again"))
        from_disk = node_data(cfg, _context(2, 4), tmp_path)
    x, y = client_partition(cfg, 2, 4)
    for got in (computed, from_disk):
        np.testing.assert_array_equal(got.x, x)
        np.testing.assert_array_equal(got.y, y)
        assert got.x.dtype == x.dtype and got.y.dtype == y.dtype
        assert got.geometry == geometry(cfg)
    # Another partition, seed or node gets its own entry.
    node_data(cfg, _context(1, 4), tmp_path)
    node_data({**cfg, "seed": 4}, _context(2, 4), tmp_path)
    assert len(list((tmp_path / "partitions").glob("*.npz"))) == 3
    assert cached_file.is_file()


def test_unreadable_cache_entry_is_recomputed(tmp_path, monkeypatch):
    cfg = compose_config(["num_clients=3"])
    _forget_memory(monkeypatch)
    good = node_data(cfg, _context(0, 3), tmp_path)
    [cached_file] = (tmp_path / "partitions").glob("*.npz")
    cached_file.write_bytes(b"truncated")
    _forget_memory(monkeypatch)
    again = node_data(cfg, _context(0, 3), tmp_path)
    np.testing.assert_array_equal(again.x, good.x)
    np.testing.assert_array_equal(again.y, good.y)
    assert cached_file.stat().st_size > 100  # rewritten


def test_local_data_change_invalidates_partition(tmp_path, monkeypatch):
    cfg = compose_config(["num_clients=3"])
    split_dataset("digits", 3, tmp_path / "split", alpha=None, seed=0)
    data_dir = tmp_path / "split" / "node-0"
    _forget_memory(monkeypatch)
    node_data(cfg, _context(0, 3, **{"data-dir": str(data_dir)}), tmp_path / "cache")
    os.utime(data_dir, ns=(1, 1))
    node_data(cfg, _context(0, 3, **{"data-dir": str(data_dir)}), tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "partitions").glob("*.npz"))) == 2


def test_node_cache_dir_order(tmp_path, monkeypatch):
    monkeypatch.delenv(diskcache.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert diskcache.node_cache_dir({}) == tmp_path / "xdg" / "depl-fl"
    monkeypatch.setenv(diskcache.ENV_DIR, str(tmp_path / "env"))
    assert diskcache.node_cache_dir({}) == tmp_path / "env"
    assert diskcache.node_cache_dir({"cache-dir": str(tmp_path / "node")}) == tmp_path / "node"


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "a" / "entry.json"
    diskcache.write_json(target, {"x": 1})

    def fail(fh):
        fh.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        diskcache.atomic_write(target, fail)
    assert diskcache.read_json(target) == {"x": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["entry.json"]


def test_node_data_memory_keeps_the_newest_entries(monkeypatch):
    """A node's warm worker serves run after run: the in-memory partitions stay bounded."""
    _forget_memory(monkeypatch)
    geo = geometry(compose_config(["num_clients=3"]))
    made = []

    def compute(i):
        made.append(i)
        return node_data_module.NodeData(np.full((2, 1), i), np.zeros(2, dtype=np.int64), geo)

    n = node_data_module.MEMORY_ENTRIES
    for i in range(n + 2):
        node_data_module.cached_node_data(None, {"run": i}, lambda i=i: compute(i))
    assert len(node_data_module._MEMORY) == n
    node_data_module.cached_node_data(None, {"run": n + 1}, lambda: compute(-1))  # newest: in memory
    node_data_module.cached_node_data(None, {"run": 0}, lambda: compute(0))  # oldest: dropped, recomputed
    assert made == [*range(n + 2), 0]
