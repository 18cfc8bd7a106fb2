"""The example app (examples/quickstart-depl) runs under ``flwr run`` in simulation with DepL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("flwr")

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "quickstart-depl"


def _stop_processes_naming(marker: str) -> None:
    """Terminate this machine's processes whose command line names ``marker`` (Linux /proc)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            pid = int(cmdline.parent.name)
            if pid != os.getpid() and marker in cmdline.read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            continue


@pytest.mark.slow
def test_quickstart_depl_runs_under_flwr_run(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text('[superlink]\ndefault = "local"\n\n'
                                      '[superlink.local]\noptions.num-supernodes = 3\n')
    out = tmp_path / "records.json"
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           # flwr run starts flower-superlink from PATH: the one beside this interpreter
           "PATH": os.pathsep.join([str(Path(os.sys.executable).parent), os.environ.get("PATH", "")])}
    flwr = Path(os.sys.executable).with_name("flwr")
    run_config = f'out-file="{out}" cache-dir="{tmp_path / "cache"}"'
    try:
        proc = subprocess.run([str(flwr), "run", ".", "local", "--stream", "--run-config", run_config],
                              cwd=APP, env=env, capture_output=True, text=True, timeout=900)
    finally:  # flwr leaves its local SuperLink running; a later run on this machine would reuse it
        _stop_processes_naming(str(home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.exists(), (proc.stdout + proc.stderr)[-3000:]
    doc = json.loads(out.read_text())
    assert doc["profile"], "the exploration rounds ran through the user's ClientApp"
    # The simulated nodes set no cluster=: DepL assigns the configured split and says so.
    assert {c["cluster-source"] for c in doc["clients"].values()} == {"assigned"}
    assert "clients: c0(A, " in proc.stdout and "set no node config cluster=" in proc.stdout
    rounds = doc["profile"] + doc["rounds"]
    assert all(r["bytes_down"] == r["modelled_bytes_down"] > 0 for r in rounds)
    assert all(r["bytes_up"] == r["modelled_bytes_up"] for r in rounds if not r["rejected"])
    assert doc["rounds"], "training rounds after the exploration"
    assert doc["final_loss"] < doc["profile"][0]["loss_before"]
