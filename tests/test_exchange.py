"""Round exchange on a deployment grid: replies are seen within a fraction of a second of arriving,
with the semantics of Flower's send_and_receive (error replies kept, partial replies at the timeout)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("flwr")

from types import SimpleNamespace  # noqa: E402

from flwr.superlink.grid.http_grid import HttpGrid  # noqa: E402

from strategies.exchange import send_and_receive  # noqa: E402


class ScriptedGrid(HttpGrid):
    """A deployment grid whose nodes reply ``delays[i]`` seconds after the push (no SuperLink)."""

    def __init__(self, delays: list[float | None], error_at: int | None = None) -> None:  # no super():
        self.delays, self.error_at = delays, error_at  # the real one connects to a SuperLink
        self.pushed: list[SimpleNamespace] = []
        self.pulls = 0
        self.t0 = 0.0

    def push_messages(self, messages):  # noqa: D102
        self.pushed = list(messages)
        self.t0 = time.monotonic()
        return [f"m{i}" for i in range(len(self.pushed))]

    def pull_messages(self, message_ids):  # noqa: D102
        self.pulls += 1
        now = time.monotonic() - self.t0
        return [_reply(mid, error=int(mid[1:]) == self.error_at) for mid in sorted(message_ids)
                if self.delays[int(mid[1:])] is not None and now >= self.delays[int(mid[1:])]]


def _reply(mid: str, error: bool = False) -> SimpleNamespace:
    """What the exchange reads of a reply: the message it answers (plus, here, the node and an error)."""
    return SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=mid), node=int(mid[1:]),
                           has_error=lambda: error)


def _messages(n: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(dst_node_id=i + 1) for i in range(n)]


def test_replies_are_seen_within_a_poll_of_the_last_arrival():
    grid = ScriptedGrid([0.3, 0.6, 0.9])
    t0 = time.monotonic()
    replies = send_and_receive(grid, _messages(3), timeout=30, poll_s=0.05)
    took = time.monotonic() - t0
    assert sorted(r.node for r in replies) == [0, 1, 2]
    # Flower's own loop asks every 3 s: the last reply (0.9 s) would be seen at 3 s.
    assert 0.9 <= took < 1.5, took
    assert grid.pulls >= 10


def test_error_replies_are_returned_like_any_reply():
    grid = ScriptedGrid([0.1, 0.2], error_at=1)
    replies = send_and_receive(grid, _messages(2), timeout=30, poll_s=0.05)
    assert len(replies) == 2 and sum(r.has_error() for r in replies) == 1


def test_timeout_returns_the_replies_in_by_then():
    grid = ScriptedGrid([0.1, None])
    t0 = time.monotonic()
    replies = send_and_receive(grid, _messages(2), timeout=0.6, poll_s=0.05)
    assert [r.node for r in replies] == [0]
    assert 0.55 <= time.monotonic() - t0 < 1.5


def test_other_grids_keep_their_own_send_and_receive():
    class Plain:
        def __init__(self) -> None:
            self.calls = []

        def send_and_receive(self, messages, *, timeout=None):
            self.calls.append(timeout)
            return iter(["reply"])

    grid = Plain()
    assert send_and_receive(grid, _messages(1), timeout=7.0) == ["reply"]
    assert grid.calls == [7.0]
