"""User-facing error types: each carries a one-line message and an exit status.

Exit statuses of every entry point (``depl-fl`` and its sub-commands,
Hydra jobs and sweeps of ``depl_fl/main.py``):

===  ==========================================================================
0    success: a dependable plan written (``plan``), a valid plan checked
     (``evaluate``), a job or every job of a sweep finished
1    an unexpected failure (a bug: traceback), or a sweep job that failed so
2    bad input: a malformed file, option, override or value, or a setting the
     chosen mode does not read; one line on stderr, nothing started
3    no dependable plan: ``plan`` wrote ``"feasible": false``, a job found none
     after its exploration rounds, ``evaluate --require-dependable`` checked a
     valid plan that misses the target probability
4    the plan checked is invalid for the scenario and targets (``evaluate``:
     the JSON is still printed, with ``"valid": false`` and its errors)
130  interrupted by Ctrl-C (SIGINT); 143 by SIGTERM; results.json says so
     (a signal after the job finished interrupts nothing: its own status)
===  ==========================================================================

A sweep exits with the highest status of its failed jobs.
"""

from __future__ import annotations

#: ``depl-fl evaluate``: the plan checked is invalid (not a user mistake in the command line).
INVALID_PLAN_STATUS = 4


class DeplError(Exception):
    """Base class for errors caused by user input; printed as one line, no traceback."""

    exit_status = 2


class ScenarioError(DeplError, ValueError):
    """A scenario, plan or target is malformed (exit status 2)."""


class InfeasibleError(DeplError):
    """No dependable plan exists (exit status 3)."""

    exit_status = 3
