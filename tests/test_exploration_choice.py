"""The exploration follows tracking: ``auto`` resolves to the frugal exploration with tracking and to the
thorough one without; ``profile=frugal`` and ``profile=thorough`` force theirs; a bad word is one line,
exit status 2; a job records the resolved values."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depl_fl.errors import ScenarioError
from depl_fl.runs.exploration_choice import FRUGAL, THOROUGH, exploration_values, resolve_exploration

ROOT = Path(__file__).resolve().parent.parent
AUTO_CFG = {"tracking": {"enabled": True},
            "profile": {"explore": {"clients": "auto", "value_stop": "auto", "rounds": 8},
                        "plan_regime": {"rate_window": "auto", "power": 1.08}}}


def _chosen(cfg):
    explore, regime = cfg["profile"]["explore"], cfg["profile"]["plan_regime"]
    return {"clients": explore["clients"], "value_stop": explore["value_stop"],
            "rate_window": regime["rate_window"]}


def test_auto_is_frugal_with_tracking_and_thorough_without():
    assert FRUGAL == {"clients": "cheapest", "value_stop": True, "rate_window": 0.5}
    assert THOROUGH == {"clients": "all", "value_stop": False, "rate_window": 1.0}
    assert exploration_values(True) == FRUGAL and exploration_values(False) == THOROUGH
    before = copy.deepcopy(AUTO_CFG)
    assert _chosen(resolve_exploration(AUTO_CFG)) == FRUGAL
    assert AUTO_CFG == before  # pure: the input is left as it was
    off = {**AUTO_CFG, "tracking": {"enabled": False}}
    assert _chosen(resolve_exploration(off)) == THOROUGH
    assert _chosen(resolve_exploration(AUTO_CFG, tracking=False)) == THOROUGH
    resolved = resolve_exploration(AUTO_CFG)
    assert resolved["profile"]["explore"]["rounds"] == 8
    assert resolved["profile"]["plan_regime"]["power"] == 1.08
    assert resolve_exploration(resolved, tracking=False) == resolved  # a resolved config stays as it is


def test_measured_device_costs_explore_every_cluster():
    measured = {**AUTO_CFG, "cost": {"source": "measured"}}
    assert _chosen(resolve_exploration(measured)) == {**FRUGAL, "clients": "all"}
    assert _chosen(resolve_exploration(AUTO_CFG, measured=True)) == {**FRUGAL, "clients": "all"}
    assert _chosen(resolve_exploration({**measured, "tracking": {"enabled": False}})) == THOROUGH
    assert exploration_values(True, measured=True) == {**FRUGAL, "clients": "all"}


def test_explicit_values_are_kept_whatever_tracking_says():
    cfg = copy.deepcopy(AUTO_CFG)
    cfg["profile"]["explore"].update(clients="all", value_stop=False)
    assert _chosen(resolve_exploration(cfg)) == {"clients": "all", "value_stop": False, "rate_window": 0.5}


@pytest.mark.parametrize("key,word,allowed", [
    ("clients", "few", "all, cheapest or auto"),
    ("value_stop", "sometimes", "true, false or auto"),
    ("rate_window", "half", r"a number in \(0, 1\] or auto"),
])
def test_another_word_is_one_line(key, word, allowed):
    cfg = copy.deepcopy(AUTO_CFG)
    section = "plan_regime" if key == "rate_window" else "explore"
    cfg["profile"][section][key] = word
    with pytest.raises(ScenarioError, match=f"^config profile.{section}.{key}={word}: must be {allowed}$"):
        resolve_exploration(cfg)


hydra = pytest.importorskip("hydra")
from depl_fl.runs.runconfig import compose_config, validate  # noqa: E402


def test_the_default_profile_follows_tracking_through_hydra():
    assert _chosen(compose_config([])) == FRUGAL
    assert _chosen(compose_config(["tracking.enabled=false"])) == THOROUGH
    assert compose_config([])["profile"] == compose_config(["profile=frugal"])["profile"]
    off = compose_config(["tracking.enabled=false"])["profile"]
    assert off == compose_config(["profile=thorough", "tracking.enabled=false"])["profile"]


def test_frugal_and_thorough_force_their_exploration():
    assert _chosen(compose_config(["profile=frugal", "tracking.enabled=false"])) == FRUGAL
    assert _chosen(compose_config(["profile=thorough"])) == THOROUGH
    assert _chosen(compose_config(["profile.explore.value_stop=false"])) == {**FRUGAL, "value_stop": False}


def test_a_resolved_config_validates_again():
    validate(compose_config([]))
    validate(compose_config(["cost.source=measured"]))
    validate(compose_config(["tracking.enabled=false", "profile.source=inprocess"]))
    validate(compose_config(["profile.source=inprocess"]))  # auto is no setting: pilots ignore it


def test_a_forced_exploration_is_refused_where_nothing_explores():
    with pytest.raises(ScenarioError, match="config profile.explore.value_stop=false: not read when "
                                            "profile.source=inprocess"):
        compose_config(["profile=thorough", "profile.source=inprocess"])


def test_a_hydra_job_refuses_a_bad_word_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", "simulation=inprocess",
                           "profile.explore.value_stop=maybe", f"hydra.run.dir={tmp_path / 'job'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("depl-fl")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines == ["depl-fl: config profile.explore.value_stop=maybe: must be true, false or auto"], \
        proc.stderr[-3000:]
    assert not (tmp_path / ".depl_cache").exists()


@pytest.mark.parametrize("tracking,chosen", [("true", FRUGAL), ("false", THOROUGH)])
def test_a_job_records_the_resolved_values(tmp_path, tracking, chosen):
    """A Hydra job's results.json says which exploration it ran, never auto."""
    import json

    pytest.importorskip("flwr")
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", "simulation=inprocess", "num_clients=3",
                           "target.loss=2.5", "output.plot=false", f"tracking.enabled={tracking}",
                           f"hydra.run.dir={tmp_path / 'job'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "job" / "results.json").read_text())
    assert _chosen(doc["config"]) == chosen
    assert doc["summary"]["profile_rounds"] >= 1
