"""The exploration options that follow tracking: ``auto`` resolved to the frugal, cheap or thorough one.

``conf/profile/default.yaml`` gives three exploration options the value
``auto``: ``profile.explore.clients``, ``profile.explore.value_stop`` and
``profile.plan_regime.rate_window``. With ``tracking.enabled`` they resolve to
the frugal exploration (the cheapest clusters, the value stop, the rate from
the exploration's last half). Without it they resolve to what
``profile.explore.without_tracking`` names: ``cheap`` (the default: the
cheapest clusters, no value stop, the rate from the whole exploration) or
``thorough`` (every client, no value stop, the rate from the whole
exploration; what ``auto`` stood for without tracking before the key existed,
and what a configuration without the key still resolves to). A value stop makes
the plan from few rounds; tracking re-plans when the run leaves that plan, a
static plan has no such correction, so a static plan never gets the value stop
by default. With ``cost.source=measured`` every cluster explores (its costs are
measured there). ``profile=frugal`` and ``profile=thorough`` give the values
themselves, whatever tracking says.

A job records the resolved values: the entry points resolve the composed
configuration before they validate and run it. A resumed job keeps the values
its checkpoint recorded (:func:`keep_recorded`). Pure Python.
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
#: Without tracking, by default: explore on the cheapest clusters for the configured rounds (no value stop),
#: rate from the whole exploration read at r = 1 (``benchmarks/results/exploration_static/``).
CHEAP: dict[str, Any] = {"clients": "cheapest", "value_stop": False, "rate_window": 1.0}
#: Without tracking with ``without_tracking=thorough``: explore on every client for the configured rounds,
#: rate from the whole exploration.
THOROUGH: dict[str, Any] = {"clients": "all", "value_stop": False, "rate_window": 1.0}
#: ``profile.explore.without_tracking``: the word -> the exploration ``auto`` stands for without tracking.
WITHOUT_TRACKING: dict[str, dict[str, Any]] = {"cheap": CHEAP, "thorough": THOROUGH}
#: ``conf/profile/default.yaml``'s value of ``profile.explore.without_tracking``.
DEFAULT_WITHOUT_TRACKING = "cheap"
#: The value a configuration without the key resolves with: one recorded before the key existed, when
#: ``auto`` stood for the thorough exploration without tracking.
RECORDED_BEFORE = "thorough"
#: The key that picks the exploration without tracking, as (section path, key).
WITHOUT_TRACKING_KEY: tuple[tuple[str, ...], str] = (("profile", "explore"), "without_tracking")
#: Each option's values besides ``auto``, as its error names them (the schema checks the rest).
_ALLOWED = {"clients": "all, cheapest or auto", "value_stop": "true, false or auto",
            "rate_window": "a number in (0, 1] or auto"}
_WORDS = {"clients": ("all", "cheapest"), "value_stop": (), "rate_window": ()}


def exploration_values(tracking: bool, measured: bool = False,
                       without_tracking: str = DEFAULT_WITHOUT_TRACKING) -> dict[str, Any]:
    """The values ``auto`` stands for: :data:`FRUGAL` with tracking, else ``without_tracking``'s.

    ``without_tracking`` is ``cheap`` (:data:`CHEAP`) or ``thorough`` (:data:`THOROUGH`). With
    ``measured`` (``cost.source=measured``: the plan runs on the device costs the exploration
    measures) every cluster explores, so that every cluster's costs are measured, not declared.
    """
    values = dict(FRUGAL if tracking else WITHOUT_TRACKING[without_tracking])
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


def without_tracking(cfg: Mapping[str, Any]) -> str:
    """``profile.explore.without_tracking`` of a plain configuration (absent: :data:`RECORDED_BEFORE`).

    Raises
    ------
    ScenarioError
        One line for another value, e.g.
        ``config profile.explore.without_tracking=fast: must be cheap or thorough``.
    """
    path, key = WITHOUT_TRACKING_KEY
    section = _section(cfg, path)
    value = RECORDED_BEFORE if section is None or key not in section else section[key]
    if not isinstance(value, str) or value not in WITHOUT_TRACKING:
        raise ScenarioError(f"config {'.'.join((*path, key))}={value}: must be "
                            f"{' or '.join(WITHOUT_TRACKING)}")
    return value


def resolve_exploration(cfg: Mapping[str, Any], tracking: bool | None = None,
                        measured: bool | None = None, without: str | None = None) -> dict[str, Any]:
    """``cfg`` with every ``auto`` of :data:`FOLLOWS_TRACKING` replaced by the value tracking picks.

    Parameters
    ----------
    cfg : mapping
        A plain run configuration; left untouched.
    tracking : bool, optional
        Resolve as if ``tracking.enabled`` were this (default: ``cfg``'s own).
    measured : bool, optional
        Resolve as if ``cost.source=measured`` were this (default: ``cfg``'s own).
    without : str, optional
        Resolve as if ``profile.explore.without_tracking`` were this (default: ``cfg``'s own,
        :func:`without_tracking`).

    Returns
    -------
    dict
        A copy of ``cfg`` whose sections on the way to a resolved key are copied
        too; every other value as given (the schema checks it).

    Raises
    ------
    ScenarioError
        One line for another word in one of these options, e.g.
        ``config profile.explore.value_stop=sometimes: must be true, false or auto``,
        or in ``profile.explore.without_tracking`` (checked whatever tracking says).
    """
    chosen = without_tracking(cfg)
    values = exploration_values(tracking_enabled(cfg) if tracking is None else tracking,
                                measures_costs(cfg) if measured is None else measured,
                                chosen if without is None else without)
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


def keep_recorded(cfg: Mapping[str, Any], recorded: Mapping[str, Any] | None) -> dict[str, Any]:
    """``cfg`` (not yet resolved) with the exploration a checkpoint recorded, for a resumed job.

    Every option of :data:`FOLLOWS_TRACKING` still ``auto`` in ``cfg`` takes ``recorded``'s value, and
    ``profile.explore.without_tracking`` takes ``recorded``'s (left out where ``recorded`` has none: a
    checkpoint written before the key existed). A resumed job thus runs the exploration it started
    with, whatever the default has become since; a value given explicitly stays as given (the
    checkpoint check refuses it where it differs).

    Parameters
    ----------
    cfg : mapping
        A plain run configuration; left untouched.
    recorded : mapping or None
        The configuration the checkpoint recorded (resolved); ``None``: ``cfg`` as it is.
    """
    if recorded is None:
        return dict(cfg)
    out = dict(cfg)
    for path, key in FOLLOWS_TRACKING:
        section, kept = _section(cfg, path), _section(recorded, path)
        if section is not None and section.get(key) == AUTO and kept is not None and key in kept:
            _set(out, path, key, kept[key])
    path, key = WITHOUT_TRACKING_KEY
    section, kept = _section(out, path), _section(recorded, path)
    if section is not None and key in section:
        if kept is not None and key in kept:
            _set(out, path, key, kept[key])
        else:
            _drop(out, path, key)
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


def _drop(out: dict[str, Any], path: tuple[str, ...], key: str) -> None:
    node = out
    for part in path:
        node[part] = dict(node[part])
        node = node[part]
    del node[key]
