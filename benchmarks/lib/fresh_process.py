"""Run one benchmark function in a fresh process, so that it has its own peak RSS and its own imports."""

from __future__ import annotations

import logging
import multiprocessing as mp
from typing import Any, Callable


def _child(queue: Any, fn: Callable[..., Any], args: tuple) -> None:
    logging.getLogger("flwr").setLevel(logging.ERROR)
    try:
        queue.put(fn(*args))
    except BaseException as exc:  # the parent reports it
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a fresh (spawned) process; raises on the child's error.

    ``fn`` must be a module-level function (the child imports it by name), its
    ``args`` picklable.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn, args))
    proc.start()
    result = queue.get()
    proc.join()
    if isinstance(result, dict) and "error" in result:
        raise RuntimeError(f"{fn.__name__}{args}: {result['error']}")
    return result
