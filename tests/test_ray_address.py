"""simulation.ray_address: what it accepts, what it refuses (one line each) and what ray.init receives."""

from __future__ import annotations

import pytest

pytest.importorskip("hydra")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.main import ray_init_args  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402


@pytest.mark.parametrize("address", ["auto", "127.0.0.1:6379", "head.example:10001"])
def test_an_address_is_accepted_and_passed_to_ray_init(address):
    cfg = compose_config([f"simulation.ray_address={address}"])
    args = ray_init_args(cfg["simulation"])
    assert args["address"] == address and "num_cpus" not in args


def test_without_an_address_ray_starts_here_with_its_cpus():
    args = ray_init_args(compose_config(["simulation.ray_num_cpus=2"])["simulation"])
    assert args["num_cpus"] == 2 and "address" not in args


@pytest.mark.parametrize("overrides, message", [
    (["simulation=inprocess", "simulation.ray_address=auto"],
     "config simulation.ray_address: needs simulation=ray (the in-process backend has no Ray)"),
    (["simulation.ray_address=auto", "simulation.ray_num_cpus=2"],
     "config simulation.ray_address: a running cluster brings its own CPUs; leave simulation.ray_num_cpus null"),
    (["simulation.ray_address=127.0.0.1"],
     "config simulation.ray_address: must match ^(auto|[^\\s:]+:[0-9]{1,5})$, got '127.0.0.1'"),
])
def test_a_misused_address_is_refused_in_one_line(overrides, message):
    with pytest.raises(ScenarioError) as info:
        compose_config(overrides)
    assert str(info.value) == message
