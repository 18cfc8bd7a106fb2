"""A logging handler that keeps each record's message, for tests that read a logger's lines."""

from __future__ import annotations

import logging


class LogLines(logging.Handler):
    """Keeps the formatted message of every record it handles in :attr:`lines`."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
