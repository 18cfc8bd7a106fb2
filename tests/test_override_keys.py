"""Overrides of keys the configuration lacks are one line naming the closest keys, also with ``+``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from depl_fl.errors import ScenarioError
from depl_fl.runs.override_keys import check_override_keys
from depl_fl.runs.runconfig import compose_config, conf_dir, config_from_run_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("override, message", [
    ("target.prb=0.9", "override target.prb: unknown key; did you mean target.prob"),
    ("+target.prb=0.9", "override target.prb: unknown key; did you mean target.prob"),
    ("++num_client=3", "override num_client: unknown key; did you mean num_clients?"),
    ("~tracking.margn", "override tracking.margn: unknown key; did you mean tracking.margin"),
    ("+foo=1", "override foo: unknown key (every key"),
    # the model group takes the keys some network's file declares, not any key under model.
    ("+model.compresions=[0,0.5]", "override model.compresions: unknown key; did you mean model.compr"),
    ("++model.los=a.b:c", "override model.los: unknown key; did you mean model.loss"),
    ("+model.regime.powr=1.2", "override model.regime.powr: unknown key; did you mean model.regime.power"),
])
def test_an_unknown_key_is_refused_with_the_closest_known_ones(override, message):
    with pytest.raises(ScenarioError, match=re.escape(message)):
        check_override_keys(conf_dir(), ["seed=1", override])


@pytest.mark.parametrize("overrides", [
    ["target.prob=0.95", "++output.dir=/tmp/out", "hydra.run.dir=/tmp/x", "+hydra.job.chdir=false"],
    ["+model.compressions=[0,0.5]", "+model.regime.power=1.2", "++model.regime={power:1.2}"],
    ["model=custom", "model.factory=a.b:c", "model.compressions=[0,0.5]"],  # custom's own key
    ["dataset=synthetic", "model=synthetic_mlp", "dataset.alpha=2"],  # a key of the chosen option
    ["profile=thorough", "~faults"],
])
def test_known_keys_and_the_open_model_section_pass(overrides):
    check_override_keys(conf_dir(), overrides)


def test_a_key_of_another_option_of_the_group_is_unknown():
    with pytest.raises(ScenarioError, match="override dataset.alpha: unknown key"):
        check_override_keys(conf_dir(), ["dataset=digits", "dataset.alpha=2"])


def test_flwr_run_overrides_refuse_an_added_unknown_key():
    with pytest.raises(ScenarioError, match="override target.prb: unknown key"):
        config_from_run_config({"overrides": "seed=1 +target.prb=0.9"})


@pytest.mark.parametrize("override", ["profile.sedes=1", "+profile.sedes=1", "++profile.sedes=1"])
def test_composed_configurations_refuse_an_unknown_key(override):
    """``depl-fl profile``, the Python API and benchmarks compose through compose_config."""
    with pytest.raises(ScenarioError, match=re.escape("override profile.sedes: unknown key; did you mean "
                                                      "profile.seeds")):
        compose_config(["seed=2", override])
    assert compose_config(["+model.compressions=[0,0.5]"])["model"]["compressions"] == [0, 0.5]


def test_a_hydra_job_with_an_added_typo_exits_2_in_one_line(tmp_path):
    argv = [sys.executable, "-m", "depl_fl.main", "+target.prb=0.9", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "depl-fl: override target.prb: unknown key; did you mean target.prob or target.loss? "
        "(every key and its meaning: conf/)"]
    assert not (tmp_path / "results.json").exists()
