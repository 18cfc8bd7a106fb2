"""End-to-end: a 2-round federated job writes a valid results.json (in-process; Ray marked slow)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
TINY = ["num_clients=3", "profile.source=inprocess", "profile.seeds=1", "profile.rounds=3",
        "profile.switch_at=[2]",
        "target.loss=2.2", "target.prob=0.6", "target.max_rounds=2", "tracking.enabled=false",
        "planner.mc_trajectories=20000"]
#: TINY without the in-process pilots' keys (federated profiling refuses keys it does not read).
TINY_FEDERATED = [k for k in TINY if not k.startswith("profile.")]


def _run(tmp_path: Path, extra: list[str], flags: tuple[str, ...] = (),
         base: list[str] = TINY) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "RAY_DEDUP_LOGS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "depl_fl.main", *flags, *base, f"profile.cache_dir={tmp_path / 'cache'}",
         f"hydra.run.dir={tmp_path / 'out'}", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _check(proc: subprocess.CompletedProcess, tmp_path: Path) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    path = Path(last)
    assert path == (tmp_path / "out" / "results.json").resolve()
    doc = json.loads(path.read_text())
    s = doc["summary"]
    assert 1 <= len(doc["rounds"]) <= 2 and s["rounds"] == len(doc["rounds"])
    for r in doc["rounds"]:
        assert {"round", "model", "clients", "loss", "accuracy", "test_loss", "test_accuracy",
                "predicted_quantile", "energy_j", "round_time_s", "wall_s"} <= set(r)
        assert r["energy_j"] > 0 and r["round_time_s"] > 0 and r["loss"] >= 0 and r["test_loss"] >= 0
    assert s["cost_j"] == pytest.approx(sum(r["energy_j"] for r in doc["rounds"]))
    assert s["final_test_loss"] == doc["rounds"][-1]["test_loss"] and s["met_on"] == "test"
    assert s["met"] == (s["final_test_loss"] <= 2.2) and s["method"] == "depl" and doc["seed"] == 0
    assert doc["config"]["num_clients"] == 3 and (path.parent / "loss.png").stat().st_size > 1000
    return doc


def test_inprocess_job_writes_results(tmp_path):
    _check(_run(tmp_path, ["simulation=inprocess"]), tmp_path)


def test_impossible_target_is_one_line(tmp_path):
    proc = _run(tmp_path, ["simulation=inprocess", "target.loss=0.0", "target.prob=0.99"])
    assert proc.returncode == 3, proc.stderr[-2000:]
    err = [line for line in proc.stderr.strip().splitlines() if line.startswith("depl-fl:")]
    assert len(err) == 1 and "no dependable plan" in err[0]
    # The job's round cap (target.max_rounds=2) is one of the limits the user can relax: named.
    assert "and 2 rounds (max_rounds)" in err[0] and "or target.max_rounds" in err[0]
    # ... and says where training would start, so a target far below it reads as such.
    assert re.search(r"is not reachable from loss \d+\.\d+ \(", err[0]), err[0]
    # A loss of 0 is out of reach at any deadline: the line says more deadline does not make a plan.
    assert "4x the deadline reaches" in err[0] and "more deadline alone does not make one" in err[0]
    # The second search (the longer deadline) is announced, so a slow answer does not look like a hang.
    announced = (r"planning: no dependable plan within \S+ s and 2 rounds \(max_rounds\) \(best "
                 r"reachable probability [0-9.e-]+\); planning again within \S+ s")
    assert re.search(announced, proc.stdout), proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("override, key", [("target.prob=2", "target.prob"),
                                           ("profile.explore.max_deadline_share=1.5",
                                            "profile.explore.max_deadline_share")])
def test_bad_config_value_is_one_line(tmp_path, override, key):
    proc = _run(tmp_path, ["simulation=inprocess", override])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"depl-fl: config {key}")


@pytest.mark.slow
def test_ray_job_writes_results(tmp_path):
    _check(_run(tmp_path, ["simulation=ray"]), tmp_path)


@pytest.mark.slow
def test_ray_job_profiles_through_the_grid(tmp_path):
    """Federated profiling under Ray: the exploration rounds run in the ClientApps (Ray actors)."""
    proc = _run(tmp_path, ["simulation=ray", "profile.source=federated", "profile.explore.rounds=2",
                           "profile.explore.stop_loss_factor=null", "profile.explore.stop_when_met=false",
                           "profile.explore.switch_rounds=[2]", "profile.explore.min_points_per_level=1",
                           "target.loss=1.0", "target.prob=0.5", "target.deadline_s=1e6",
                           "target.max_rounds=4"], base=TINY_FEDERATED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(Path(proc.stdout.strip().splitlines()[-1]).read_text())
    phases = [r["phase"] for r in doc["rounds"]]
    assert phases[:2] == ["profile", "profile"] and set(phases[2:]) <= {"train"}
    s = doc["summary"]
    assert s["profile_rounds"] == 2 and s["profile_energy_j"] > 0
    assert s["total_energy_j"] == pytest.approx(s["profile_energy_j"] + s["cost_j"])


def test_short_multirun_produces_a_report(tmp_path):
    """2 seeds x 2 methods x 2 rounds through Hydra multirun, then ``depl-fl report``."""
    sweep = tmp_path / "multi"
    proc = _run(tmp_path, ["simulation=inprocess", "seed=0,1", "method=depl,expectation",
                           f"hydra.sweep.dir={sweep}"], flags=("-m",))
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = [json.loads(p.read_text()) for p in sorted(sweep.rglob("results.json"))]
    assert len(docs) == 4
    out = tmp_path / "report"
    rep = subprocess.run([sys.executable, "-m", "depl_fl.cli", "report", str(sweep), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    groups = {g["method"]: g for g in report["groups"]}
    assert set(groups) == {"depl", "expectation"}
    for method, group in groups.items():
        mine = [d for d in docs if d["summary"]["method"] == method]
        assert group["runs"] == len(mine) == 2
        assert group["successes"] == sum(d["summary"]["final_test_loss"] <= 2.2 for d in mine)
        assert group["energy_mean_j"] == pytest.approx(sum(d["summary"]["cost_j"] for d in mine) / 2)
    for name in ("report.md", "final_loss_cdf.png", "energy.png"):
        assert (out / name).stat().st_size > 0


@pytest.mark.slow
def test_ray_job_with_faulty_clients_rejects_them_and_finishes(tmp_path):
    """Fault injection reaches Ray's ClientApps (config by closure); every NaN reply is rejected."""
    doc = _check(_run(tmp_path, ["simulation=ray", "faults.clients=[c0,c1,c2]", "faults.kind=nan"]),
                 tmp_path)
    for r in doc["rounds"]:
        assert r["replied"] == []
        assert {x["client"] for x in r["rejected"]} == set(r["clients"])
        assert all("NaN" in x["reason"] for x in r["rejected"])
    assert doc["summary"]["rejected_replies"] == sum(len(r["clients"]) for r in doc["rounds"])
