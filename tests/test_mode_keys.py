"""A setting the chosen mode does not read is refused before anything starts (one line naming the key
and the mode, exit status 2); the same key in a mode that reads it is accepted. Through the
composition every entry point uses (the Hydra job, ``flwr run .``'s run config, ``depl-fl profile``)
and through the real command lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.runs.mode_keys import FLWR_RUN, HYDRA_JOB, RULES, USER_APP, check_mode_keys  # noqa: E402
from depl_fl.runs.runconfig import compose_config, config_from_run_config, default_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = Path(__file__).parent / "data" / "example_scenario.json"
INPROCESS = "profile.source=inprocess"

# (overrides, entry point, the key refused, the mode named) -- and the same key where it is read.
REFUSED = [
    (["profile.file=/data/profile.json"], None, "profile.file", "profile.source=federated"),
    (["profile.seeds=5"], None, "profile.seeds", "profile.source=federated"),
    (["profile.switch_at=[3]"], None, "profile.switch_at", "profile.source=federated"),
    (["profile.subset_fractions=[0.3]"], None, "profile.subset_fractions", "profile.source=federated"),
    (["profile.spread_horizon=4"], None, "profile.spread_horizon", "profile.source=federated"),
    ([INPROCESS, "profile.explore.rounds=3"], None, "profile.explore.rounds", "profile.source=inprocess"),
    ([INPROCESS, "profile.plan_regime.power=1.5"], None, "profile.plan_regime.power",
     "profile.source=inprocess"),
    ([INPROCESS, f"profile.file={EXAMPLE}", "profile.seeds=2"], None, "profile.seeds",
     "profile.file is given"),
    ([INPROCESS, f"profile.file={EXAMPLE}", "profile.cache_dir=/tmp/c"], None, "profile.cache_dir",
     "profile.file is given"),
    (["profile.plan_regime.enabled=false", "profile.plan_regime.floor=0.2"], None,
     "profile.plan_regime.floor", "profile.plan_regime.enabled=false"),
    (["tracking.enabled=false", "tracking.margin=0.1"], None, "tracking.margin", "tracking.enabled=false"),
    (["tracking.enabled=false", "tracking.every_rounds=3"], None, "tracking.every_rounds",
     "tracking.enabled=false"),
    (["method=expectation", "planner=cantelli"], None, "planner.guarantee", "method=expectation"),
    (["simulation=inprocess", "simulation.ray_num_cpus=2"], None, "simulation.ray_num_cpus",
     "simulation.backend=inprocess"),
    (["simulation=inprocess"], FLWR_RUN, "simulation.backend", f"the entry point is {FLWR_RUN}"),
    (["simulation=inprocess", "server.round_timeout_slack_s=5"], HYDRA_JOB, "server.round_timeout_slack_s",
     "simulation.backend=inprocess"),
    (["++output.dir=/tmp/out"], HYDRA_JOB, "output.dir", f"the entry point is {HYDRA_JOB}"),
    (["dataset.data_dir=/data/digits"], None, "dataset.data_dir", "dataset.name=digits"),
    (["dataset=folder", "dataset.test_dir=/t", "partition.alpha=0.5"], None, "partition.alpha",
     "dataset.name=folder"),
    (["faults.clients=[c1]"], None, "faults.clients", "faults.kind=null"),
    (["faults.kind=nan", "faults.clients=[c1]", "faults.scale=3"], None, "faults.scale", "faults.kind=nan"),
    (["faults.kind=crash", "faults.clients=[c1]", "faults.slow_s=1"], None, "faults.slow_s",
     "faults.kind=crash"),
    (["aggregation.trim_fraction=0.3"], None, "aggregation.trim_fraction", "aggregation.rule=fedavg"),
    # a user's own app brings its network, data, train function and ServerApp
    (["train.lr=0.1"], USER_APP, "train.lr", f"the entry point is {USER_APP}"),
    (["train.batch_size=8"], USER_APP, "train.batch_size", f"the entry point is {USER_APP}"),
    (["train.device=cuda"], USER_APP, "train.device", f"the entry point is {USER_APP}"),
    (["dataset=cifar10"], USER_APP, "dataset.name", f"the entry point is {USER_APP}"),
    (["partition.alpha=0.5"], USER_APP, "partition.alpha", f"the entry point is {USER_APP}"),
    (["faults.kind=scale", "faults.clients=[c1]"], USER_APP, "faults.clients",
     f"the entry point is {USER_APP}"),
    (["output.plot=false"], USER_APP, "output.plot", f"the entry point is {USER_APP}"),
    (["simulation.client_num_cpus=2"], USER_APP, "simulation.client_num_cpus",
     f"the entry point is {USER_APP}"),
    (["model.arch=resnet"], USER_APP, "model.arch", f"the entry point is {USER_APP}"),
    (["resume=true"], USER_APP, "resume", f"the entry point is {USER_APP}"),
    (["profile.source=inprocess"], USER_APP, "profile.source", f"the entry point is {USER_APP}"),
    # a simulation's replies time an emulation; the drift test reads wall-clock round times
    (["cost.source=measured"], HYDRA_JOB, "cost.source", "cost.clock=model"),
    (["cost.source=measured"], USER_APP, "cost.source", "cost.clock=model"),
    (["cost.drift_rounds=4"], HYDRA_JOB, "cost.drift_rounds", "cost.clock=model"),
    (["cost.clock=model", "cost.drift_tolerance=0.1"], FLWR_RUN, "cost.drift_tolerance", "cost.clock=model"),
]
ACCEPTED = [
    ([INPROCESS, "profile.file=/data/profile.json"], None),
    ([INPROCESS, "profile.seeds=5", "profile.switch_at=[3]", "profile.spread_horizon=4"], None),
    (["profile.explore.rounds=3", "profile.plan_regime.power=1.5"], None),
    (["tracking.enabled=true", "tracking.margin=0.1", "tracking.every_rounds=3"], None),
    (["method=full", "planner=cantelli"], None),
    (["simulation=ray", "simulation.ray_num_cpus=2"], HYDRA_JOB),
    (["simulation=ray", "server.round_timeout_s=30", "server.node_wait_timeout_s=30"], HYDRA_JOB),
    (["++output.dir=/tmp/out"], FLWR_RUN),
    (["dataset=cifar10", "dataset.data_dir=/data/cifar10", "model=alexnet_like"], None),
    (["partition.alpha=0.5"], None),
    (["faults.kind=scale", "faults.clients=[c1]", "faults.scale=3"], None),
    (["faults.kind=slow", "faults.clients=[c1]", "faults.slow_s=1"], None),
    (["aggregation=trimmed_mean", "aggregation.trim_fraction=0.3"], None),
    # a key at its conf/ value is not "set", even when named
    (["profile.seeds=3", "tracking.enabled=false", "tracking.margin=0.05"], None),
    (["train.local_epochs=3", "seed=4", "train.lr=0.05", "target.loss=0.3"], USER_APP),
    (["cost.clock=wall", "cost.source=measured", "cost.drift_rounds=4"], HYDRA_JOB),
    (["cost.source=measured", "cost.drift_rounds=4"], FLWR_RUN),
    (["cost.clock=model", "cost.source=measured"], FLWR_RUN),  # a deployment measures either way
]


@pytest.mark.parametrize("overrides, entry, key, mode", REFUSED, ids=[c[2] + "|" + c[3] for c in REFUSED])
def test_a_key_the_mode_ignores_is_refused_naming_key_and_mode(overrides, entry, key, mode):
    with pytest.raises(ScenarioError) as info:
        compose_config(overrides, entry=entry)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"config {key}="), line
    assert f"not read when {mode}" in line, line


@pytest.mark.parametrize("overrides, entry", ACCEPTED, ids=[" ".join(c[0]) for c in ACCEPTED])
def test_a_key_the_mode_reads_is_accepted(overrides, entry):
    cfg = compose_config(overrides, entry=entry)
    assert cfg["profile"]["source"] in ("federated", "inprocess")


def test_every_key_of_the_table_is_a_config_key():
    """A misspelt key in the table would never refuse anything."""
    composed = [default_config(), compose_config(["dataset=folder"]),
                compose_config(["model=custom", "model.factory=a.b:c"])]
    for rule in RULES:
        for key in rule.reads:
            dotted = key[:-2] if key.endswith(".*") else key
            found = False
            for cfg in composed:
                node = cfg
                for part in dotted.split("."):
                    node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
                found = found or node is not KeyError
            assert found or dotted == "output.dir", key


def test_a_key_two_rules_refuse_is_named_once():
    with pytest.raises(ScenarioError) as info:
        compose_config(["++output.dir=/tmp/out"], entry=USER_APP)
    assert str(info.value).count("output.dir") == 1


def test_several_ignored_keys_are_all_named():
    with pytest.raises(ScenarioError) as info:
        compose_config(["profile.seeds=5", "profile.rounds=20", "tracking.enabled=false",
                        "tracking.ahead_margin=0.1"])
    line = str(info.value)
    assert line.startswith("config profile.seeds=5:")
    assert "also not read: profile.rounds, tracking.ahead_margin" in line


def test_check_reads_the_defaults_it_is_given():
    cfg = compose_config([INPROCESS, "profile.seeds=5"])
    check_mode_keys(cfg, default_config())
    federated = {**cfg, "profile": {**cfg["profile"], "source": "federated"}}
    with pytest.raises(ScenarioError, match="profile.seeds=5"):
        check_mode_keys(federated, default_config())
    check_mode_keys(federated, federated)  # at its default value: not set


def test_flwr_run_config_goes_through_the_rule(tmp_path):
    with pytest.raises(ScenarioError, match=f"config simulation.backend=inprocess: not read when the entry "
                                            f"point is {FLWR_RUN}"):
        config_from_run_config({"overrides": "simulation=inprocess num_clients=7"})
    with pytest.raises(ScenarioError, match="config profile.file="):
        config_from_run_config({"overrides": f"profile.file={EXAMPLE} num_clients=7"}, cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*.json"))  # a refused config is never cached
    cfg = config_from_run_config({"overrides": "++output.dir=/tmp/out num_clients=7"})
    assert cfg["output"]["dir"] == "/tmp/out"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def _main(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "depl_fl.main", *overrides, f"hydra.run.dir={tmp_path / 'job'}"]
    return subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("depl-fl")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def test_hydra_job_refuses_profile_file_with_federated_profiling(tmp_path):
    truncated = tmp_path / "profile.json"
    truncated.write_text('{"version": 1, "clusters": [', encoding="utf-8")
    proc = _main(tmp_path, "simulation=inprocess", f"profile.file={truncated}")
    line = _one_line(proc)
    assert f"config profile.file={truncated}: not read when profile.source=federated" in line
    assert "read only with profile.source=inprocess" in line
    assert not (tmp_path / ".depl_cache").exists()  # nothing started: no exploration round cached


def test_hydra_job_reads_profile_file_with_inprocess_profiling(tmp_path):
    """The same truncated file with profile.source=inprocess is read: its own one-line error."""
    truncated = tmp_path / "profile.json"
    truncated.write_text('{"version": 1, "clusters": [', encoding="utf-8")
    proc = _main(tmp_path, "simulation=inprocess", INPROCESS, f"profile.file={truncated}")
    line = _one_line(proc)
    assert "profile.json" in line and "not read when" not in line


def test_hydra_sweep_refuses_every_job_that_ignores_a_key(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", "-m", "simulation=inprocess",
                           "tracking.enabled=false", "tracking.every_rounds=2,3",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("depl-fl")]
    assert lines[-1].startswith("depl-fl: 2 sweep job(s) failed: #0 (")
    assert all("tracking.every_rounds" in line and "tracking.enabled=false" in line for line in lines[:2])
    assert not list((tmp_path / "sweep").rglob("checkpoint.pkl"))


def test_profile_command_refuses_federated_keys(tmp_path, capsys):
    from depl_fl.cli import main

    status = main(["profile", f"profile.cache_dir={tmp_path}", "profile.explore.rounds=3"])
    err = capsys.readouterr().err
    assert status == 2
    assert "config profile.explore.rounds=3: not read when profile.source=inprocess" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, force", [([], False), (["--force"], True), (["profile.force=true"], True)])
def test_profile_command_reads_profile_force_as_its_force_flag(tmp_path, monkeypatch, capsys, argv, force):
    from depl_fl.cli import main
    from depl_fl.orchestration import profiling

    asked = []
    monkeypatch.setattr(profiling, "ensure_profile",
                        lambda cfg, force=False: asked.append(force) or ({}, tmp_path / "profile.json"))
    assert main(["profile", f"profile.cache_dir={tmp_path}", *argv]) == 0
    assert asked == [force]


def test_profile_file_is_used_by_an_inprocess_job_config():
    """profile.file with in-process profiling is read as the job's profile (orchestration/profiling.py)."""
    from depl_fl.orchestration.profiling import ensure_profile

    pytest.importorskip("torch")
    cfg = compose_config([INPROCESS, f"profile.file={EXAMPLE}"])
    doc, path = ensure_profile(cfg)
    assert path == EXAMPLE and doc["loss"] == json.loads(EXAMPLE.read_text(encoding="utf-8"))["loss"]


PLAN_TARGETS = ["--target-loss", "1.5", "--target-prob", "0.9", "--deadline-s", "200"]


@pytest.mark.parametrize("argv, needle", [
    (["--method", "full", "--guarantee", "cantelli"], "--guarantee: not read by --method full"),
    (["--method", "expectation", "--guarantee", "gaussian"], "--guarantee: not read by --method expectation"),
    (["--method", "full", "--eta", "0.1"], "--eta: not read by --method full"),
    (["--method", "optimum", "--eta", "0.1"], "--eta: not read by --method optimum"),
])
def test_plan_option_the_method_ignores_is_refused(tmp_path, capsys, argv, needle):
    from depl_fl.cli import main

    out = tmp_path / "plan.json"
    status = main(["plan", str(EXAMPLE), *PLAN_TARGETS, "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_plan_option_the_method_reads_is_accepted(tmp_path, capsys):
    from depl_fl.cli import main

    out = tmp_path / "plan.json"
    status = main(["plan", str(EXAMPLE), *PLAN_TARGETS, "--out", str(out), "--method", "expectation",
                   "--eta", "0.1"])
    assert status == 0, capsys.readouterr().err
    assert json.loads(out.read_text(encoding="utf-8"))["eta"] == 0.1


def test_job_with_method_full_refuses_a_planner_step():
    with pytest.raises(ScenarioError, match="config planner.eta=0.02: not read when method=full"):
        compose_config(["method=full", "planner=fine"])
    compose_config(["method=expectation", "planner=fine"])


def test_split_refuses_a_data_dir_the_dataset_ignores(tmp_path, capsys):
    from depl_fl.task.split import main

    with pytest.raises(SystemExit) as info:
        main(["--dataset", "digits", "--num-clients", "2", "--data-dir", str(tmp_path), "--out",
              str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.splitlines()) == 1
    assert "--data-dir: not read with --dataset digits" in err
    assert not (tmp_path / "out").exists()
