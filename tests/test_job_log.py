"""A job's console shows DepL's lines and Flower's warnings, not Flower's debug lines nor its link state's
setup."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import logging
from depl_fl.main import _quiet_flower
_quiet_flower()
import flwr.simulation  # what a Ray job imports after the logging is set up
print(logging.getLogger("flwr").getEffectiveLevel(),
      logging.getLogger("alembic.runtime.plugins").getEffectiveLevel())
"""


def test_flower_and_its_link_state_log_warnings_only():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    flwr_level, alembic_level = map(int, proc.stdout.split()[-2:])
    assert flwr_level == logging.WARNING and alembic_level == logging.WARNING
