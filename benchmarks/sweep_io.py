"""The job records of a sweep folder, and a report written to a file or stdout (or both).

Shared by the analysis scripts that read a Hydra multirun (``results.json`` per job) and print one
Markdown table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def job_records(sweep: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every ``results.json`` under ``sweep``, in path order, with its parsed record.

    Parameters
    ----------
    sweep : Path
        A sweep folder (any depth); a path that is not a folder yields nothing.

    Yields
    ------
    tuple of Path and dict
        The file and its record.
    """
    if not sweep.is_dir():
        return
    for path in sorted(sweep.rglob("results.json")):
        yield path, json.loads(path.read_text(encoding="utf-8"))


def write_report(text: str, out: Path | None, data: Any = None) -> None:
    """Write ``text`` to ``out`` (its folder made as needed), or to stdout when ``out`` is None.

    With ``data`` and a file, ``data`` is also written as JSON beside it (``out`` with ``.json``).
    """
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    if data is not None:
        out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def save_and_print(text: str, out: Path | None) -> None:
    """Write ``text`` to ``out`` (its folder made as needed) when ``out`` is given, and print it as is."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)


def labelled_folders(items: list[str], error: str) -> list[tuple[str, Path]] | None:
    """Each ``LABEL=FOLDER`` of ``items`` as ``(LABEL, FOLDER)``, in their order.

    At the first item that is not ``LABEL=FOLDER`` of an existing folder: None, after printing
    ``error`` (its ``{item!r}`` filled in with that item) on stderr.
    """
    pairs = []
    for item in items:
        label, sep, folder = item.partition("=")
        if not sep or not Path(folder).is_dir():
            print(error.format(item=item), file=sys.stderr)
            return None
        pairs.append((label, Path(folder)))
    return pairs
