"""Command-line plumbing shared by the entry points: one-line argparse errors and logging.

Logger hierarchy: every logger of the project is named ``depl_fl.<part>``
(``depl_fl.server``, ``depl_fl.controller``, ``depl_fl.profiling``,
``depl_fl.main``), so one handler on ``depl_fl`` shows them all, also under
``flwr run`` where nothing else configures logging.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, NoReturn

PROG = "depl-fl"
ROOT_LOGGER = "depl_fl"


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parse_or_status(parser: argparse.ArgumentParser,
                    argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse ``argv`` (default ``sys.argv[1:]``); an int is the exit status of ``--help`` or an error."""
    try:
        return parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def log_to(stream: IO[str] | None = None, *, level: int = logging.INFO,
           prefix: str = "[depl] ", quiet_flower: bool = False) -> logging.Logger:
    """Send the ``depl_fl.*`` log lines to ``stream`` (default stdout), once per process.

    Parameters
    ----------
    stream : text stream, optional
        Where the lines go; stdout is what ``flwr run --stream`` shows.
    level : int
        Level of the ``depl_fl`` logger.
    prefix : str
        Printed before every message.
    quiet_flower : bool
        Also lower Flower's own logger, and that of the migrations its link state runs
        (alembic), to warnings.

    Returns
    -------
    logging.Logger
        The ``depl_fl`` logger.
    """
    if quiet_flower:
        logging.getLogger("flwr").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
    logger = logging.getLogger(ROOT_LOGGER)
    logger.setLevel(level)
    if not any(getattr(h, "_depl", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stdout if stream is None else stream)
        handler.setFormatter(logging.Formatter(f"{prefix}%(message)s"))
        handler._depl = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    return logger


#: Seconds a step may run before :func:`notice_if_slow` says it is still running.
SLOW_STEP_S = 10.0


@contextlib.contextmanager
def notice_if_slow(say: Callable[[str], object], message: str,
                   after_s: float = SLOW_STEP_S) -> Iterator[None]:
    """Say ``message`` once if the block is still running after ``after_s`` seconds.

    A planner search for an unreachable target can run for tens of seconds before
    its one-line answer; a user who sees nothing meanwhile cannot tell it from a
    hang. A fast block prints nothing, so the usual output stays as it is.

    Parameters
    ----------
    say : callable
        Writes one line (``logger.info``, or a print to stderr).
    message : str
        The line, said from a timer thread while the block runs.
    after_s : float
        Seconds before it is said.
    """
    timer = threading.Timer(after_s, say, args=(message,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
