"""The ``--set NAME=NUMBER`` arguments of the scripts that re-make plans with changed constants."""

from __future__ import annotations

import sys


def number_settings(items: list[str]) -> dict[str, float] | None:
    """``{NAME: NUMBER}`` of the ``NAME=NUMBER`` items, a later one of a name winning.

    At the first item that is not ``NAME=NUMBER``: None, after a one-line error on stderr.
    """
    changes = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            changes[name] = float(value)
        except ValueError:  # a number missing ("NAME", "NAME=") or not one
            print(f"error: --set {item!r}: expected NAME=NUMBER", file=sys.stderr)
            return None
    return changes
