"""Atomic files and the per-round checkpoint of a DepL job.

After every round the ServerApp writes ``checkpoint.pkl`` into the job's
output folder: the global model and everything else needed to continue the
run (round records, plan, scenario, estimator and policy state, random
state). Every write goes to a temporary file in the same folder that then
replaces the target with :func:`os.replace`, so a reader (or a crash) sees
either the previous or the new complete file, never a torn one.

A job started with ``resume=true`` loads the checkpoint of its output folder;
its configuration must equal the checkpointed one except for ``resume``.

Durability: a process that is killed, interrupted or fails keeps every
finished round, since the replace is the kernel's and needs no flush. The
per-round files (the checkpoint and the running ``results.json``) are
flushed to the disk (``fsync``) at most once every :data:`FLUSH_EVERY_S`
seconds (:class:`FlushPacer`) and when the job ends, not after every round:
an fsync cost as much server time as a round's tracking. An OS crash or a
power loss may so lose up to that many seconds of rounds; on a file system
that writes a replaced file's data before the rename (ext4's default
``auto_da_alloc``, btrfs) the files are then an earlier round's, complete.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from depl_fl.contract.scenario import Scenario
from depl_fl.diskcache import atomic_write
from depl_fl.errors import ScenarioError
from depl_fl.identity_memo import LastObjectMemo

CHECKPOINT_FILE = "checkpoint.pkl"
CHECKPOINT_VERSION = 1
#: Configuration keys (dotted) that may differ between a run and its resumption. The device keys say
#: where a job computes, not what: a job checkpointed on one machine resumes on another with or
#: without a GPU, and a checkpoint written before the keys existed still resumes.
RESUME_FREE_KEYS = ("resume", "train.device", "simulation.client_num_gpus")


#: Seconds between the per-round writes that are flushed to the disk (see the module docstring).
FLUSH_EVERY_S = 30.0


def atomic_write_bytes(path: str | Path, data: bytes, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder + ``os.replace``).

    ``durable``: flushed to the disk before the replace (:func:`depl_fl.diskcache.atomic_write`).
    """
    path = Path(path)
    atomic_write(path, lambda fh: fh.write(data), durable=durable)
    return path


def atomic_write_text(path: str | Path, text: str, durable: bool = True) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


class FlushPacer:
    """Whether a per-round write is flushed to the disk: the first after every ``seconds``.

    Parameters
    ----------
    seconds : float
        Least time between two flushed writes (0: flush every write).
    clock : callable
        Monotonic seconds (``time.monotonic``).
    """

    def __init__(self, seconds: float = FLUSH_EVERY_S, clock: Any = time.monotonic) -> None:
        self.seconds = float(seconds)
        self.clock = clock
        self.last = clock()

    def due(self) -> bool:
        """Whether this write is to be flushed (then the interval starts again)."""
        now = self.clock()
        if now - self.last < self.seconds:
            return False
        self.last = now
        return True


def flush_file(path: str | Path) -> bool:
    """Flush an existing file's content to the disk (``fsync``); whether there was one."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def resumable_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` without the keys that may change on resumption (:data:`RESUME_FREE_KEYS`)."""
    return _without(cfg, RESUME_FREE_KEYS)


def _without(cfg: Mapping[str, Any], dotted: Sequence[str]) -> dict[str, Any]:
    """``cfg`` as nested dicts with the ``dotted`` keys left out."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if key in dotted:
            continue
        inner = [d[len(key) + 1:] for d in dotted if d.startswith(f"{key}.")]
        out[key] = _without(value, inner) if inner and isinstance(value, Mapping) else value
    return out


def first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    """Dotted name of the first key where two nested configs differ (``None`` if equal)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in a or key not in b:
                return name
            diff = first_difference(a[key], b[key], name)
            if diff is not None:
                return diff
        return None
    return None if a == b else (prefix or "<config>")


def random_state() -> dict[str, Any]:
    """State of the process-wide generators (Python's ``random``, numpy's legacy global)."""
    return {"python": random.getstate(), "numpy": np.random.get_state()}


def set_random_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`random_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


class _CheckpointPickler(pickle.Pickler):
    """A pickler that writes a :class:`Scenario` from bytes made once per scenario object.

    A job rewrites its checkpoint every round and its scenario (every client)
    is the largest part of it; a scenario is immutable (a changed one is a new
    object), so its pickle is kept with it and reused. Unpickling gives the
    same objects as a plain pickle, one scenario per object pickled.
    """

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Scenario:
            return pickle.loads, (_scenario_bytes(obj),)
        return NotImplemented


#: The pickle of the last scenario object written: see :class:`_CheckpointPickler`.
_SCENARIO_BYTES: LastObjectMemo[bytes] = LastObjectMemo()


def _scenario_bytes(scenario: Scenario) -> bytes:
    return _SCENARIO_BYTES.get(scenario, lambda: pickle.dumps(scenario, protocol=5))


def checkpoint_bytes(doc: Any) -> bytes:
    """``pickle.dumps(doc, protocol=5)``, loading to equal objects, with scenarios pickled once each.

    A mapping's :data:`STEADY_KEYS` entries are pickled once while they stay
    equal (see :class:`_Pickled`).
    """
    if isinstance(doc, dict):
        doc = {k: _steady(k, v) if k in STEADY_KEYS else v for k, v in doc.items()}
    buffer = io.BytesIO()
    _CheckpointPickler(buffer, protocol=5).dump(doc)
    return buffer.getvalue()


#: Checkpoint entries that stay the same round after round (the nodes' properties, one entry per
#: client): their pickle is made again only when the value changes.
STEADY_KEYS = ("properties",)
#: Per steady key: the value last pickled (a copy, loaded from its pickle) and that pickle.
_STEADY: dict[str, tuple[Any, bytes]] = {}


class _Pickled:
    """A value written from its pickle made before: unpickling gives the value itself, not this."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return pickle.loads, (self.data,)


def _steady(key: str, value: Any) -> _Pickled:
    """``value`` as a :class:`_Pickled`, its pickle reused while it equals the last one of ``key``."""
    kept = _STEADY.get(key)
    if kept is None or type(kept[0]) is not type(value) or kept[0] != value:
        data = pickle.dumps(value, protocol=5)
        kept = _STEADY[key] = (pickle.loads(data), data)
    return _Pickled(kept[1])


def save_checkpoint(out_dir: str | Path, cfg: Mapping[str, Any], payload: Mapping[str, Any],
                    durable: bool = True) -> Path:
    """Atomically write ``payload`` (+ the config and random state) as the job's checkpoint.

    ``durable``: flushed to the disk before it replaces the last one.
    """
    doc = {"version": CHECKPOINT_VERSION, "config": resumable_config(cfg), "random": random_state(),
           **payload}
    return atomic_write_bytes(Path(out_dir) / CHECKPOINT_FILE, checkpoint_bytes(doc), durable=durable)


def recorded_config(out_dir: str | Path) -> dict[str, Any] | None:
    """The configuration the checkpoint of ``out_dir`` recorded (``None``: none there, or unreadable;
    :func:`load_checkpoint` then says which in one line)."""
    path = Path(out_dir) / CHECKPOINT_FILE
    try:
        doc = pickle.loads(path.read_bytes())
    except Exception:  # missing or unreadable: load_checkpoint names it
        return None
    config = doc.get("config") if isinstance(doc, dict) else None
    return config if isinstance(config, dict) else None


def _why_no_checkpoint(out_dir: Path) -> str:
    """The resume error's advice for a folder without a checkpoint.

    A job stopped before its first round ended (interrupted, or refused after it
    started) leaves ``results.json`` with its status but nothing to resume, which
    naming another folder would not change.
    """
    try:
        status = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))["summary"]["status"]
    except (OSError, ValueError, KeyError, TypeError):
        status = None
    if status in ("interrupted", "failed", "infeasible", "running"):
        return (f"its job stopped ({status}) before a round was checkpointed: nothing to resume; "
                "run it again without resume=true")
    return ("name the interrupted job's folder: hydra.run.dir=PATH in a Hydra job, "
            "++output.dir=PATH with flwr run")


def load_checkpoint(out_dir: str | Path, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint of ``out_dir`` for a job with configuration ``cfg``.

    Raises
    ------
    ScenarioError
        One line naming the problem: no checkpoint, unreadable, or made with a
        different configuration (the first differing key is named).
    """
    path = Path(out_dir) / CHECKPOINT_FILE
    if not path.is_file():
        raise ScenarioError(f"resume: no checkpoint {path} ({_why_no_checkpoint(Path(out_dir))})")
    try:
        doc = pickle.loads(path.read_bytes())
    except Exception as exc:  # any unpickling failure means the same to the user
        raise ScenarioError(f"resume: unreadable checkpoint {path}: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or doc.get("version") != CHECKPOINT_VERSION:
        raise ScenarioError(f"resume: {path} is not a version {CHECKPOINT_VERSION} checkpoint")
    diff = first_difference(doc["config"], resumable_config(cfg))
    if diff is not None:
        raise ScenarioError(f"resume: config {diff} differs from the checkpointed run's "
                            f"(resume with the same overrides plus resume=true)")
    return doc
