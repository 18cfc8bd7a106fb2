"""The energy of a node's training: from a meter when it has one, else declared power x busy time.

The CPU meter is Linux powercap (RAPL): every top-level zone
``<root>/<vendor>-rapl:<n>/energy_uj`` (a package's cumulative energy in
microjoules, wrapping at ``max_energy_range_uj``). Most kernels let only root
read it; an unreadable or absent counter means no meter. A package meter
counts everything the package ran in the interval, not only the training.

A node that trains on a CUDA device adds that GPU's own counter (NVML's
total energy since the driver loaded, in millijoules; Volta and later) when
``pynvml`` (the optional ``nvidia-ml-py``) is installed: :class:`GpuMeter`.
Like the package meter it counts everything the GPU ran in the interval
(other clients sharing it included). No flwr; torch only to name the GPU.
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


class GpuMeter:
    """Cumulative energy of the GPU behind a torch CUDA device, read through NVML.

    The GPU is found by its UUID (torch's device properties), so the reading
    is the right GPU also where ``CUDA_VISIBLE_DEVICES`` renumbers the devices
    (a Ray client's GPU share). Not available: no ``pynvml``, no CUDA, or a
    GPU without an energy counter.
    """

    def __init__(self, device: str) -> None:
        self.handle = None
        try:
            import pynvml  # optional: nvidia-ml-py
            import torch

            index = int(str(device).partition(":")[2] or torch.cuda.current_device())
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception:  # any failure means the same: this node has no GPU meter
            return
        self._nvml = pynvml
        self.handle = handle

    @property
    def available(self) -> bool:
        """Whether the GPU's energy counter answered."""
        return self.handle is not None

    def read_uj(self) -> list[int]:
        """The GPU's counter now (microjoules)."""
        return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) * 1000]

    def joules_between(self, start: list[int], end: list[int]) -> float:
        """Energy between two :meth:`read_uj` readings (a 64-bit counter: no wrap-around)."""
        return max(end[0] - start[0], 0) / 1e6


class Meters:
    """Several meters read as one: their readings side by side, their energies summed."""

    def __init__(self, meters: list[RaplMeter | GpuMeter]) -> None:
        self.meters = meters

    def read_uj(self) -> list[list[int]]:
        """Every meter's reading now."""
        return [m.read_uj() for m in self.meters]

    def joules_between(self, start: list[list[int]], end: list[list[int]]) -> float:
        """The meters' energies between two :meth:`read_uj` readings, summed."""
        return float(sum(m.joules_between(a, b) for m, a, b in zip(self.meters, start, end, strict=True)))


def meter_for(setting: object, device: str = "cpu") -> Meters | None:
    """The node's meters: RAPL from node config ``energy-meter`` (a powercap root; ``off``: no meter at
    all), plus the GPU's own counter when the node trains on a CUDA ``device``; None if none answers."""
    if setting is not None and str(setting).strip().lower() in {"off", "none", "false", ""}:
        return None
    found: list[RaplMeter | GpuMeter] = [RaplMeter(POWERCAP_ROOT if setting is None else str(setting))]
    if str(device).startswith("cuda"):
        found.append(GpuMeter(device))
    meters = [m for m in found if m.available]
    return Meters(meters) if meters else None


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
