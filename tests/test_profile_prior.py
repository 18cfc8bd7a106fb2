"""A prior of another federation's profile: only one of the same task is taken, in any other case one line.

The prior is a profile cache file or a results.json naming one; its
observations keep their fields, move below this job's round numbers and drop
variants the job does not train. A job given a prior of another network or
dataset stops before any round with one line and exit status 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depl_fl.errors import ScenarioError
from depl_fl.orchestration.profile_prior import PRIOR_ROUND_OFFSET, load_prior, prior_observations, task_of

ROOT = Path(__file__).resolve().parents[1]
CFG = {"dataset": {"name": "digits"}, "model": {"arch": "digits_cnn"}}
OBS = [{"round": 1, "model": "full", "previous_model": None, "loss_before": 2.3, "loss_after": 2.0,
        "sample_fraction": 0.4},
       {"round": 2, "model": "p50", "previous_model": "full", "loss_before": 2.0, "loss_after": 1.9,
        "sample_fraction": 0.6},
       {"round": 2, "model": "p75", "previous_model": None, "loss_before": 2.0, "loss_after": 1.8,
        "sample_fraction": 0.2}]


def _cache(tmp: Path, task: dict | None = None, observations: list | None = None) -> Path:
    doc = {"loss": {}, "fit_inputs": {"observations": OBS if observations is None else observations,
                                      "records": [{}, {}]}}
    if task is not None:
        doc["task"] = task
    path = tmp / "profile-fed-x.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_cache_file_of_the_same_task_is_the_prior(tmp_path):
    prior = load_prior(_cache(tmp_path, task_of(CFG)), CFG)
    assert prior.rounds == 2 and len(prior.observations) == 3
    assert prior.to_dict() == {"source": str(tmp_path / "profile-fed-x.json"), "observations": 3, "rounds": 2}
    obs = prior_observations(prior, ["full", "p50"])  # p75 is no variant of this job
    assert [(o.round, o.model, o.previous_model) for o in obs] == [
        (1 - PRIOR_ROUND_OFFSET, "full", None), (2 - PRIOR_ROUND_OFFSET, "p50", "full")]
    assert obs[1].loss_after == 1.9 and obs[1].sample_fraction == 0.6
    assert prior_observations(None, ["full"]) == []


def test_a_results_file_leads_to_its_cache_and_its_configuration_says_the_task(tmp_path):
    cache = _cache(tmp_path)  # an older cache file without a task: the results' configuration says it
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"summary": {}, "profile": {"cache_file": str(cache)}, "config": CFG}))
    assert load_prior(results, CFG).source == cache
    other = {"dataset": {"name": "digits"}, "model": {"arch": "alexnet_like"}}
    with pytest.raises(ScenarioError, match="another task.*network alexnet_like"):
        load_prior(results, other)


def test_a_users_network_takes_only_a_prior_of_that_network(tmp_path):
    user = {"dataset": {"name": "digits"}, "model": {"arch": "digits_cnn", "network": "0123456789abcdef"}}
    with pytest.raises(ScenarioError, match=r"network digits_cnn; this job: dataset digits, network a user's "
                                            r"network \(digest 0123456789ab\)"):
        load_prior(_cache(tmp_path, task_of(CFG)), user)  # DepL's own digits CNN: another network
    assert load_prior(_cache(tmp_path, task_of(user)), user).rounds == 2
    other = {**user, "model": {**user["model"], "network": "fedcba9876543210"}}
    with pytest.raises(ScenarioError, match="another task"):
        load_prior(_cache(tmp_path, task_of(other)), user)


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"),
    ("text", "not readable JSON"),
    ("empty", "holds no exploration observations"),
    ("no task", "does not say its network and dataset"),
    ("other dataset", "another task \\(dataset synthetic, network digits_cnn; this job: dataset digits"),
    ("no cache", "names no profile cache file"),
])
def test_an_unusable_prior_is_refused(tmp_path, case, message):
    if case == "missing":
        path = tmp_path / "nothing.json"
    elif case == "text":
        path = tmp_path / "p.json"
        path.write_text("not json")
    elif case == "empty":
        path = _cache(tmp_path, task_of(CFG), observations=[])
    elif case == "no task":
        path = _cache(tmp_path)
    elif case == "other dataset":
        path = _cache(tmp_path, {"dataset": "synthetic", "arch": "digits_cnn"})
    else:
        path = tmp_path / "results.json"
        path.write_text(json.dumps({"summary": {}, "profile": {}, "config": CFG}))
    with pytest.raises(ScenarioError, match=message) as err:
        load_prior(path, CFG)
    assert "\n" not in str(err.value)


def test_a_job_with_a_prior_of_another_network_exits_2_in_one_line(tmp_path):
    pytest.importorskip("flwr")
    prior = _cache(tmp_path, {"dataset": "digits", "arch": "alexnet_like"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", "simulation=inprocess", "num_clients=2",
                           f"profile.prior={prior}", f"profile.cache_dir={tmp_path / 'cache'}",
                           f"hydra.run.dir={tmp_path / 'job'}", "output.plot=false"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("depl-fl:")]
    assert len(lines) == 1 and "profile.prior:" in lines[0], proc.stderr[-2000:]
    assert "another task" in lines[0]
    assert not (tmp_path / "cache").exists()  # no exploration round ran


def test_a_profile_fitted_with_a_prior_is_cached_under_its_own_key(tmp_path):
    from depl_fl.orchestration.profiling import federated_key
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config(["num_clients=2"])
    props = {"c0": {"cluster": "A", "num-samples": 10, "label-histogram": [5, 5]},
             "c1": {"cluster": "B", "num-samples": 12, "label-histogram": [6, 6]}}
    prior = load_prior(_cache(tmp_path, task_of(CFG)), CFG)
    other = [{**OBS[0], "loss_after": 1.7}, *OBS[1:]]
    without = federated_key(cfg, props)
    assert federated_key(cfg, props, None) == without  # a job without a prior keys as before
    with_prior = federated_key(cfg, props, prior.observations)
    # with a prior, another profile: neither job reuses the other's, nor one of another prior
    assert with_prior != without
    assert federated_key(cfg, props, other) not in (with_prior, without)
    assert federated_key(cfg, props, [dict(o) for o in OBS]) == with_prior
