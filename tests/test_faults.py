"""Fault injection (depl_fl/orchestration/faults.py): every kind, node config over run config, from_round."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.orchestration.faults import (
    CLAIMED_SAMPLES,
    HUGE,
    FaultSpec,
    InjectedFault,
    apply_faults,
    fault_of,
)
from depl_fl.runs.config_choices import FAULT_KINDS
from depl_fl.runs.config_schema import validate_robustness

STATE = {"a": np.ones((3, 2), dtype=np.float32), "b": np.zeros(4, dtype=np.float32)}
METRICS = {"num-examples": 100, "train-loss": 0.5, "train-time-s": 0.1}


def _cfg(kind, clients=("c1",), from_round=1, **extra):
    return {"faults": {"clients": list(clients), "kind": kind, "from_round": from_round,
                       "scale": 100.0, "slow_s": 0.05, **extra}}


def _ctx(pid, **node):
    return SimpleNamespace(node_config={"partition-id": pid, "num-partitions": 4, **node})


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k not in ("crash", "slow")])
def test_every_kind_corrupts_only_the_chosen_client(kind):
    state, metrics = apply_faults(_cfg(kind), _ctx(1), 1, STATE, METRICS)
    same_state, same_metrics = apply_faults(_cfg(kind), _ctx(0), 1, STATE, METRICS)
    assert same_state is STATE and same_metrics is METRICS
    changed = any(state[k].shape != STATE[k].shape or state[k].dtype != STATE[k].dtype
                  or not np.array_equal(state[k], STATE[k], equal_nan=False) for k in STATE)
    assert changed or metrics != METRICS
    assert np.array_equal(STATE["a"], np.ones((3, 2)))  # the input is not modified


def test_kinds_do_what_the_docs_say():
    def run(kind):
        return apply_faults(_cfg(kind), _ctx(1), 1, STATE, METRICS)

    assert np.all(np.isnan(run("nan")[0]["a"]))
    assert np.all(run("huge")[0]["b"] >= HUGE / 2)
    assert np.allclose(run("scale")[0]["a"], 100.0)
    assert run("num_examples")[1]["num-examples"] == CLAIMED_SAMPLES
    assert np.iscomplexobj(run("dtype")[0]["a"])
    assert run("shape")[0]["a"].shape == (2, 2)
    with pytest.raises(InjectedFault):
        run("crash")
    t0 = time.perf_counter()
    run("slow")
    assert time.perf_counter() - t0 >= 0.05


def test_fault_starts_at_from_round():
    cfg = _cfg("nan", from_round=3)
    assert apply_faults(cfg, _ctx(1), 2, STATE, METRICS)[0] is STATE
    assert np.all(np.isnan(apply_faults(cfg, _ctx(1), 3, STATE, METRICS)[0]["a"]))


def test_node_config_makes_a_deployed_node_faulty():
    ctx = _ctx(0, **{"faults-kind": "scale", "faults-from-round": 2, "faults-scale": 3.0})
    assert fault_of({}, ctx.node_config, "c0") == FaultSpec("scale", 2, 3.0, 5.0)
    assert np.allclose(apply_faults({}, ctx, 2, STATE, METRICS)[0]["a"], 3.0)
    with pytest.raises(ValueError, match="faults kind"):
        fault_of({}, {"faults-kind": "meteor"}, "c0")


@pytest.mark.parametrize("faults, field", [
    ({"clients": ["c1"], "kind": "meteor", "from_round": 1, "scale": 2.0, "slow_s": 1.0}, "faults.kind"),
    ({"clients": "c1", "kind": "nan", "from_round": 1, "scale": 2.0, "slow_s": 1.0}, "faults.clients"),
    ({"clients": ["c1"], "kind": "nan", "from_round": 0, "scale": 2.0, "slow_s": 1.0}, "faults.from_round"),
])
def test_bad_fault_config_names_the_field(faults, field):
    with pytest.raises(ScenarioError, match=field):
        validate_robustness({"faults": faults})


def test_a_fault_on_a_client_the_federation_lacks_is_refused():
    from depl_fl.runs.mode_keys import FLWR_RUN, HYDRA_JOB
    from depl_fl.runs.runconfig import compose_config, validate

    validate(compose_config(["num_clients=4", "faults.kind=nan", "faults.clients=[c0,c3]"]), HYDRA_JOB)
    cfg = compose_config(["num_clients=3", "faults.kind=nan", "faults.clients=[c0,c3]"])
    with pytest.raises(ScenarioError, match=r"faults.clients\[1\]: no client c3 among the 3 clients c0..c2"):
        validate(cfg, HYDRA_JOB)
    validate(cfg, FLWR_RUN)  # a deployment: more SuperNodes than num_clients may join


def test_nan_kind_read_as_a_float_by_hydra_still_means_nan():
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config(["faults.kind=nan", "faults.clients=[c1]"])
    assert np.all(np.isnan(apply_faults(cfg, _ctx(1), 1, STATE, METRICS)[0]["a"]))
    state = apply_faults({}, _ctx(0, **{"faults-kind": float("nan")}), 1, STATE, METRICS)[0]
    assert np.all(np.isnan(state["a"]))
