"""What builds a job's network: the architecture and the images it reads (torch-free)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class TaskGeometry:
    """Architecture (built-in name or factory ``PKG.MODULE:NAME``) and input/output geometry.

    ``compressions`` are the job's compressed variants (ascending, each > 0;
    :func:`with_compressions`): the Check keeps whole every channel group
    whose loss of channels breaks the forward at any of them
    (:func:`depl_fl.task.subnets.kept_whole`). Empty: the Check's probe
    compression alone.
    """

    arch: str
    num_classes: int
    in_channels: int
    image_size: int
    compressions: tuple[float, ...] = ()


Bound = TypeVar("Bound")


def model_id(compression: float) -> str:
    """Scenario model id of a compression factor: ``full``, ``p50``, ``p75``, ``p90``..."""
    return "full" if compression == 0 else f"p{int(round(compression * 100))}"


def job_compressions(compressions: Iterable[float]) -> tuple[float, ...]:
    """The compressed variants among ``compressions``: each ``c > 0`` once, ascending."""
    return tuple(sorted({float(c) for c in compressions if float(c) > 0}))


def with_compressions(network: Bound, compressions: Iterable[float]) -> Bound:
    """``network`` (a task geometry or a user's network) cut to a job's ``compressions`` (0 left out).

    Every process that derives the variants from the same network and
    compressions keeps the same groups whole, so the server and the nodes agree.
    """
    return dataclasses.replace(network, compressions=job_compressions(compressions))  # type: ignore[type-var]
