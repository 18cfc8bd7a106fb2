"""User-facing error types: each carries a one-line message and an exit status."""

from __future__ import annotations


class DeplError(Exception):
    """Base class for errors caused by user input; printed as one line, no traceback."""

    exit_status = 2


class ScenarioError(DeplError, ValueError):
    """A scenario, plan or target is malformed (exit status 2)."""


class InfeasibleError(DeplError):
    """No dependable plan exists (exit status 3)."""

    exit_status = 3
