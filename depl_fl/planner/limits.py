"""Numeric range checks: scenario values whose rounds or loss steps overflow a float.

Each field of a scenario may be finite and positive on its own while their
products are not (``1e300`` FLOPs per sample, ``1e-300`` FLOP/s, a data ratio
whose power overflows): the planner's arithmetic would then meet ``inf`` and
``nan`` and fail deep inside. :func:`check_ranges` finds those cases up front
and names the field in one line (a :class:`~depl_fl.errors.ScenarioError`,
exit status 2 on the command line).
"""

from __future__ import annotations

import math

from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import effective_ratio
from depl_fl.errors import ScenarioError

#: Largest initial loss, and largest one-round loss change relative to it, the planner accepts.
LOSS_LIMIT = 1e9


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _check_rounds(scenario: Scenario) -> None:
    """Time and energy of one client's round at every level and model must be finite."""
    total = float(sum(c.num_samples for c in scenario.clients))
    for ci, cluster in enumerate(scenario.clusters):
        biggest = max((c.num_samples for c in scenario.clients if c.cluster == cluster.id), default=0)
        for model in scenario.models:
            comm = 2.0 * model.size_bytes
            if not (_finite(comm / cluster.bytes_per_s) and _finite(comm * cluster.joules_per_byte * total)):
                raise ScenarioError(f"clusters[{ci}] ({cluster.id}): transfer time or energy of model "
                                    f"{model.id!r} is not a finite number (bytes_per_s, joules_per_byte, "
                                    "size_bytes out of range)")
            for li, level in enumerate(cluster.levels):
                work = scenario.local_epochs * biggest * model.flops_per_sample
                energy = scenario.local_epochs * total * model.flops_per_sample * level.joules_per_flop
                if not (_finite(work / level.flops_per_s) and _finite(energy)
                        and _finite(energy + cluster.activation_joules * len(scenario.clusters))):
                    raise ScenarioError(f"clusters[{ci}].levels[{li}] ({cluster.id}): round time or "
                                        f"energy of model {model.id!r} is not a finite number "
                                        "(flops_per_s, joules_per_flop, flops_per_sample, num_samples "
                                        "out of range)")


def _check_loss(scenario: Scenario) -> None:
    """The initial loss and one round's loss change must stay below ``LOSS_LIMIT``.

    The expanded graph bins losses in steps of a fraction of the initial loss
    as 64-bit integers; a loss or spread beyond ``LOSS_LIMIT`` times the loss
    scale would overflow them (and means nothing for a training loss).
    """
    loss = scenario.loss
    if not loss.initial <= LOSS_LIMIT:
        raise ScenarioError(f"loss.initial: must be <= {LOSS_LIMIT:g}, got {loss.initial!r}")
    bound = LOSS_LIMIT * max(loss.initial, 1.0)
    ref = float(loss.reference_samples)
    sizes = [c.num_samples for c in scenario.clients]
    ratios = [min(sizes) / ref, sum(sizes) / ref]
    if scenario.version >= 2 and loss.label_shares is not None:
        # r_eff = c_S r: a single client gives the least (c_S n_S grows with the set).
        ratios.append(min(effective_ratio(scenario, (c.id,)) for c in scenario.clients))
    for r in ratios:
        try:
            scales = (r ** loss.data_exponent_mean, r ** (-loss.data_exponent_std))
        except (OverflowError, ZeroDivisionError):
            scales = (math.inf, math.inf)
        for mid, prof in loss.run.items():
            step = max(max(prof.mean) * scales[0], max(prof.std) * scales[1])
            if not step <= bound:
                raise ScenarioError(f"loss.run.{mid}: one round's loss change (mean or std x data "
                                    f"ratio r = {r:.3g} to the data exponents) exceeds {bound:.3g}; "
                                    "check loss.reference_samples, data_exponent_mean/std and the "
                                    "profile values")
    for (src, dst), sw in loss.switch.items():
        if not abs(sw.mean) + sw.std <= bound:
            raise ScenarioError(f"loss.switch {src}->{dst}: mean/std exceed {bound:.3g}")


def check_ranges(scenario: Scenario) -> None:
    """Raise :class:`ScenarioError` naming the field when a round or loss step overflows.

    A scenario that passed once is not checked again (it is immutable; a
    re-plan on the same scenario skips the per-client pass).
    """
    if scenario.__dict__.get("_ranges_checked"):
        return
    _check_rounds(scenario)
    _check_loss(scenario)
    scenario.__dict__["_ranges_checked"] = True
