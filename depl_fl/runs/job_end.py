"""The exit status of the jobs this process has finished, for a Ctrl-C or SIGTERM that comes after.

A job is finished once its ``results.json`` is final (``completed``,
``diverged``, ``stalled``, ``infeasible``, ``failed``). A signal that arrives
later -- while Ray shuts down, Hydra tears the job down, or the interpreter
exits -- interrupts nothing, so the process ends with the job's own exit
status (the :mod:`depl_fl.errors` table), not 130 or 143. The final write and
:func:`record_job_end` happen with those signals held (:func:`signals_held`),
so that a signal lands before both or after both.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_ENDED: dict[str, int] = {}
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
#: Blocks of :func:`signals_held` running now, in any thread, and the stop signals that came meanwhile.
_HOLDING = [0]
_HELD: list[int] = []
_HOLD_LOCK = threading.RLock()  # reentrant: the handler may run in the main thread while it holds it


def _key(out_dir: str | Path) -> str:
    return str(Path(out_dir).resolve())


def record_job_end(out_dir: str | Path, status: int) -> None:
    """Record that the job writing into ``out_dir`` has finished with exit status ``status``."""
    _ENDED[_key(out_dir)] = int(status)


def job_end_status(out_dir: str | Path) -> int | None:
    """The exit status the job of ``out_dir`` finished with in this process; ``None`` while it runs."""
    return _ENDED.get(_key(out_dir))


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the block runs; deliver them after it.

    Blocking them in the calling thread is not enough: the system hands a
    signal to any thread that does not block it, and Python then runs the
    handler in the main thread at once, inside the block. Handlers wrapped by
    :func:`deferred_while_held` therefore keep such a signal until the last
    block ends, which raises it again.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    with _HOLD_LOCK:
        _HOLDING[0] += 1
    try:
        yield
    finally:
        with _HOLD_LOCK:
            _HOLDING[0] -= 1
            pending = [] if _HOLDING[0] else list(_HELD)
            if not _HOLDING[0]:
                _HELD.clear()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        for signum in pending:
            signal.raise_signal(signum)


def deferred_while_held(handler: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
    """``handler`` for a stop signal, run after every :func:`signals_held` block now running has ended."""

    def deferring(signum: int, frame: Any) -> None:
        with _HOLD_LOCK:
            if _HOLDING[0]:
                if signum not in _HELD:
                    _HELD.append(signum)
                return
        handler(signum, frame)

    return deferring
