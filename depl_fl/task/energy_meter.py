"""The energy of a node's training: from a meter when it has one, else declared power x busy time.

The meter is Linux powercap (RAPL): every top-level zone
``<root>/<vendor>-rapl:<n>/energy_uj`` (a package's cumulative energy in
microjoules, wrapping at ``max_energy_range_uj``). Most kernels let only root
read it; an unreadable or absent counter means no meter. A package meter
counts everything the package ran in the interval, not only the training.
No torch, no flwr.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Default root of the powercap sysfs tree (node config ``energy-meter`` overrides it; ``off``: none).
POWERCAP_ROOT = "/sys/class/powercap"
_TOP_ZONE = re.compile(r"^[a-z]+-rapl:\d+$")

#: Energy sources of a reply and of a round, strongest first.
SOURCES = ("meter", "declared", "model")


@dataclass(frozen=True)
class _Zone:
    counter: Path
    wrap_uj: int | None


class RaplMeter:
    """Cumulative package energy of the top-level RAPL zones under ``root``."""

    def __init__(self, root: str | Path = POWERCAP_ROOT) -> None:
        self.root = Path(root)
        self.zones = self._readable_zones()

    def _readable_zones(self) -> list[_Zone]:
        zones = []
        try:
            entries = sorted(p for p in self.root.iterdir() if _TOP_ZONE.match(p.name))
        except OSError:
            return []
        for zone in entries:
            counter = zone / "energy_uj"
            try:
                int(counter.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                wrap = int((zone / "max_energy_range_uj").read_text().strip())
            except (OSError, ValueError):
                wrap = None
            zones.append(_Zone(counter, wrap))
        return zones

    @property
    def available(self) -> bool:
        """Whether at least one zone's counter is readable."""
        return bool(self.zones)

    def read_uj(self) -> list[int]:
        """Every zone's counter now (microjoules)."""
        return [int(z.counter.read_text().strip()) for z in self.zones]

    def joules_between(self, start: list[int], end: list[int]) -> float:
        """Energy between two :meth:`read_uj` readings, each counter's wrap-around undone."""
        total = 0
        for zone, a, b in zip(self.zones, start, end, strict=True):
            delta = b - a
            if delta < 0 and zone.wrap_uj:
                delta += zone.wrap_uj + 1
            total += max(delta, 0)
        return total / 1e6


def meter_for(setting: object) -> RaplMeter | None:
    """The node's meter from node config ``energy-meter`` (a powercap root, or ``off``); None if none."""
    if setting is not None and str(setting).strip().lower() in {"off", "none", "false", ""}:
        return None
    meter = RaplMeter(POWERCAP_ROOT if setting is None else str(setting))
    return meter if meter.available else None


def reply_energy(metered_j: float | None, watts: float | None, busy_s: float) -> tuple[float | None, str]:
    """``(joules, source)`` of one reply: the meter's reading, else declared watts x busy seconds.

    ``(None, "model")`` when the node has neither: the server then uses the
    declared table's model (the scenario's client energy).
    """
    if metered_j is not None:
        return float(metered_j), "meter"
    if watts is not None:
        return float(watts) * max(float(busy_s), 0.0), "declared"
    return None, "model"
