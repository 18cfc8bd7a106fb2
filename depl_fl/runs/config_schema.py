"""The schema of the composed run configuration (pydantic): one-line, field-named errors.

Kept apart from :mod:`depl_fl.runs.runconfig` so that a ClientApp process,
which only needs the light helpers there, never imports pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, model_validator

from depl_fl.contract.plan import MAX_DEADLINE_S
from depl_fl.contract.schema import (
    Count,
    Finite,
    NonNegative,
    NonNegativeCount,
    Positive,
    Schema,
    invalid,
    parse,
)
from depl_fl.errors import ScenarioError
from depl_fl.runs.config_choices import AGGREGATION_RULES, FAULT_KINDS, fault_kind
from depl_fl.task.devices import DEVICE_PATTERN

_Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, lt=1)]
#: Longest accepted wait (seconds): beyond it Python's own thread waits overflow.
MAX_TIMEOUT_S = 1e9
_Timeout = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_TIMEOUT_S)]


class _Partition(Schema):
    alpha: Positive | None


class _Target(Schema):
    loss: NonNegative
    prob: _Fraction
    deadline_s: Annotated[Positive, Field(le=MAX_DEADLINE_S)]
    max_rounds: Count | None


class _Train(Schema):
    local_epochs: Count
    lr: Positive
    batch_size: Count
    device: Annotated[str, Field(strict=True, pattern=DEVICE_PATTERN)] = "cpu"


class _Explore(Schema):
    rounds: Count
    stop_when_met: StrictBool = True
    value_stop: StrictBool = False
    value_from_round: Count = 4
    plateau_rounds: Count = 3
    value_floor: StrictBool = False
    prior_rounds: Count = 2
    prior_regime: StrictBool = True
    stop_loss_factor: Positive | None = None
    max_rounds: Count | None = None
    max_deadline_share: _Fraction | None = None
    max_clients: Count | None = None
    clients: Literal["all", "cheapest"] = "all"
    # absent: a configuration recorded before the option, when auto stood for the thorough exploration
    without_tracking: Literal["cheap", "thorough"] = "thorough"
    group_sizes: Literal["random", "by_cost"] = "random"
    switch_rounds: list[Count] | None = None
    min_points_per_level: Count = 4
    min_rounds_for_exponents: Count = 12
    set_shift_rounds: NonNegativeCount = 8


class _PlanRegime(Schema):
    enabled: StrictBool = True
    power: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=1)]
    floor: NonNegative
    rate_exponent: NonNegative
    noise_exponent: NonNegative
    oscillation: NonNegative
    steps_exponent: NonNegative
    reference_steps: Positive
    # the local steps the constants were fitted on (absent: a configuration recorded before, no bound)
    steps_min: Positive | None = None
    steps_max: Positive | None = None
    judged_error_factor: NonNegative
    oscillation_dof: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=2)] | None = None
    rate_window: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1)] = 1.0
    explored_oscillation: NonNegative | None = None
    anchor: Literal["last", "trend"] = "last"
    # absent: a configuration recorded before the option, whose jobs converted the cheapest clusters' only
    rate_at_full: Literal["always", "cheapest"] = "cheapest"
    # absent: a configuration recorded before the option, whose plans read the jumps as measured
    switch_cycles: Literal["measured", "no_gain"] = "measured"

    @model_validator(mode="after")
    def _steps_range(self) -> _PlanRegime:
        low, high = self.steps_min, self.steps_max
        if low is not None and high is not None and low > high:
            raise invalid(f"must be at most steps_max ({high}), got {low}", "steps_min")
        return self


class _Profile(Schema):
    source: Literal["federated", "inprocess"] = "federated"
    explore: _Explore | None = None
    prior: str | None = None
    force: StrictBool = False
    plan_regime: _PlanRegime | None = None
    seeds: Count
    rounds: Count
    switch_rounds: NonNegativeCount = 1
    switch_at: list[Count] | None = None
    subset_fractions: list[_Fraction] | None
    data_exponent_mean: Finite = 0.5
    data_exponent_std: Finite = 0.5
    spread_horizon: Count | None = None

    @model_validator(mode="after")
    def _within_rounds(self) -> _Profile:
        for i, k in enumerate(self.switch_at or []):
            if k > self.rounds:
                raise invalid(f"must be <= profile.rounds ({self.rounds}), got {k}", "switch_at", i)
        horizon = self.spread_horizon
        if horizon is not None and not 2 <= horizon <= self.rounds:
            raise invalid(f"must be null or an integer in [2, profile.rounds={self.rounds}], got {horizon}",
                          "spread_horizon")
        return self

    @model_validator(mode="after")
    def _exploration_range(self) -> _Profile:
        """The least exploration rounds (``rounds``; ``prior_rounds`` with a prior) at most ``max_rounds``."""
        explore = self.explore
        if self.source != "federated" or explore is None or explore.max_rounds is None:
            return self
        key, least = ("prior_rounds", explore.prior_rounds) if self.prior else ("rounds", explore.rounds)
        if least > explore.max_rounds:
            raise invalid(f"must be at most profile.explore.max_rounds ({explore.max_rounds}), got {least}",
                          "explore", key)
        return self


class _Tracking(Schema):
    enabled: StrictBool = True
    margin: NonNegative
    ahead_margin: NonNegative | None
    every_rounds: Count | None
    keep_dependable_plan: StrictBool = False
    diverge_rounds: Count | None = None
    stall_rounds: Count | None = None
    stop_looks: Literal["one", "joint"] = "one"
    plan_end: Literal["plan", "stop_rule"] = "plan"
    early_stop_model: Literal["best", "last"] = "best"


class _Cost(Schema):
    source: Literal["table", "measured"] = "table"
    clock: Literal["auto", "model", "wall"] = "auto"
    drift_tolerance: Positive = 0.25
    drift_rounds: Count = 2


class _Server(Schema):
    node_wait_timeout_s: _Timeout
    round_timeout_s: _Timeout
    round_timeout_factor: NonNegative | None = None
    round_timeout_slack_s: _Timeout | None = None


class _Output(Schema):
    plot: StrictBool = True
    dir: Annotated[str, Field(strict=True)] | None = None


class _Planner(Schema):
    eta: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=1e-3, le=1)]
    guarantee: Literal["gaussian", "cantelli"]
    mc_trajectories: Annotated[Count, Field(le=10_000_000)]


def _ray_address(value: Any) -> Any:
    """``auto`` or ``HOST:PORT``; a Ray Client address and an impossible port are named as such."""
    if not isinstance(value, str) or value == "auto":
        return value
    if "://" in value:
        raise invalid(f"{value!r} is a URL (Ray Client's ray://HOST:10001 among them); a job joins a "
                      "cluster through its head's GCS address: give HOST:PORT (the port of `ray start "
                      "--head --port`, 6379 by default)")
    host, _, port = value.rpartition(":")
    if not host or ":" in host or not port.isdigit() or any(c.isspace() for c in value):
        raise invalid(f"must be auto or HOST:PORT (the head's GCS address, e.g. 127.0.0.1:6379), "
                      f"got {value!r}")
    if not 1 <= int(port) <= 65535:
        raise invalid(f"port {port} of {value!r} is not in 1-65535")
    return value


_RayAddress = Annotated[Annotated[str, Field(strict=True)] | None, BeforeValidator(_ray_address)]


class _Simulation(Schema):
    backend: Literal["ray", "inprocess"]
    client_num_cpus: Positive = 1.0
    client_num_gpus: NonNegative = 0.0
    ray_num_cpus: Count | None = None
    ray_address: _RayAddress = None

    @model_validator(mode="after")
    def _address_alone(self) -> _Simulation:
        if self.ray_address is not None and self.backend != "ray":
            raise invalid("needs simulation=ray (the in-process backend has no Ray)", "ray_address")
        if self.ray_address is not None and self.ray_num_cpus is not None:
            raise invalid("a running cluster brings its own CPUs; leave simulation.ray_num_cpus null",
                          "ray_address")
        return self


class _ClusterClass(Schema):
    fraction: Positive = 1.0


class _Clusters(Schema):
    classes: Annotated[dict[str, _ClusterClass], Field(min_length=1)]


class _SyntheticData(Schema):
    """``dataset=synthetic``: the generator's parameters."""

    alpha: NonNegative
    beta: NonNegative
    iid: StrictBool
    seed: NonNegativeCount | None
    log_mean: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-10, le=10)]
    log_sigma: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=5)]
    min_samples: Count
    held_out_fraction: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1)]


class _Config(Schema):
    """The user-facing keys of ``conf/`` (other keys are checked where they are used)."""

    method: Literal["depl", "expectation", "full"]
    seed: NonNegativeCount
    resume: StrictBool = False
    num_clients: Count
    partition: _Partition
    target: _Target
    train: _Train
    profile: _Profile
    tracking: _Tracking
    server: _Server
    planner: _Planner
    simulation: _Simulation
    clusters: _Clusters
    cost: _Cost | None = None
    output: _Output | None = None


def validate_config(cfg: Mapping[str, Any]) -> None:
    """Check the user-facing keys of a composed configuration against the config schema.

    Raises
    ------
    ScenarioError
        With one line naming the key and the problem, e.g.
        ``config target.prob: must be < 1, got 1.5``.
    """
    parse(_Config, cfg, label="config ")
    validate_robustness(cfg)
    profile = cfg["profile"]
    if profile.get("source", "federated") == "federated" and not profile.get("explore"):
        raise ScenarioError("config profile.explore: federated profiling needs profile.explore.rounds")
    dataset = cfg.get("dataset") or {}
    if dataset.get("name") == "synthetic":
        parse(_SyntheticData, dataset, root="dataset", label="config ")
        arch = (cfg.get("model") or {}).get("arch")
        if arch != "synthetic_mlp":
            raise ScenarioError(f"config model: dataset=synthetic has feature vectors, not images; "
                                f"use model=synthetic_mlp (got {arch})")
    if profile.get("source") == "inprocess" and (cfg.get("dataset") or {}).get("name") == "folder":
        raise ScenarioError("config profile.source: inprocess pilots need the training data on the server; "
                            "dataset=folder keeps it on the nodes (use profile.source=federated)")


class _Aggregation(Schema):
    rule: Literal[AGGREGATION_RULES]  # type: ignore[valid-type]
    trim_fraction: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, lt=0.5)]
    norm_factor: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=1)]
    weight_cap: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=1)]
    history: NonNegativeCount


class _SpikeTracking(Schema):
    spike_tail_prob: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, lt=0.5)] | None = None


class _Faults(Schema):
    clients: list[Annotated[str, Field(strict=True, pattern=r"^c[0-9]+$")]]
    kind: Annotated[Literal[FAULT_KINDS] | None, BeforeValidator(fault_kind)]  # type: ignore[valid-type]
    from_round: Count
    scale: Positive
    slow_s: NonNegative
    slowdown: Annotated[float, Field(strict=False, allow_inf_nan=False, ge=1)] = 3.0
    train_only: StrictBool = False


class _Robustness(Schema):
    """``aggregation.*``, ``faults.*`` and ``tracking.spike_tail_prob``; absent sections pass."""

    aggregation: _Aggregation | None = None
    tracking: _SpikeTracking | None = None
    faults: _Faults | None = None


def validate_robustness(cfg: Mapping[str, Any]) -> None:
    """Check ``aggregation.*``, ``faults.*`` and ``tracking.spike_tail_prob`` (absent sections pass)."""
    parse(_Robustness, cfg, label="config ")


def check_fault_clients(cfg: Mapping[str, Any]) -> None:
    """Refuse ``faults.clients`` naming a client outside ``c0..c{num_clients-1}``.

    For a simulation, whose federation is exactly ``num_clients`` clients; in a
    deployment more SuperNodes than ``num_clients`` may join.
    """
    faults = cfg.get("faults") or {}
    num_clients = cfg.get("num_clients")
    if faults.get("kind") is not None and isinstance(num_clients, int):
        for i, name in enumerate(faults.get("clients") or []):
            if int(str(name)[1:]) >= num_clients:
                raise ScenarioError(f"config faults.clients[{i}]: no client {name} among the {num_clients} "
                                    f"clients c0..c{num_clients - 1}")
