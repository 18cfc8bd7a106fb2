"""The exploration follows tracking: ``auto`` resolves to the frugal exploration with tracking and without
it to the one ``profile.explore.without_tracking`` names (cheap by default, thorough on request);
``profile=frugal`` and ``profile=thorough`` force theirs; a bad word is one line, exit status 2; a job
records the resolved values; a resumed job keeps its checkpoint's."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depl_fl.errors import ScenarioError
from depl_fl.runs.exploration_choice import (
    CHEAP,
    FRUGAL,
    THOROUGH,
    exploration_values,
    keep_recorded,
    resolve_exploration,
)

ROOT = Path(__file__).resolve().parent.parent
AUTO_CFG = {"tracking": {"enabled": True},
            "profile": {"explore": {"clients": "auto", "value_stop": "auto", "rounds": 8,
                                    "without_tracking": "cheap"},
                        "plan_regime": {"rate_window": "auto", "power": 1.08}}}


def _chosen(cfg):
    explore, regime = cfg["profile"]["explore"], cfg["profile"]["plan_regime"]
    return {"clients": explore["clients"], "value_stop": explore["value_stop"],
            "rate_window": regime["rate_window"]}


def _with_word(cfg, word):
    out = copy.deepcopy(cfg)
    if word is None:
        del out["profile"]["explore"]["without_tracking"]
    else:
        out["profile"]["explore"]["without_tracking"] = word
    return out


def test_auto_is_frugal_with_tracking_and_cheap_without():
    assert FRUGAL == {"clients": "cheapest", "value_stop": True, "rate_window": 0.5}
    assert CHEAP == {"clients": "cheapest", "value_stop": False, "rate_window": 1.0}
    assert THOROUGH == {"clients": "all", "value_stop": False, "rate_window": 1.0}
    assert exploration_values(True) == FRUGAL and exploration_values(False) == CHEAP
    assert exploration_values(False, without_tracking="thorough") == THOROUGH
    assert exploration_values(True, without_tracking="thorough") == FRUGAL
    before = copy.deepcopy(AUTO_CFG)
    assert _chosen(resolve_exploration(AUTO_CFG)) == FRUGAL
    assert AUTO_CFG == before  # pure: the input is left as it was
    off = {**AUTO_CFG, "tracking": {"enabled": False}}
    assert _chosen(resolve_exploration(off)) == CHEAP
    assert _chosen(resolve_exploration(AUTO_CFG, tracking=False)) == CHEAP
    resolved = resolve_exploration(AUTO_CFG)
    assert resolved["profile"]["explore"]["rounds"] == 8
    assert resolved["profile"]["plan_regime"]["power"] == 1.08
    assert resolve_exploration(resolved, tracking=False) == resolved  # a resolved config stays as it is


@pytest.mark.parametrize("tracking", [True, False])
def test_without_tracking_picks_the_static_exploration_only(tracking):
    """thorough: what auto stood for without tracking before the key (and still does where it is absent);
    with tracking the word changes nothing."""
    cfg = {**AUTO_CFG, "tracking": {"enabled": tracking}}
    thorough, absent = _with_word(cfg, "thorough"), _with_word(cfg, None)
    assert _chosen(resolve_exploration(thorough)) == (FRUGAL if tracking else THOROUGH)
    assert _chosen(resolve_exploration(absent)) == (FRUGAL if tracking else THOROUGH)
    assert _chosen(resolve_exploration(cfg)) == (FRUGAL if tracking else CHEAP)
    assert _chosen(resolve_exploration(cfg, without="thorough")) == (FRUGAL if tracking else THOROUGH)
    assert resolve_exploration(thorough)["profile"]["explore"]["without_tracking"] == "thorough"  # recorded


@pytest.mark.parametrize("word", ["fast", "auto", "all"])
def test_a_bad_without_tracking_is_one_line_whatever_tracking_says(word):
    with pytest.raises(ScenarioError, match=f"^config profile.explore.without_tracking={word}: "
                                            "must be cheap or thorough$"):
        resolve_exploration(_with_word(AUTO_CFG, word))


def test_measured_device_costs_explore_every_cluster():
    measured = {**AUTO_CFG, "cost": {"source": "measured"}}
    assert _chosen(resolve_exploration(measured)) == {**FRUGAL, "clients": "all"}
    assert _chosen(resolve_exploration(AUTO_CFG, measured=True)) == {**FRUGAL, "clients": "all"}
    assert _chosen(resolve_exploration({**measured, "tracking": {"enabled": False}})) == THOROUGH
    assert exploration_values(True, measured=True) == {**FRUGAL, "clients": "all"}
    assert exploration_values(False, measured=True) == THOROUGH


def test_a_resumed_config_keeps_the_recorded_exploration():
    """A checkpoint recorded before the key (tracking off: the thorough values, no key) resumes with them."""
    static = {**AUTO_CFG, "tracking": {"enabled": False}}
    recorded = _with_word(resolve_exploration(_with_word(static, "thorough")), None)
    kept = keep_recorded(static, recorded)
    assert "without_tracking" not in kept["profile"]["explore"]
    assert resolve_exploration(kept) == recorded
    assert static["profile"]["explore"]["without_tracking"] == "cheap"  # pure
    assert keep_recorded(static, None) == static
    newer = resolve_exploration(_with_word(static, "thorough"))  # a checkpoint that has the key
    assert resolve_exploration(keep_recorded(static, newer)) == newer
    explicit = copy.deepcopy(static)
    explicit["profile"]["explore"]["clients"] = "cheapest"  # given explicitly: stays (the check refuses it)
    kept = resolve_exploration(keep_recorded(explicit, recorded))
    assert kept["profile"]["explore"]["clients"] == "cheapest"


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
    assert _chosen(compose_config(["tracking.enabled=false"])) == CHEAP
    assert _chosen(compose_config(["tracking.enabled=false", "profile.explore.without_tracking=thorough"])) \
        == THOROUGH
    assert compose_config([])["profile"] == compose_config(["profile=frugal"])["profile"]
    assert compose_config(["profile.explore.without_tracking=thorough"])["profile"]["explore"] == \
        {**compose_config([])["profile"]["explore"], "without_tracking": "thorough"}
    off = compose_config(["tracking.enabled=false", "profile.explore.without_tracking=thorough"])["profile"]
    assert off == compose_config(["profile=thorough", "tracking.enabled=false",
                                  "profile.explore.without_tracking=thorough"])["profile"]
    assert _chosen(compose_config(["tracking.enabled=false", "cost.source=measured"])) == THOROUGH


def test_frugal_and_thorough_force_their_exploration():
    assert _chosen(compose_config(["profile=frugal", "tracking.enabled=false"])) == FRUGAL
    assert _chosen(compose_config(["profile=thorough"])) == THOROUGH
    assert _chosen(compose_config(["profile=thorough", "tracking.enabled=false"])) == THOROUGH
    assert _chosen(compose_config(["profile.explore.value_stop=false"])) == {**FRUGAL, "value_stop": False}


def test_a_bad_without_tracking_is_refused_in_composition():
    with pytest.raises(ScenarioError, match="^config profile.explore.without_tracking=fast: must be cheap "
                                            "or thorough$"):
        compose_config(["profile.explore.without_tracking=fast"])


def test_a_resumed_job_keeps_the_checkpoints_exploration(tmp_path):
    """A static job checkpointed with the thorough values (before the key) resumes with them: the checkpoint
    check passes and the job runs clients=all, although auto now stands for the cheap exploration."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from depl_fl.runs.checkpoint import load_checkpoint, recorded_config, save_checkpoint
    from depl_fl.runs.runconfig import conf_dir, prepare, to_plain

    before = compose_config(["tracking.enabled=false", "profile.explore.without_tracking=thorough"])
    del before["profile"]["explore"]["without_tracking"]  # a checkpoint written before the key existed
    save_checkpoint(tmp_path, before, {"wall_s": 0.0}, durable=False)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=conf_dir(), version_base=None):
        raw = to_plain(compose(config_name="config", overrides=["tracking.enabled=false", "resume=true"]))
    with pytest.raises(ScenarioError, match="^resume: config profile.explore.clients differs"):
        load_checkpoint(tmp_path, prepare(raw))  # what resolving without the checkpoint would run
    kept = prepare(keep_recorded(raw, recorded_config(tmp_path)))
    assert _chosen(kept) == THOROUGH
    assert "without_tracking" not in kept["profile"]["explore"]
    assert load_checkpoint(tmp_path, kept)["wall_s"] == 0.0
    assert recorded_config(tmp_path / "elsewhere") is None  # no checkpoint: load_checkpoint says so


def test_the_word_is_no_part_of_the_profile_cache_key():
    """The key reads the resolved values: a static job keys as before the key existed with the thorough
    values, and the cheap one keys as a job that set clients=cheapest."""
    from depl_fl.orchestration.profiling import federated_key

    props = {f"c{i}": {"cluster": "A", "num-samples": 10 + i, "partition-id": i} for i in range(3)}
    thorough = compose_config(["num_clients=3", "tracking.enabled=false",
                               "profile.explore.without_tracking=thorough"])
    before = copy.deepcopy(thorough)
    del before["profile"]["explore"]["without_tracking"]
    assert federated_key(thorough, props) == federated_key(before, props)
    cheap = compose_config(["num_clients=3", "tracking.enabled=false"])
    assert federated_key(cheap, props) != federated_key(thorough, props)
    explicit = compose_config(["num_clients=3", "tracking.enabled=false",
                               "profile.explore.without_tracking=thorough",
                               "profile.explore.clients=cheapest"])
    assert federated_key(cheap, props) == federated_key(explicit, props)


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


@pytest.mark.parametrize("tracking,chosen", [("true", FRUGAL), ("false", CHEAP)])
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
