"""What builds a job's network: the architecture and the images it reads (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskGeometry:
    """Architecture (built-in name or factory ``PKG.MODULE:NAME``) and input/output geometry."""

    arch: str
    num_classes: int
    in_channels: int
    image_size: int
