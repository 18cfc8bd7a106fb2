"""A user's per-sample loss (``model.loss=PKG.MODULE:NAME``) is the loss of every computation.

``tests.user_losses:ce_plus_ten`` has cross-entropy's gradient, so a round trains
exactly as with cross-entropy while every loss DepL computes (client training,
the server's validation and test losses) is 10 higher; the stop margin's
spread is unchanged. Specs that break the contract are refused in one line,
exit status 2, before anything trains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.contract.plan import Plan, RoundDecision, Targets  # noqa: E402
from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.orchestration.profiling import profile_key  # noqa: E402
from depl_fl.orchestration.scenario_builder import build_scenario, model_docs  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.losses import check_loss, load_loss, loss_spec  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import DepLStrategy, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import make_evaluate_fn  # noqa: E402
from tests.user_losses import OFFSET  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
N = 3
PLUS_TEN = "tests.user_losses:ce_plus_ten"
LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")},
        "switch": [{"from": "full", "to": "p50", "mean": 0.1, "std": 0.05},
                   {"from": "p50", "to": "full", "mean": 0.1, "std": 0.05}]}


def _one_round(extra: list[str]) -> dict:
    """One given-plan round of the ResNet-style network (BatchNorm, residual) at p50, in process."""
    cfg = compose_config([f"num_clients={N}", "simulation=inprocess", "tracking.enabled=false",
                          "model=custom", "model.factory=tests.user_nets:resnet_tiny", *extra])
    geo = geometry(cfg)
    docs = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    clients = tuple(f"c{i}" for i in range(N))
    strategy = DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6),
        plan=Plan("given", True, [RoundDecision("p50", clients, {"A": 0, "B": 0})]), plan_fn=None,
        scenario_fn=lambda props: build_scenario(cfg, props, docs, LOSS), num_clients=N,
        train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0}, node_wait_timeout_s=1.0)
    strategy.start(InProcessGrid(make_client_app(cfg), N), state_to_arrays(initial_state(geo, seed=0)),
                   evaluate_fn=make_evaluate_fn(cfg))
    (record,) = strategy.controller.records
    return record


def test_a_round_with_the_users_loss_records_losses_in_its_units():
    ce, plus = _one_round([]), _one_round([f"model.loss={PLUS_TEN}"])
    assert plus["replied"] == ["c0", "c1", "c2"] and not plus["rejected"]
    # Same gradient, same training: every recorded loss is the cross-entropy one plus the offset.
    for key in ("loss", "test_loss", "train_loss"):
        assert plus[key] == pytest.approx(ce[key] + OFFSET, abs=1e-3), key
        assert ce[key] < OFFSET
    assert plus["accuracy"] == pytest.approx(ce["accuracy"], abs=0.01)


def test_the_users_loss_reaches_the_per_sample_losses_of_the_stop_margin():
    cfg_ce = compose_config([f"num_clients={N}", "simulation=inprocess"])
    cfg_plus = compose_config([f"num_clients={N}", "simulation=inprocess", f"model.loss={PLUS_TEN}"])
    arrays = state_to_arrays(initial_state(geometry(cfg_ce), seed=1))
    ce, plus = make_evaluate_fn(cfg_ce)(1, arrays), make_evaluate_fn(cfg_plus)(1, arrays)
    assert plus["loss"] == pytest.approx(ce["loss"] + OFFSET, abs=1e-4)
    assert plus["test-loss"] == pytest.approx(ce["test-loss"] + OFFSET, abs=1e-4)
    assert plus["loss-sem"] == pytest.approx(ce["loss-sem"], rel=1e-4) and ce["loss-sem"] > 0
    assert make_evaluate_fn(cfg_plus).validation_loss(arrays) == pytest.approx(plus["loss"], rel=1e-9)


def test_label_smoothing_is_accepted_and_differs_from_cross_entropy():
    check_loss("tests.user_losses:label_smoothed_ce", 10)
    logits, targets = torch.randn(8, 10, generator=torch.Generator().manual_seed(0)), torch.arange(8)
    smoothed = load_loss("tests.user_losses:label_smoothed_ce")(logits, targets)
    assert smoothed.shape == (8,) and not torch.allclose(smoothed, load_loss(PLUS_TEN)(logits, targets) - 10)


@pytest.mark.parametrize("spec, message", [
    ("tests.no_such_module:loss", "cannot import tests.no_such_module"),
    ("tests.user_losses:missing", "has no attribute missing"),
    ("tests.user_losses", "expected PKG.MODULE:NAME"),
    ("tests.user_losses:NOT_CALLABLE", "is not callable"),
    ("tests.user_losses:batch_mean", "returned shape () for 6 samples; expected (6,)"),
    ("tests.user_losses:column", "returned shape (6, 1) for 6 samples"),
    ("tests.user_losses:negative", "negative or non-finite"),
    ("tests.user_losses:batch_centred", "changes with the rest of the batch"),
    ("tests.user_losses:detached", "no gradient"),
    ("tests.user_losses:raises", "failed on logits of shape (6, 10): RuntimeError"),
    ("tests.user_losses:integer", "not a float tensor"),
])
def test_a_bad_loss_spec_is_refused_in_one_line(spec, message):
    with pytest.raises(ScenarioError) as err:
        check_loss(spec, 10)
    text = str(err.value)
    assert text.startswith(f"model.loss {spec!r}") and message in text and "\n" not in text


def test_the_default_is_cross_entropy_and_keeps_the_profile_key():
    cfg = compose_config(["num_clients=3"])
    assert cfg["model"]["loss"] is None and loss_spec(cfg) is None and load_loss(None) is None
    without = {**cfg, "model": {k: v for k, v in cfg["model"].items() if k != "loss"}}
    assert profile_key(cfg) == profile_key(without)
    assert profile_key(compose_config(["num_clients=3", f"model.loss={PLUS_TEN}"])) != profile_key(cfg)


def test_the_python_api_refuses_model_loss():
    from strategies.user_app import depl_config

    with pytest.raises(ScenarioError, match="model.loss: in your own app the loss is the one your train"):
        depl_config(2, overrides=[f"model.loss={PLUS_TEN}"])


def _job(tmp_path: Path, extra: list[str], backend: str = "inprocess") -> subprocess.CompletedProcess:
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "PYTHONPATH": str(ROOT)}
    tiny = ["num_clients=3", f"simulation={backend}", "profile.source=inprocess", "profile.seeds=1",
            "profile.rounds=3", "profile.switch_at=[2]", "target.prob=0.6", "target.max_rounds=2",
            "tracking.enabled=false", "planner.mc_trajectories=20000", "output.plot=false"]
    return subprocess.run([sys.executable, "-m", "depl_fl.main", *tiny, *extra,
                           f"profile.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("backend", ["inprocess", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_hydra_job_trains_and_records_in_the_users_units(tmp_path, backend):
    proc = _job(tmp_path, [f"model.loss={PLUS_TEN}", f"target.loss={2.2 + OFFSET}"], backend)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["config"]["model"]["loss"] == PLUS_TEN
    assert doc["rounds"] and doc["scenario"]["loss"]["initial"] > OFFSET
    for rec in doc["rounds"]:  # cross-entropy of a digits CNN stays far below 10 after its first rounds
        assert rec["loss"] > OFFSET and rec["test_loss"] > OFFSET and rec["train_loss"] > OFFSET
    assert doc["summary"]["met"] == (doc["summary"]["final_test_loss"] <= 2.2 + OFFSET)


@pytest.mark.parametrize("spec", ["tests.no_such_module:loss", "tests.user_losses:batch_mean"])
def test_a_hydra_job_with_a_bad_loss_exits_2_before_training(tmp_path, spec):
    proc = _job(tmp_path, [f"model.loss={spec}"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"depl-fl: model.loss {spec!r}")
    assert not (tmp_path / "cache").exists()  # no pilot ran


@pytest.mark.slow
def test_a_loopback_deployment_trains_with_the_users_loss_on_the_nodes(tmp_path):
    from tests.test_deployment import TINY, _deploy, _superlink

    if _superlink() is None:
        pytest.skip("flower-superlink is not installed")
    job = [o for o in TINY if not o.startswith("target.loss=")]
    proc, stdout, stderr, out = _deploy(tmp_path, ["-n", "3", "-r", "2", *job, f"model.loss={PLUS_TEN}",
                                                   f"target.loss={2.0 + OFFSET}"],
                                        env={"DEPL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, (stdout[-3000:], stderr[-3000:])
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["model"]["loss"] == PLUS_TEN and doc["rounds"]
    for rec in doc["rounds"]:  # train_loss: the nodes' own training loss, averaged by the server
        assert rec["replied"] == rec["clients"] and rec["train_loss"] > OFFSET and rec["loss"] > OFFSET
