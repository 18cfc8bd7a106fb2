"""Which configuration keys each mode of a job reads, and the refusal of a setting its mode ignores.

A job's mode is picked by a few switches: the entry point (a Hydra job of
``depl_fl/main.py``, ``flwr run .``, or a user's own app), ``simulation.backend``,
``profile.source``, ``profile.file``, ``profile.plan_regime.enabled``,
``tracking.enabled``, ``method``, ``dataset.name``, ``faults.kind``,
``aggregation.rule`` and ``cost.clock``. Some keys are read in one mode only. A key that is
*set* -- its value differs from the one ``conf/`` gives it, e.g. because an
override names it -- while the chosen mode does not read it is refused before
anything starts: one line naming the key and the mode that ignores it
(:class:`~depl_fl.errors.ScenarioError`, exit status 2). Nothing is taken
silently; a key at its ``conf/`` value is never refused. Every key of the
table is refused where it is not read, none is given a new meaning there;
keys outside the table (``target.*``, ``train.*``, ``server.*``,
``clusters.*``, ``planner.mc_trajectories``, ...) are read in every mode.
The Hydra job, each job of a sweep, ``flwr run .`` (the ServerApp and the
ClientApps compose the run config) and ``depl-fl profile`` all check through
:func:`depl_fl.runs.runconfig.validate`.

Decisions, key by key (:data:`RULES` is the table the check reads):

* ``profile.file``: read only by in-process profiling. With the default
  federated profiling it is refused, not used as a starting profile (the
  exploration rounds measure the profile on the clients; starting from a file
  would be a new feature). With ``profile.file`` given, the in-process pilots
  do not run, so their keys (``seeds``, ``rounds``, ``switch_rounds``,
  ``switch_at``, ``subset_fractions``, ``spread_horizon``,
  ``data_exponent_mean/std``) and ``profile.cache_dir`` are refused.
* ``profile.seeds``, ``rounds``, ``switch_rounds``, ``switch_at``,
  ``subset_fractions``, ``spread_horizon``: in-process pilots only (refused
  with ``profile.source=federated``); ``profile.explore.*`` and
  ``profile.plan_regime.*``: federated profiling only (refused with
  ``profile.source=inprocess``); every ``profile.plan_regime`` constant (all
  but ``enabled``): refused with ``profile.plan_regime.enabled=false``. ``data_exponent_mean/std``
  and ``cache_dir`` are read by both sources (the fallback exponents and the
  cache).
* ``tracking.margin``, ``ahead_margin``, ``every_rounds``, ``keep_dependable_plan``: the re-planning
  policy, ``diverge_rounds`` (the divergence stop), ``stall_rounds`` (the patience stop) and
  ``stop_looks`` (the stop margin over the looks so far), ``plan_end`` (whether a used-up plan
  ends the job) and ``early_stop_model`` (the model those two stops end with), refused with
  ``tracking.enabled=false``.
  ``tracking.spike_tail_prob``
  is read in every mode (spikes are flagged and recorded without tracking too).
* ``planner.guarantee``: refused with ``method=expectation``, which plans,
  tracks and stops on the predicted mean only; ``planner.eta``: refused with
  ``method=full`` (no expanded graph). ``depl-fl plan`` follows the same
  table for its options (:data:`PLAN_OPTIONS`): ``--guarantee`` with a
  method other than ``depl``, ``--eta`` with ``full`` or ``optimum``.
* ``simulation.client_num_cpus``, ``client_num_gpus``, ``ray_num_cpus``, ``ray_address``: Ray
  only, refused with ``simulation.backend=inprocess``. So are the server's waits
  (``server.node_wait_timeout_s``, ``round_timeout_s``, ``round_timeout_factor``,
  ``round_timeout_slack_s``): the in-process grid has every node at once and
  waits for every reply. Under ``flwr run .`` the federation
  (``pyproject.toml``, ``$FLWR_HOME/config.toml``) decides how the apps run:
  every ``simulation.*`` key is refused there.
* ``output.dir``: read only under ``flwr run .``; a Hydra job writes into its
  job folder (set it with ``hydra.run.dir=PATH``), so it is refused there.
* A user's own Flower app (:mod:`strategies.user_app`, entry point
  :data:`USER_APP`) brings its network, data, ``train`` function and
  ServerApp: ``simulation.*``, ``output.*``, ``dataset.*``, ``partition.*``,
  ``faults.*``, ``train.lr``, ``train.batch_size``, ``train.device``,
  ``model.arch``, ``model.factory``, ``resume`` and ``profile.source`` (the
  in-process pilots train DepL's own network on its data) are refused there
  (``train.local_epochs`` is read: the ``epochs`` its ``train`` is called with).
* ``dataset.data_dir``: read by ``cifar10`` and ``gtsrb`` (``digits`` is
  embedded, ``folder`` nodes read their node config ``data-dir``);
  ``dataset.test_dir`` and ``classes``: ``folder`` only; ``partition.alpha``:
  refused with ``dataset=folder`` (each node brings its own data) and
  ``dataset=synthetic`` (each device draws its own).
* ``faults.clients``, ``from_round``: refused with ``faults.kind=null``;
  ``faults.scale``: ``faults.kind=scale`` only; ``faults.slow_s``:
  ``faults.kind=slow`` only.
* ``aggregation.trim_fraction``: ``aggregation.rule=trimmed_mean`` only.
* ``cost.drift_tolerance``, ``drift_rounds``: the wall clock only
  (``cost.clock=wall``, or ``auto`` under ``flwr run .``); ``cost.source``
  (``measured``): under ``flwr run .``, elsewhere with ``cost.clock=wall``
  only (a simulation's replies time an emulation). Library calls
  (no entry point) skip both rules.

A default of ``auto`` (the exploration options that follow tracking,
:mod:`depl_fl.runs.exploration_choice`) counts as the value it resolves to
with the configuration's ``tracking.enabled`` and
``profile.explore.without_tracking``: ``profile=thorough`` with tracking
sets them, the default profile never does.

Pure Python: imports neither Hydra nor the config schema; the caller passes
the configuration ``conf/`` composes without overrides (the defaults).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from depl_fl.errors import ScenarioError
from depl_fl.runs.exploration_choice import (
    measures_costs,
    resolve_exploration,
    tracking_enabled,
    without_tracking,
)

#: Entry points that check a configuration (``None``: a library call, e.g. a test or benchmark).
HYDRA_JOB = "a Hydra job (depl_fl/main.py)"
FLWR_RUN = "flwr run ."
USER_APP = "your own Flower app (strategies.user_app)"
#: The entry points that run DepL's own network, data and ClientApp.
_DEPL_APPS = (HYDRA_JOB, FLWR_RUN)

_PILOT_KEYS = ("profile.seeds", "profile.rounds", "profile.switch_rounds", "profile.switch_at",
               "profile.subset_fractions", "profile.spread_horizon")
_REGIME_CONSTANTS = ("power", "floor", "rate_exponent", "noise_exponent", "oscillation", "steps_exponent",
                     "reference_steps", "steps_min", "steps_max", "judged_error_factor", "oscillation_dof",
                     "rate_window", "explored_oscillation", "anchor", "switch_cycles")
_MISSING = object()

#: ``depl-fl plan`` options read by some planning methods only -> the methods that read them.
PLAN_OPTIONS: dict[str, frozenset[str]] = {
    "--guarantee": frozenset({"depl"}),          # the quantile bound of DepL's search
    "--eta": frozenset({"depl", "expectation"}),  # the step of the expanded graph both search
}


class AllBut:
    """The modes of a switch other than ``modes`` (a key read by every mode but these)."""

    def __init__(self, *modes: str) -> None:
        self.modes = frozenset(modes)

    def __contains__(self, mode: object) -> bool:
        return mode not in self.modes

    def text(self, switch: str) -> str:
        """``"faults.kind other than null"``."""
        return f"{switch} other than {'|'.join(sorted(self.modes))}"


Readers = frozenset[str] | AllBut


def _readers_text(switch: str, readers: Readers) -> str:
    if isinstance(readers, AllBut):
        return readers.text(switch)
    if switch == "entry point":
        return " or ".join(sorted(readers))
    if switch == "profile.file":
        return "no profile.file"
    return f"{switch}={'|'.join(sorted(readers))}"


@dataclass(frozen=True)
class ModeRule:
    """One switch, the mode it picks, and the keys only some of its modes read.

    Attributes
    ----------
    switch : str
        What picks the mode (a key, or ``entry point``), as the error names it.
    mode : callable
        ``mode(cfg, entry) -> str | None``: the chosen mode, e.g. ``"federated"``;
        ``None`` when the rule does not apply.
    reads : mapping
        Key (a dotted leaf, or a section ``"a.b.*"``) -> the modes that read it.
    hint : str
        Why, or what to do instead, appended to the error line.
    """

    switch: str
    mode: Callable[[Mapping[str, Any], str | None], str | None]
    reads: Mapping[str, Readers]
    hint: str = ""


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _value(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    value = _get(cfg, dotted)
    return default if value is _MISSING else value


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and math.isnan(value):
        return "nan"  # YAML and Hydra read the fault kind nan as a float
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _switch(dotted: str, default: Any = None) -> Callable[[Mapping[str, Any], str | None], str]:
    """The mode picked by the value of key ``dotted`` (``default`` where the key is absent)."""
    return lambda cfg, entry: _text(_value(cfg, dotted, default))


def _source(cfg: Mapping[str, Any]) -> str:
    return _text(_value(cfg, "profile.source", "federated"))


def _file_mode(cfg: Mapping[str, Any], entry: str | None) -> str | None:
    if _source(cfg) != "inprocess":
        return None  # the profile.source rule speaks first
    return "given" if _value(cfg, "profile.file") else "null"


def _regime_mode(cfg: Mapping[str, Any], entry: str | None) -> str | None:
    return _text(_value(cfg, "profile.plan_regime.enabled", True)) if _source(cfg) == "federated" else None


def _entry(cfg: Mapping[str, Any], entry: str | None) -> str | None:
    return entry


def _backend_mode(cfg: Mapping[str, Any], entry: str | None) -> str | None:
    return None if entry in (FLWR_RUN, USER_APP) else _text(_value(cfg, "simulation.backend", "ray"))


def _clock_mode(cfg: Mapping[str, Any], entry: str | None) -> str | None:
    """What the deadline counts: ``cost.clock``, ``auto`` resolved (wall under ``flwr run .``, else model)."""
    if entry is None:
        return None
    clock = _text(_value(cfg, "cost.clock", "auto"))
    return clock if clock != "auto" else ("wall" if entry == FLWR_RUN else "model")


def _simulated_clock_mode(cfg: Mapping[str, Any], entry: str | None) -> str | None:
    """:func:`_clock_mode` where the replies time an emulation (every entry point but ``flwr run .``)."""
    return None if entry == FLWR_RUN else _clock_mode(cfg, entry)


def _of(*modes: str) -> frozenset[str]:
    return frozenset(modes)


#: The table: a set key whose rule's chosen mode is not among its readers is refused (first rule first).
RULES: tuple[ModeRule, ...] = (
    ModeRule("entry point", _entry, {"simulation.*": _of(HYDRA_JOB)},
             "under flwr run the federation, not this config, decides how the apps run"),
    ModeRule("entry point", _entry, {"output.*": _of(*_DEPL_APPS)},
             "your ServerApp writes what it keeps"),
    ModeRule("entry point", _entry, {"output.dir": _of(FLWR_RUN)},
             "a Hydra job writes into its job folder: set hydra.run.dir=PATH"),
    ModeRule("entry point", _entry, {"dataset.*": _of(*_DEPL_APPS), "partition.*": _of(*_DEPL_APPS)},
             "your ClientApp loads its own data"),
    ModeRule("entry point", _entry, {"train.lr": _of(*_DEPL_APPS)},
             "your train function sets the learning rate"),
    ModeRule("entry point", _entry, {"train.batch_size": _of(*_DEPL_APPS)},
             "your data loaders set the batch size"),
    ModeRule("entry point", _entry, {"train.device": _of(*_DEPL_APPS)},
             "DepLClient(..., device=), a node config device and evaluate_fn(..., device=) set it"),
    ModeRule("entry point", _entry, {"model.arch": _of(*_DEPL_APPS), "model.factory": _of(*_DEPL_APPS)},
             "the network is the UserNetwork you pass"),
    ModeRule("entry point", _entry, {"faults.*": _of(*_DEPL_APPS)},
             "DepL's own ClientApp injects the faults; yours trains as written"),
    ModeRule("entry point", _entry, {"profile.source": _of(*_DEPL_APPS)},
             "the in-process pilots train DepL's own network on its own data: your network's profile "
             "comes from its exploration rounds"),
    ModeRule("entry point", _entry, {"resume": _of(*_DEPL_APPS)},
             "DepL's own jobs keep a checkpoint to resume from; your ServerApp starts the strategy afresh"),
    ModeRule("profile.source", _switch("profile.source", "federated"),
             {key: _of("inprocess") for key in (*_PILOT_KEYS, "profile.file")},
             "federated profiling measures the profile in exploration rounds on the clients"),
    ModeRule("profile.source", _switch("profile.source", "federated"),
             {"profile.explore.*": _of("federated"), "profile.plan_regime.*": _of("federated"),
              "profile.prior": _of("federated")},
             "in-process pilots on the server replace the exploration rounds"),
    ModeRule("profile.file", _file_mode,
             {key: _of("null") for key in (*_PILOT_KEYS, "profile.data_exponent_mean",
                                           "profile.data_exponent_std", "profile.cache_dir")},
             "the profile is read from the file, no pilot runs"),
    ModeRule("profile.plan_regime.enabled", _regime_mode,
             {f"profile.plan_regime.{name}": _of("true") for name in _REGIME_CONSTANTS}),
    ModeRule("tracking.enabled", _switch("tracking.enabled", False),
             {f"tracking.{name}": _of("true") for name in ("margin", "ahead_margin", "every_rounds",
                                                               "keep_dependable_plan", "diverge_rounds",
                                                               "stall_rounds",
                                                               "stop_looks", "plan_end",
                                                               "early_stop_model")},
             "they steer online re-planning"),
    ModeRule("method", _switch("method", "depl"), {"planner.guarantee": AllBut("expectation")},
             "the expectation baseline plans, tracks and stops on the predicted mean"),
    ModeRule("method", _switch("method", "depl"), {"planner.eta": _of(*PLAN_OPTIONS["--eta"])},
             "FedAvg plans no expanded graph"),
    ModeRule("simulation.backend", _backend_mode,
             {"simulation.client_num_cpus": _of("ray"), "simulation.client_num_gpus": _of("ray"),
              "simulation.ray_num_cpus": _of("ray"),
              "simulation.ray_address": _of("ray")},
             "the in-process grid runs every client in this process"),
    ModeRule("simulation.backend", _backend_mode,
             {f"server.{name}": _of("ray") for name in ("node_wait_timeout_s", "round_timeout_s",
                                                         "round_timeout_factor", "round_timeout_slack_s")},
             "the in-process grid has every node at once and waits for every reply"),
    ModeRule("dataset.name", _switch("dataset.name", "digits"),
             {"dataset.data_dir": _of("cifar10", "gtsrb"), "dataset.test_dir": _of("folder"),
              "dataset.classes": _of("folder")},
             "digits is embedded; folder nodes read their node config data-dir"),
    ModeRule("dataset.name", _switch("dataset.name", "digits"),
             {"partition.alpha": AllBut("folder", "synthetic")},
             "folder nodes bring their own data, synthetic devices draw theirs: nothing is partitioned"),
    ModeRule("faults.kind", _switch("faults.kind"),
             {"faults.clients": AllBut("null"), "faults.from_round": AllBut("null"),
              "faults.scale": _of("scale"), "faults.slow_s": _of("slow")}),
    ModeRule("aggregation.rule", _switch("aggregation.rule", "fedavg"),
             {"aggregation.trim_fraction": _of("trimmed_mean")}),
    ModeRule("cost.clock", _simulated_clock_mode, {"cost.source": _of("wall")},
             "in simulation the replies time an emulation, not a device: the declared cost table stays "
             "(cost.clock auto counts modelled seconds there)"),
    ModeRule("cost.clock", _clock_mode,
             {"cost.drift_tolerance": _of("wall"), "cost.drift_rounds": _of("wall")},
             "the drift test compares wall-clock round times with the plan's"),
)


def check_plan_options(method: str, given: Mapping[str, Any]) -> None:
    """Refuse a ``depl-fl plan`` option that ``--method`` does not read.

    Parameters
    ----------
    method : str
        The planning method.
    given : mapping
        Option (``"--eta"``) -> its value, ``None`` where the command line does not give it.

    Raises
    ------
    ScenarioError
        One line naming the option and the method, e.g.
        ``--guarantee: not read by --method full (read only by --method depl); drop it``.
    """
    for option, readers in PLAN_OPTIONS.items():
        if given.get(option) is not None and method not in readers:
            raise ScenarioError(f"{option}: not read by --method {method} (read only by --method "
                                f"{'|'.join(sorted(readers))}); drop it")


def first_difference(value: Any, default: Any, prefix: str) -> str | None:
    """Dotted name of the first leaf where ``value`` differs from ``default`` (``None`` if equal).

    A leaf absent from ``default`` counts as ``None`` there (a key that only
    some config group options declare is unset at ``null``).
    """
    if isinstance(value, Mapping):
        base = default if isinstance(default, Mapping) else {}
        for key in value:
            found = first_difference(value[key], base.get(key), f"{prefix}.{key}")
            if found is not None:
                return found
        return None
    if value is _MISSING:
        return None
    if isinstance(value, float) and isinstance(default, float) and math.isnan(value) and math.isnan(default):
        return None
    return None if value == default else prefix


def with_model_defaults(defaults: Mapping[str, Any], cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``defaults`` with the plan-regime keys the chosen model gives (``model.regime``, whose values
    ``conf/profile/default.yaml`` takes) at that model's value: a key at its model's value is not set."""
    own = _value(cfg, "model.regime", None)
    if not isinstance(own, Mapping) or not own:
        return defaults
    regime = {**(_value(defaults, "profile.plan_regime", None) or {}), **own}
    profile = {**_value(defaults, "profile", {}), "plan_regime": regime}
    return {**defaults, "profile": profile}


def ignored_settings(cfg: Mapping[str, Any], defaults: Mapping[str, Any],
                     entry: str | None = None) -> list[tuple[str, ModeRule, str]]:
    """The set keys that the chosen mode does not read, as ``(key, rule, mode)``, in table order.

    Parameters
    ----------
    cfg : mapping
        The composed, plain run configuration.
    defaults : mapping
        The configuration ``conf/`` composes without overrides.
    entry : str, optional
        :data:`HYDRA_JOB`, :data:`FLWR_RUN`, :data:`USER_APP` or ``None`` (entry-point rules skipped).
    """
    cfg = resolve_exploration(cfg)
    defaults = resolve_exploration(with_model_defaults(defaults, cfg), tracking=tracking_enabled(cfg),
                                   measured=measures_costs(cfg), without=without_tracking(cfg))
    out = []
    for rule in RULES:
        mode = rule.mode(cfg, entry)
        if mode is None:
            continue
        for key, readers in rule.reads.items():
            if mode in readers:
                continue
            dotted = key[:-2] if key.endswith(".*") else key
            value = _get(cfg, dotted)
            if value is _MISSING:
                continue
            found = first_difference(value, _value(defaults, dotted), dotted)
            if found is not None and all(found != key for key, _, _ in out):
                out.append((found, rule, mode))
    return out


def check_mode_keys(cfg: Mapping[str, Any], defaults: Mapping[str, Any], entry: str | None = None) -> None:
    """Refuse a set key that the chosen mode does not read (see the module docstring).

    Raises
    ------
    ScenarioError
        One line naming the first such key and the mode that ignores it, e.g.
        ``config profile.file: not read with profile.source=federated (...)``.
    """
    found = ignored_settings(cfg, defaults, entry)
    if not found:
        return
    key, rule, mode = found[0]
    if rule.switch == "entry point":
        picked = f"the entry point is {mode}"
    elif rule.switch == "profile.file":
        picked = "profile.file is given"
    else:
        picked = f"{rule.switch}={mode}"
    readers = rule.reads[key] if key in rule.reads else next(
        r for k, r in rule.reads.items() if k.endswith(".*") and key.startswith(k[:-1]))
    why = f"; {rule.hint}" if rule.hint else ""
    more = f"; also not read: {', '.join(k for k, _, _ in found[1:])}" if len(found) > 1 else ""
    raise ScenarioError(f"config {key}={_text(_get(cfg, key))}: not read when {picked} (read only with "
                        f"{_readers_text(rule.switch, readers)}{why}); drop it or choose that mode{more}")
