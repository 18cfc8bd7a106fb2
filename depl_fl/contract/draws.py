"""Standard-normal and Student-t draws, kept by the generator state they start from.

The planner's Monte Carlo runs every candidate plan, every re-plan and every
check of the remaining plan on the same few seeds; a draw of ``shape`` values
from a generator in a given state is a pure function of that state, so the
same arrays come up again and again (a tracked run re-plans from a known loss,
where no draw comes before the rounds'). This memo keeps the most recent large
draws with the generator state after them: asked again from the same state it
returns the same array and moves the generator on to the same state, bit for
bit what drawing again would give. Only ``PCG64`` generators (``default_rng``)
are looked up; any other one draws as usual.

The arrays returned are read-only and shared: compute into new arrays.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

# Draws smaller than this are made directly: reading and setting the generator state
# (about 3 microseconds) would cost more than the draw.
MIN_SIZE = 1024
# Bytes of draws kept (least recently used dropped first).
MAX_BYTES = 24 * 2**20

_lock = threading.Lock()
_kept: OrderedDict[Hashable, tuple[np.ndarray, dict]] = OrderedDict()
_bytes = 0


def standard_normal(rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
    """``rng.standard_normal(shape)``, the same values and the same state of ``rng`` after it (read-only)."""
    return _draw(rng, ("normal",), shape, lambda: rng.standard_normal(shape))


def standard_t(rng: np.random.Generator, dof: float, shape: int | tuple[int, ...]) -> np.ndarray:
    """``rng.standard_t(dof, shape)``, the same values and the same state of ``rng`` after it (read-only)."""
    return _draw(rng, ("t", float(dof)), shape, lambda: rng.standard_t(dof, shape))


def clear() -> None:
    """Forget every kept draw."""
    global _bytes
    with _lock:
        _kept.clear()
        _bytes = 0


def kept_bytes() -> int:
    """Bytes of draws kept now."""
    return _bytes


def _draw(rng: np.random.Generator, kind: tuple, shape: int | tuple[int, ...], make) -> np.ndarray:
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    bitgen = rng.bit_generator
    if math.prod(dims) < MIN_SIZE or type(bitgen) is not np.random.PCG64:
        return make()
    state = bitgen.state
    inner = state["state"]
    key = (kind, dims, inner["state"], inner["inc"], state["has_uint32"], state["uinteger"])
    with _lock:
        hit = _kept.get(key)
        if hit is not None:
            _kept.move_to_end(key)
    if hit is not None:
        bitgen.state = hit[1]
        return hit[0]
    values = make()
    values.flags.writeable = False
    _keep(key, values, bitgen.state)
    return values


def _keep(key: Hashable, values: np.ndarray, after: dict) -> None:
    global _bytes
    if values.nbytes > MAX_BYTES:
        return
    with _lock:
        if key in _kept:
            return
        _kept[key] = (values, after)
        _bytes += values.nbytes
        while _bytes > MAX_BYTES:
            _, (old, _) = _kept.popitem(last=False)
            _bytes -= old.nbytes
