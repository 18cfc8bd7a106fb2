"""A real Flower deployment on loopback: flower-superlink + 3 flower-supernodes + ``flwr run``.

Runs ``scripts/deploy_loopback.sh`` for 2 rounds and checks the ServerApp's
results.json and that no process the script started is left running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "deploy_loopback.sh"
BIN = Path(sys.executable).parent
TINY = ["profile.source=inprocess", "profile.seeds=1", "profile.rounds=3", "profile.switch_at=[2]",
        "target.loss=2.0", "target.prob=0.6", "tracking.enabled=false", "output.plot=false"]


def _superlink() -> str | None:
    local = BIN / "flower-superlink"
    return str(local) if local.exists() else shutil.which("flower-superlink")


def _live_pids_with_env(marker: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().split(") ")[-1].startswith("Z"):
                continue
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(_superlink() is None, reason="flower-superlink is not installed")
def test_loopback_deployment_runs_two_rounds(tmp_path):
    bin_dir = str(Path(_superlink()).parent)
    env = {**os.environ, "FLWR_BIN": bin_dir, "TMPDIR": str(tmp_path)}
    out = tmp_path / "out"
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "-n", "3", "-r", "2", "-o", str(out), "-t", "400", *TINY],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the script's trap stops what it started
        stdout, stderr = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # Every process the script started carries FLWR_HOME=<work dir>/...
        work = re.search(r"work dir (\S+)", stderr or "")
        leftovers = _live_pids_with_env(work.group(1)) if work else []
        for pid in leftovers:
            try:
                print("left running:", Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "))
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    assert work is not None, stderr[-3000:]
    assert leftovers == [], f"processes left running: {leftovers}: {stderr[-2000:]}"
    assert not Path(work.group(1)).exists()
    assert proc.returncode == 0, (stdout[-3000:], stderr[-3000:])
    path = out / "results.json"
    assert stdout.strip().splitlines()[-1] == str(path)
    assert "[depl] round 2:" in stdout
    doc = json.loads(path.read_text())
    summary = doc["summary"]
    assert summary["rounds"] == len(doc["rounds"]) == 2
    assert [r["round"] for r in doc["rounds"]] == [1, 2]
    assert summary["method"] == "depl" and doc["config"]["num_clients"] == 3
    assert summary["final_loss"] < summary["initial_loss"]
    assert doc["config"]["target"]["max_rounds"] == 2
    # The cluster of every client comes from its SuperNode's --node-config.
    assert {c["id"]: c["cluster"] for c in doc["scenario"]["clients"]} == \
        {"c0": "A", "c1": "B", "c2": "B"}
    for r in doc["rounds"]:
        assert r["replied"] == r["clients"] and r["rejected"] == []
        assert r["energy_j"] > 0 and r["round_time_s"] > 0 and r["loss"] >= 0
    for name in ("superlink.log", "supernode-0.log", "supernode-1.log", "supernode-2.log"):
        assert (out / "logs" / name).stat().st_size > 0
