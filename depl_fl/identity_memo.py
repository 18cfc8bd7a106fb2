"""A value kept with the last object it was made from, compared by identity.

The scenario of a run is immutable (a changed one is a new object) and is read
again every round: its candidate client sets, its checkpoint pickle and its
results section are made once per scenario object and reused while the run
keeps that object. A weak reference keeps the memo from holding the object alive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LastObjectMemo(Generic[T]):
    """``make()`` for the last ``(obj, tag)`` asked about, made again for another object or tag."""

    def __init__(self) -> None:
        self._ref: weakref.ref | None = None
        self._tag: Hashable = None
        self._value: Any = None

    def get(self, obj: Any, make: Callable[[], T], tag: Hashable = None) -> T:
        """The value for ``obj`` (by identity) and ``tag``; ``make()`` when they are not the last ones."""
        if self._ref is None or self._ref() is not obj or self._tag != tag:
            value = make()
            self._ref, self._tag, self._value = weakref.ref(obj), tag, value
        return self._value
