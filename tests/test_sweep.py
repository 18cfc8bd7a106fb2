"""Sweeps run every job and report the failed ones; Hydra override errors are one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra")

from depl_fl.sweep import split_argv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# run_job replaced by a stand-in that writes results.json: the test is about the sweep, not training.
FAKE_JOB = """
import json, sys
from pathlib import Path
import depl_fl.main as m

def fake_run_job(cfg, out_dir):
    path = Path(out_dir) / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"prob": cfg["target"]["prob"]}))
    return path

m.run_job = fake_run_job
sys.argv = ["depl_fl.main"] + sys.argv[1:]
m.main()
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-c", FAKE_JOB, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_sweep_continues_after_a_failing_job_and_exits_non_zero_listing_it(tmp_path: Path):
    proc = _run(tmp_path, "-m", "target.prob=0.9,1.5,0.8", "hydra.sweep.dir=sweep")
    assert proc.returncode == 2, proc.stderr
    done = sorted(p.parent.name for p in (tmp_path / "sweep").rglob("results.json"))
    assert len(done) == 2 and all("1.5" not in d for d in done)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("depl-fl: 1 sweep job(s) failed: #1 (target.prob=1.5)"), proc.stderr
    assert "target.prob" in proc.stderr and "Traceback" not in proc.stderr


def test_sweep_without_failures_exits_zero(tmp_path: Path):
    proc = _run(tmp_path, "-m", "target.prob=0.9,0.8", "hydra.sweep.dir=sweep")
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "sweep").rglob("results.json"))) == 2


@pytest.mark.parametrize("args, word", [
    (["no_such_key=1"], "no_such_key"),
    (["model=nope"], "model"),
    (["seed=["], "override"),
    (["-m", "model=digits_cnn,nope"], "model=nope"),
])
def test_hydra_override_errors_are_one_line_with_exit_2(tmp_path: Path, args, word):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("depl-fl: ") and word in lines[0], proc.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


def test_split_argv_finds_overrides_and_modes():
    assert split_argv(["-m", "seed=1,2", "--config-dir", "x"]) == (["seed=1,2"], True, True)
    assert split_argv(["seed=1", "hydra.run.dir=o"]) == (["seed=1", "hydra.run.dir=o"], False, False)
    assert split_argv(["--cfg", "job", "seed=1"])[2] is True
