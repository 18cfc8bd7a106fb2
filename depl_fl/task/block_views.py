"""The hint for a forward that views a layer's channels as blocks of a hard-coded count or size.

A forward such as ``x.view(b, 6, -1, h, w)`` (6 blocks) or
``x.view(b, -1, 4, h, w)`` (blocks of 4 channels) runs only at the channel
counts its number divides; a compression that keeps another count breaks it,
and the group is kept whole (:func:`depl_fl.task.subnets.kept_whole`). The
generic hint ("compute sizes from the tensor") does not say that compressions
keeping multiples of that number would run. The view is recognised from
torch's own error (``shape '[1, 6, -1, 8, 8]' is invalid for input of size
192``) and the arithmetic of the failing width alone: no extra forward. A view
that is not of the group's channels alone on dimension 1 (a batch of -1,
channels last, a concatenation of groups) is not recognised: the generic hint
stays.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

#: torch's error for a view or reshape whose shape does not divide the input.
_INVALID_SHAPE = re.compile(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)")

#: At most this many compressions suggested.
MAX_SUGGESTED = 4


def block_view(problem: str, batch: int, channels: int, kept: int) -> tuple[str, int] | None:
    """``("count", G)`` or ``("size", S)`` when ``problem`` is a block view of the kept channels, else None.

    Parameters
    ----------
    problem : str
        The first line of the failing forward's error.
    batch : int
        The example batch's size (the view's dimension 0).
    channels : int
        The layer's output channels in the full network.
    kept : int
        The channels the failing variant keeps.

    A block view here is ``[batch, G, -1, *rest]`` or ``[batch, -1, S, *rest]``
    of exactly the ``kept`` channels (``batch * kept * prod(rest)`` elements),
    whose number divides ``channels`` (the full network runs) but not ``kept``.
    """
    match = _INVALID_SHAPE.search(problem)
    if match is None:
        return None
    shape = [int(d) for d in match.group(1).split(",") if d.strip()]
    size = int(match.group(2))
    if len(shape) < 3 or shape[0] != batch or any(d <= 0 for d in shape[3:]):
        return None
    if batch * kept * math.prod(shape[3:]) != size:
        return None
    first, second = shape[1], shape[2]
    if second == -1 and first > 1:
        kind, number = "count", first
    elif first == -1 and second > 1:
        kind, number = "size", second
    else:
        return None
    if channels % number or not kept % number:
        return None
    return kind, number


def block_view_hint(problem: str, layer: str, batch: int, channels: int, compression: float,
                    kept_at: Callable[[float], int]) -> str | None:
    """What to change when layer ``layer``'s channels are viewed as blocks (:func:`block_view`), else None.

    ``kept_at(compression)`` is the number of channels a variant keeps; the
    compressions suggested keep multiples of the view's number (checked with it).
    """
    kept = kept_at(compression)
    found = block_view(problem, batch, channels, kept)
    if found is None:
        return None
    kind, number = found
    fitting = [c for c in (round(1.0 - m / channels, 6) for m in range(channels - number, 0, -number))
               if 0.0 < c < 1.0 and kept_at(c) % number == 0]
    if not fitting:
        return None
    viewed = f"{number} blocks (a count" if kind == "count" else f"blocks of {number} (a size"
    such = ", ".join(f"{c:g}" for c in fitting[:MAX_SUGGESTED])
    fix = "; or compute the block count from the tensor" if kind == "count" else ""
    return (f"the {channels} output channels of layer {layer!r} are viewed as {viewed} written into "
            f"the forward): a compression keeping a number of them that is not a multiple of {number} "
            f"cannot cut them ({compression:g} keeps {kept}); choose compressions keeping multiples of "
            f"{number} (such as {such}){fix}")
