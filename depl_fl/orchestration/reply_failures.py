"""What went wrong on the clients, in one line: the gist of their error replies.

A ClientApp that raises sends back an error reply whose reason holds the
whole traceback (under Ray: the actor's, the ClientApp's and the chained
exceptions). When no reply at all could be used, the job stops with one line
naming the first client and the exception that stopped it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

#: ``[module.]NameError: message`` or ``[module.]NameException: message`` on a line of its own.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception|Warning)): (\S.*)$",
                             re.MULTILINE)
#: The prefix :func:`depl_fl.orchestration.reply_checks` gives the reason of an error reply.
_ERROR_REPLY = re.compile(r"^error reply \(code -?\d+\): ")
#: How :func:`strategies.robust_aggregation.norm_rejection` begins a rejection's reason.
NORM_REJECTION = "update norm "
#: Wrappers around the ClientApp's own exception, whose message repeats it.
_WRAPPERS = {"ClientAppException", "RayTaskError"}


def error_gist(reason: str, limit: int = 400) -> str:
    """The exception behind an error reply's ``reason``: ``ValueError: message`` (at most ``limit`` chars).

    The first exception line that is not a wrapper (a chained traceback
    prints the root cause first); else the reason's first line.
    """
    reason = _ERROR_REPLY.sub("", reason, count=1)
    found = [m for m in _EXCEPTION_LINE.finditer(reason) if m.group(1) not in _WRAPPERS]
    if found:
        text = f"{found[0].group(1)}: {found[0].group(2)}".strip()
    else:
        text = reason.strip().splitlines()[0] if reason.strip() else "no reason given"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def no_usable_reply(phase: str, records: Iterable[Mapping[str, Any]]) -> str:
    """One line: ``phase`` had no usable reply in any of its rounds, and the first client's error.

    ``records`` are the rounds' records, each with ``rejected``: ``{"client", "reason"}``.
    """
    records = list(records)
    rejected = [r for rec in records for r in rec.get("rejected") or () if isinstance(r, Mapping)]
    line = f"{phase}: no client sent a usable reply in {len(records)} round(s)"
    if not rejected:
        return line
    first = rejected[0]
    line = f"{line}; {first.get('client')}: {error_gist(str(first.get('reason', '')))}"
    if all(str(r.get("reason", "")).startswith(NORM_REJECTION) for r in rejected):
        line += (" (every update was rejected as too large: is the local training diverging? Lower the "
                 "learning rate, train.lr, or raise aggregation.norm_factor)")
    return line
