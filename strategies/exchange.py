"""Send a round's messages and collect the replies as soon as they reach the SuperLink.

Flower 1.41's deployment grid (``HttpGrid``, the ServerApp's link to the
SuperLink) asks for replies every 3 s in ``send_and_receive``: a round whose
replies are all in a moment after an ask waits up to 3 s more before the
server sees them, and that wait delays the next round's messages. The
SuperNodes ask for work on a 3 s period of their own (counted from their last
reply), so a server that answers late misses a node's next ask and the next
round starts a whole period later (docs/DEPLOYMENT.md, "Fast rounds").
:func:`send_and_receive` asks every ``poll_s`` instead, with the same
semantics (replies in arrival order, the SuperLink's error replies included,
those in at the timeout). Other grids (simulation, in process) already
deliver at once and keep their own ``send_and_receive``. Where asked, on a
deployment grid, it also says when each reply arrived (seconds after the push
began): what a node's part of a round took, its training and transfers
included, as the server saw it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

#: Seconds between two asks for replies on a deployment grid (Flower's own: 3 s).
REPLY_POLL_S = 0.2


def _polls_slowly(grid: Grid) -> bool:
    """Whether ``grid`` is Flower's deployment grid with its 3 s reply polling."""
    try:
        from flwr.superlink.grid.http_grid import HttpGrid
    except ImportError:  # another Flower layout: keep the grid's own loop
        return False
    return isinstance(grid, HttpGrid)


def send_and_receive(grid: Grid, messages: Iterable[Message], timeout: float,
                     poll_s: float = REPLY_POLL_S, arrivals: dict[str, float] | None = None) -> list[Message]:
    """Push ``messages`` and return their replies, asking for them every ``poll_s`` seconds.

    Parameters
    ----------
    grid : Grid
        The run's grid; only a deployment grid is polled here (see module doc).
    messages : iterable of Message
        The round's messages.
    timeout : float
        Seconds to wait for all replies; those in by then are returned.
    poll_s : float
        Seconds between two asks for replies.
    arrivals : dict or None
        On a deployment grid, filled with the reply's ``reply_to_message_id``
        -> seconds from the push to the ask that saw it. Other grids say
        nothing (an in-process grid runs the clients one after the other
        inside its call: no reply has an arrival of its own).

    Returns
    -------
    list of Message
        The replies received, error replies included.
    """
    if not _polls_slowly(grid):
        return list(grid.send_and_receive(messages, timeout=timeout))
    t0 = time.monotonic()
    arrivals = {} if arrivals is None else arrivals
    pending = {mid for mid in grid.push_messages(messages) if mid}
    deadline = t0 + timeout
    replies: list[Message] = []
    while pending:
        arrived = list(grid.pull_messages(pending))
        replies += arrived
        seen = time.monotonic() - t0
        arrivals.update({r.metadata.reply_to_message_id: seen for r in arrived})
        pending -= {r.metadata.reply_to_message_id for r in arrived}
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        time.sleep(min(poll_s, left))
    return replies
