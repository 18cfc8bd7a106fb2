"""Arrays of Flower's ``Array`` records, read as ``np.load`` reads them, each header parsed once.

A Flower ``Array`` carries its values as ``.npy`` bytes, and ``Array.numpy()``
is ``np.load`` of them, which parses the header (a Python literal, through
:func:`ast.literal_eval`) of every array. A round's replies repeat the same few
headers (one per entry of the planned sub-network), so the server parses each
distinct header once and reads the values behind it directly; the result
equals ``np.load``'s (values, dtype, shape, memory order, a writable array of
its own). Anything unusual -- no ``.npy`` magic, another format version, an
object dtype, an empty array -- goes through ``np.load`` as before, errors
included.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

#: Flower's ``SType.NUMPY``: an Array serialised with ``np.save``.
NUMPY_STYPE = "numpy.ndarray"
_MAGIC = b"\x93NUMPY"
#: Distinct headers kept (a network has a few dozen entries at most; beyond, headers are parsed again).
_MAX_HEADERS = 1024
_HEADERS: dict[bytes, tuple[tuple[int, ...], bool, np.dtype]] = {}


def array_of(array: Any) -> np.ndarray:
    """``array.numpy()`` of a Flower ``Array`` (duck-typed: ``stype``, ``data``), header parsed once."""
    data = getattr(array, "data", None)
    if getattr(array, "stype", None) != NUMPY_STYPE or not isinstance(data, bytes):
        return array.numpy()
    return npy_loads(data)


def npy_loads(data: bytes) -> np.ndarray:
    """``np.load(io.BytesIO(data), allow_pickle=False)`` of one ``.npy`` array."""
    header = _header(data)
    if header is None:
        return np.load(io.BytesIO(data), allow_pickle=False)
    (shape, fortran, dtype), offset = header
    count = math.prod(shape)
    if count == 0 or dtype.itemsize == 0 or len(data) - offset < count * dtype.itemsize:
        return np.load(io.BytesIO(data), allow_pickle=False)  # np.load's own result or error
    values = np.frombuffer(data, dtype=dtype, count=count, offset=offset).copy()
    return values.reshape(shape[::-1]).transpose() if fortran else values.reshape(shape)


def _header(data: bytes) -> tuple[tuple[tuple[int, ...], bool, np.dtype], int] | None:
    """``((shape, fortran order, dtype), offset of the values)``, or None where ``np.load`` must read it."""
    if len(data) < 12 or data[:6] != _MAGIC or data[6] not in (1, 2) or data[7] != 0:
        return None
    start = 10 if data[6] == 1 else 12
    offset = start + int.from_bytes(data[8:start], "little")
    key = data[:offset]
    parsed = _HEADERS.get(key)
    if parsed is None:
        fp = io.BytesIO(key)
        try:
            version = npy_format.read_magic(fp)
            read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            parsed = read(fp)
        except ValueError:
            return None
        if parsed[2].hasobject:
            return None
        if len(_HEADERS) < _MAX_HEADERS:
            _HEADERS[key] = parsed
    return parsed, offset
