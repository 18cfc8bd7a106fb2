"""What a resource level does on a node: torch threads, CPU affinity, declared power.

The plan assigns every active cluster a level (an index into its ``levels``).
In a deployment the node config maps each index to what the node really
changes while it trains:

* ``level-threads="1,2"``: torch intra-op threads of level 0, 1, ...
* ``level-cpus="0;0-1"``: the CPUs the training may run on (``;`` between
  levels, Linux CPU-list syntax ``0-3,6`` within one); the affinity is set on
  every thread of the process for the round and restored afterwards.
* ``level-watts="2.5,6"``: the node's declared power (W) at each level, used
  for the energy of a reply when the node has no meter
  (:mod:`depl_fl.task.energy_meter`).

A level index beyond a list uses the list's last entry. Defaults: in a
deployment, level ``l`` runs ``l + 1`` torch threads (at most the CPUs the
process may use) with the affinity unchanged; in simulation every level runs
one thread (the declared table emulates the devices there). No torch import
at module level: the query path of a ClientApp process never loads torch.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from depl_fl.errors import ScenarioError


@dataclass(frozen=True)
class LevelSetting:
    """What one level applies: torch threads, CPU set (None: unchanged), declared watts (None: none)."""

    level: int
    threads: int
    cpus: frozenset[int] | None
    watts: float | None


def parse_cpu_list(text: str, field: str = "level-cpus") -> frozenset[int]:
    """``"0-2,5"`` -> ``{0, 1, 2, 5}`` (Linux CPU-list syntax); one-line error when malformed."""
    cpus: set[int] = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part:
                low, high = (int(v) for v in part.split("-", 1))
                if high < low:
                    raise ValueError
                cpus.update(range(low, high + 1))
            else:
                cpus.add(int(part))
    except ValueError:
        raise ScenarioError(f"node config {field}: {text!r} is not a CPU list like \"0-1,3\"") from None
    if not cpus or min(cpus) < 0:
        raise ScenarioError(f"node config {field}: {text!r} is not a CPU list like \"0-1,3\"")
    return frozenset(cpus)


def _entries(node_config: Mapping[str, Any], key: str, sep: str) -> list[str]:
    raw = node_config.get(key)
    if raw is None or str(raw).strip() == "":
        return []
    return [p.strip() for p in str(raw).split(sep)]


def _pick(entries: list[str], level: int) -> str | None:
    return entries[min(level, len(entries) - 1)] if entries else None


def _positive(text: str, key: str, kind: type) -> Any:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise ScenarioError(f"node config {key}: each entry must be a positive number, got {text!r}")
    return value


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def level_setting(node_config: Mapping[str, Any], level: int, deployment: bool) -> LevelSetting:
    """The setting of ``level`` from the node config (defaults in the module doc).

    Raises
    ------
    ScenarioError
        A negative level or a malformed node config entry (one line).
    """
    if level < 0:
        raise ScenarioError(f"level must be >= 0, got {level}")
    threads_text = _pick(_entries(node_config, "level-threads", ","), level)
    cpus_text = _pick(_entries(node_config, "level-cpus", ";"), level)
    watts_text = _pick(_entries(node_config, "level-watts", ","), level)
    cpus = parse_cpu_list(cpus_text) if cpus_text is not None else None
    if threads_text is not None:
        threads = _positive(threads_text, "level-threads", int)
    elif deployment:
        threads = min(level + 1, len(cpus) if cpus is not None else usable_cpus())
    else:
        threads = 1
    watts = float(_positive(watts_text, "level-watts", float)) if watts_text is not None else None
    return LevelSetting(int(level), int(threads), cpus, watts)


def _set_affinity_all_threads(cpus: frozenset[int] | set[int]) -> None:
    """Set the affinity of every thread of this process (torch's pool threads already exist)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpus)


@contextlib.contextmanager
def applied(setting: LevelSetting) -> Iterator[dict[str, int]]:
    """Apply ``setting`` for the body; yields the reply metrics that say what was applied.

    Metrics: ``level``, ``level-threads`` (torch threads in force),
    ``level-cpus`` (CPUs the process may run on) and ``level-cpu-mask``
    (bit i set: CPU i allowed; CPUs above 62 are left out of the mask).
    The previous thread count and affinity are restored afterwards.
    """
    import torch

    before_threads = torch.get_num_threads()
    before_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        if setting.cpus is not None and before_cpus is not None:
            try:
                _set_affinity_all_threads(setting.cpus)
            except OSError as exc:
                raise ScenarioError(f"node config level-cpus: cannot run on CPUs "
                                    f"{sorted(setting.cpus)} ({exc.strerror})") from None
        torch.set_num_threads(setting.threads)
        now = os.sched_getaffinity(0) if before_cpus is not None else set(range(usable_cpus()))
        yield {"level": setting.level, "level-threads": int(torch.get_num_threads()),
               "level-cpus": len(now), "level-cpu-mask": sum(1 << c for c in now if c < 63)}
    finally:
        torch.set_num_threads(before_threads)
        if setting.cpus is not None and before_cpus is not None:
            _set_affinity_all_threads(before_cpus)
