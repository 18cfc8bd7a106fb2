"""The exploration options that follow tracking: ``auto`` resolved to the frugal or the thorough exploration.

``conf/profile/default.yaml`` gives three exploration options the value
``auto``: ``profile.explore.clients``, ``profile.explore.value_stop`` and
``profile.plan_regime.rate_window``. With ``tracking.enabled`` they resolve to
the frugal exploration (the cheapest clusters, the value stop, the rate from
the exploration's last half), without it to the thorough one (every client, no
value stop, the rate from the whole exploration). A value stop makes the plan
from few rounds; tracking re-plans when the run leaves that plan, a static plan
has no such correction. With ``cost.source=measured`` every cluster explores
(its costs are measured there). ``profile=frugal`` and ``profile=thorough``
give the values themselves, whatever tracking says.

A job records the resolved values: the entry points resolve the composed
configuration before they validate and run it. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from depl_fl.errors import ScenarioError

#: The value that lets tracking decide.
AUTO = "auto"

#: The options that follow tracking, as (section path, key).
FOLLOWS_TRACKING: tuple[tuple[tuple[str, ...], str], ...] = (
    (("profile", "explore"), "clients"),
    (("profile", "explore"), "value_stop"),
    (("profile", "plan_regime"), "rate_window"),
)

#: With tracking: explore on the cheapest clusters, stop once a round no longer pays, rate from the last half.
FRUGAL: dict[str, Any] = {"clients": "cheapest", "value_stop": True, "rate_window": 0.5}
#: Without tracking: explore on every client for the configured rounds, rate from the whole exploration.
THOROUGH: dict[str, Any] = {"clients": "all", "value_stop": False, "rate_window": 1.0}
#: Each option's values besides ``auto``, as its error names them (the schema checks the rest).
_ALLOWED = {"clients": "all, cheapest or auto", "value_stop": "true, false or auto",
            "rate_window": "a number in (0, 1] or auto"}
_WORDS = {"clients": ("all", "cheapest"), "value_stop": (), "rate_window": ()}


def exploration_values(tracking: bool, measured: bool = False) -> dict[str, Any]:
    """The values ``auto`` stands for: :data:`FRUGAL` with tracking, :data:`THOROUGH` without.

    With ``measured`` (``cost.source=measured``: the plan runs on the device costs the exploration
    measures) every cluster explores, so that every cluster's costs are measured, not declared.
    """
    values = dict(FRUGAL if tracking else THOROUGH)
    if measured:
        values["clients"] = THOROUGH["clients"]
    return values


def measures_costs(cfg: Mapping[str, Any]) -> bool:
    """``cost.source=measured`` in a plain configuration (absent: the declared table)."""
    cost = cfg.get("cost")
    return isinstance(cost, Mapping) and str(cost.get("source", "table")) == "measured"


def tracking_enabled(cfg: Mapping[str, Any]) -> bool:
    """``tracking.enabled`` of a plain configuration (absent: off)."""
    tracking = cfg.get("tracking")
    return bool(tracking.get("enabled", False)) if isinstance(tracking, Mapping) else False


def resolve_exploration(cfg: Mapping[str, Any], tracking: bool | None = None,
                        measured: bool | None = None) -> dict[str, Any]:
    """``cfg`` with every ``auto`` of :data:`FOLLOWS_TRACKING` replaced by the value tracking picks.

    Parameters
    ----------
    cfg : mapping
        A plain run configuration; left untouched.
    tracking : bool, optional
        Resolve as if ``tracking.enabled`` were this (default: ``cfg``'s own).
    measured : bool, optional
        Resolve as if ``cost.source=measured`` were this (default: ``cfg``'s own).

    Returns
    -------
    dict
        A copy of ``cfg`` whose sections on the way to a resolved key are copied
        too; every other value as given (the schema checks it).

    Raises
    ------
    ScenarioError
        One line for another word in one of these options, e.g.
        ``config profile.explore.value_stop=sometimes: must be true, false or auto``.
    """
    values = exploration_values(tracking_enabled(cfg) if tracking is None else tracking,
                                measures_costs(cfg) if measured is None else measured)
    out = dict(cfg)
    for path, key in FOLLOWS_TRACKING:
        section = _section(cfg, path)
        value = None if section is None else section.get(key)
        if not isinstance(value, str):
            continue
        if value != AUTO and value not in _WORDS[key]:
            raise ScenarioError(f"config {'.'.join((*path, key))}={value}: must be {_ALLOWED[key]}")
        if value == AUTO:
            _set(out, path, key, values[key])
    return out


def _section(cfg: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node: Any = cfg
    for part in path:
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _set(out: dict[str, Any], path: tuple[str, ...], key: str, value: Any) -> None:
    node = out
    for part in path:
        node[part] = dict(node[part])
        node = node[part]
    node[key] = value
