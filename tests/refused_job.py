"""A custom-model job that DepL must refuse before its first round, run as a user runs it, for the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def refused_job(factory: str, overrides: list[str], tmp_path: Path) -> tuple[list[str], str]:
    """Run a two-client job of the network ``factory`` (``module:function``), ``overrides``, in ``tmp_path``.

    Asserts that it exits with status 2, without a traceback and before any round. Returns its
    ``depl-fl:`` lines of stderr and the whole stderr.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "depl_fl.main", "model=custom", f"model.factory={factory}", *overrides,
         "num_clients=2", "simulation=inprocess", f"hydra.run.dir={tmp_path}",
         f"profile.cache_dir={tmp_path / 'cache'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    results = tmp_path / "results.json"
    assert not results.exists() or '"rounds": []' in results.read_text()
    return [line for line in proc.stderr.strip().splitlines() if line.startswith("depl-fl:")], proc.stderr
