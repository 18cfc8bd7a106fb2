"""A small content-addressed disk cache, safe for concurrent processes.

Flower deployments start one ClientApp process per message, so whatever a
node computes once (its data partition, the composed run configuration) is
kept on the node's local disk, in a file named by a hash of everything it
depends on. Writers go through a temporary file in the same folder and
:func:`os.replace`, so concurrent processes never see a partial file; the
last writer wins with identical content. Readers treat an unreadable file as
a miss. Standard library only (numpy is imported by the callers that need it).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

ENV_DIR = "DEPL_NODE_CACHE_DIR"
"""Environment variable naming the node cache folder (overrides the XDG default)."""


def content_key(obj: Any, length: int = 24) -> str:
    """Hash of a JSON-serialisable object, independent of mapping order."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def node_cache_dir(node_config: Mapping[str, Any] | None = None) -> Path:
    """The node's cache folder.

    In order: the node config's ``cache-dir`` (``flower-supernode --node-config
    'cache-dir="/var/cache/depl"'``), ``$DEPL_NODE_CACHE_DIR``, then
    ``$XDG_CACHE_HOME/depl-fl`` (default ``~/.cache/depl-fl``).
    """
    explicit = (node_config or {}).get("cache-dir") or os.environ.get(ENV_DIR)
    if explicit:
        return Path(str(explicit)).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "depl-fl"


def atomic_write(path: Path, write: Callable[[Any], None], *, binary: bool = True,
                 durable: bool = True) -> None:
    """Create ``path`` atomically: ``write(file)`` fills a temporary file that replaces it.

    A reader, or a process killed at any point, sees the old or the new
    complete file (the kernel does the replace). ``durable``: the new content
    is on the disk (``fsync``) before it replaces the old, so an OS crash or
    power loss keeps it too; without, the kernel writes it back later.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide results from other users
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            write(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """This process's file-creation mask (``/proc/self/status``; else by setting and restoring it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def path_stamp(value: Any) -> list[Any] | None:
    """``[path, mtime_ns, size]`` of an existing file or folder, else ``None``.

    Part of a cache key for data read from a local path, so that replacing the
    data (or touching the folder) invalidates the cached partition.
    """
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        return None
    try:
        st = os.stat(value)
    except (OSError, ValueError):
        return None
    return [os.path.abspath(value), st.st_mtime_ns, st.st_size]


def read_json(path: Path) -> Any | None:
    """The JSON content of ``path``, or ``None`` when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as JSON to ``path``."""
    atomic_write(path, lambda fh: json.dump(obj, fh, sort_keys=True), binary=False)
