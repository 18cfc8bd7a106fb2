"""Wire format and addressing of the warm per-node trainer (:mod:`clients.warm_worker`).

A ClientApp process (the shim) and the node's warm worker talk over a Unix
socket in a private folder. One frame is::

    8 bytes   big-endian length of the header
    header    UTF-8 JSON: plain values, and "arrays": [[record, key, dtype, shape], ...]
    payload   the raw bytes of every array, in the order of "arrays"

Arrays travel as their raw little/big-endian buffers (``dtype.str`` names the
layout; object dtypes are refused) and configs/metrics as JSON, so nothing is
ever unpickled. Flower records are mapped to and from this format by
:func:`records_to_wire` / :func:`records_from_wire`. numpy and the standard
library only: the shim must stay as cheap to start as Flower itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

VERSION = 1
"""Protocol version (part of the socket name)."""

_LENGTH = struct.Struct(">Q")
MAX_HEADER = 64 << 20
#: Longest path ``AF_UNIX`` accepts on Linux (108 bytes with the terminating NUL).
MAX_SOCKET_PATH = 107


class WireError(RuntimeError):
    """A malformed frame, a closed connection or a value the wire format cannot carry."""


def _recv_exact(sock: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise WireError("connection closed in the middle of a frame")
        got += n
    return buf


def send_frame(sock: socket.socket, header: Mapping[str, Any],
               arrays: Iterable[tuple[str, str, np.ndarray]] = ()) -> None:
    """Send ``header`` and ``arrays`` (``(record, key, array)`` triples) as one frame."""
    # np.require keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d).
    arrays = [(rec, key, np.require(arr, requirements="C")) for rec, key, arr in arrays]
    for rec, key, arr in arrays:
        if arr.dtype.hasobject:
            raise WireError(f"array {rec}/{key}: object arrays cannot be sent")
    meta = [[rec, key, arr.dtype.str, list(arr.shape)] for rec, key, arr in arrays]
    try:
        text = json.dumps({**header, "arrays": meta}).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    sock.sendall(_LENGTH.pack(len(text)) + text)
    for _, _, arr in arrays:
        if arr.nbytes:
            sock.sendall(memoryview(arr).cast("B"))


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], list[tuple[str, str, np.ndarray]]]:
    """Receive one frame: its header and its ``(record, key, array)`` triples."""
    (length,) = _LENGTH.unpack(_recv_exact(sock, _LENGTH.size))
    if length > MAX_HEADER:
        raise WireError(f"header of {length} bytes is too long")
    try:
        header = json.loads(bytes(_recv_exact(sock, length)).decode("utf-8"))
        meta = header.pop("arrays")
        arrays = []
        for rec, key, dtype_str, shape in meta:
            dtype = np.dtype(str(dtype_str))
            if dtype.hasobject:
                raise WireError(f"array {rec}/{key}: object dtype refused")
            count = int(np.prod(shape, dtype=np.int64))
            raw = _recv_exact(sock, count * dtype.itemsize)
            arrays.append((str(rec), str(key), np.frombuffer(raw, dtype=dtype).reshape(shape)))
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise WireError(f"malformed frame: {exc}") from None
    return header, arrays


def records_to_wire(content: Any) -> tuple[dict[str, Any], list[tuple[str, str, np.ndarray]]]:
    """A Flower ``RecordDict`` as ``({record: {"type", "values"}}, arrays)``.

    ``ArrayRecord`` values become arrays; ``ConfigRecord``/``MetricRecord``
    values must be JSON values (numbers, strings, booleans and lists of them).
    """
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

    records: dict[str, Any] = {}
    arrays: list[tuple[str, str, np.ndarray]] = []
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            records[name] = {"type": "array"}
            arrays += [(name, key, arr.numpy()) for key, arr in record.items()]
        elif isinstance(record, (ConfigRecord, MetricRecord)):
            values = dict(record)
            if any(isinstance(v, bytes) or (isinstance(v, list) and any(isinstance(x, bytes) for x in v))
                   for v in values.values()):
                raise WireError(f"record {name}: bytes values are not carried")
            records[name] = {"type": "config" if isinstance(record, ConfigRecord) else "metric",
                             "values": values}
        else:
            raise WireError(f"record {name}: {type(record).__name__} is not carried")
    return records, arrays


def records_from_wire(records: Mapping[str, Any], arrays: list[tuple[str, str, np.ndarray]]) -> Any:
    """The Flower ``RecordDict`` of :func:`records_to_wire`'s output."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

    by_record: dict[str, dict[str, Any]] = {}
    for rec, key, arr in arrays:
        by_record.setdefault(rec, {})[key] = Array(arr)
    out = RecordDict()
    for name, spec in records.items():
        kind = spec.get("type")
        if kind == "array":
            out[name] = ArrayRecord(by_record.get(name, {}))
        elif kind == "config":
            out[name] = ConfigRecord(dict(spec["values"]))
        elif kind == "metric":
            out[name] = MetricRecord(dict(spec["values"]))
        else:
            raise WireError(f"record {name}: unknown type {kind!r}")
    return out


def code_digest(root: Path, packages: tuple[str, ...] = ("clients", "depl_fl", "conf")) -> str:
    """Hash of the app's code and configuration files under ``root`` (names and bytes)."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def process_identity(pid: int) -> str:
    """``pid`` and its start time (``/proc``), so that a reused pid is not the same process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        return f"{pid}-{fields[19]}"
    except (OSError, IndexError):
        return str(pid)


def private_dir(preferred: Path) -> Path:
    """A folder only this user can enter (mode 0700): ``preferred`` or, when a socket path
    there would be too long, ``$TMPDIR/depl-fl-<uid>``. Raises ``PermissionError`` when the
    folder belongs to someone else or is open to others."""
    folder = preferred
    if len(str(folder)) + 48 > MAX_SOCKET_PATH:
        folder = Path(tempfile.gettempdir()) / f"depl-fl-{os.getuid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{folder} is not this user's folder")
    if info.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def socket_path(folder: Path, code: str, node_key: Mapping[str, Any]) -> Path:
    """Socket of the worker for this code, node config and SuperNode (a hash of all three)."""
    text = json.dumps({"v": VERSION, "code": code, "node": node_key, "python": sys.executable},
                      sort_keys=True, default=str)
    return folder / f"w-{hashlib.sha256(text.encode()).hexdigest()[:24]}.sock"
