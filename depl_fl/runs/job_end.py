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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ENDED: dict[str, int] = {}
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


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
    """Hold Ctrl-C and SIGTERM for the calling thread while the block runs; deliver them after it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
