"""The memo of the value made from the last object (by identity) that the per-round caches share."""

from __future__ import annotations

import gc

from depl_fl.identity_memo import LastObjectMemo


class _Box:
    def __init__(self, value: int) -> None:
        self.value = value


def test_the_value_is_made_once_per_object_and_tag_and_again_for_another() -> None:
    memo: LastObjectMemo[int] = LastObjectMemo()
    calls: list[int] = []
    a, b = _Box(1), _Box(1)

    def make(box: _Box) -> int:
        calls.append(box.value)
        return box.value * 10

    assert memo.get(a, lambda: make(a)) == 10 and memo.get(a, lambda: make(a)) == 10
    assert calls == [1]
    assert memo.get(b, lambda: make(b)) == 10 and calls == [1, 1]  # equal but another object
    assert memo.get(b, lambda: make(b), tag="m") == 10 and calls == [1, 1, 1]


def test_the_memo_does_not_keep_its_object_alive() -> None:
    memo: LastObjectMemo[int] = LastObjectMemo()
    box = _Box(3)
    memo.get(box, lambda: 30)
    gone = memo._ref
    del box
    gc.collect()
    assert gone is not None and gone() is None
