"""A prior for the federated exploration: the profile another federation measured for the same task.

``profile.prior=PATH`` names what an earlier job of the same task (the same
network and the same dataset, another federation: other clients, other
partitions) left behind: its profile cache file (``profile-fed-*.json`` under
its ``profile.cache_dir``) or its ``results.json`` (which names that cache
file). The earlier exploration's observations (run and switch rounds of every
variant, with their sample fractions) then join this job's own in the
profile fit, so the exploration only has to calibrate them to this
federation: it runs ``profile.explore.prior_rounds`` rounds at least instead
of ``profile.explore.rounds`` and judges the value stop from its first round
(:mod:`depl_fl.orchestration.exploration_value`), though only once this job's
own trajectory has left the fresh model's plateau (the guard reads no prior:
not before round 4). The learning curve below the explored losses (the plan
regime's rate and start), the evaluation noise and the coverage range stay this
federation's own (its trajectory, its evaluations, its client sets): under the
plan regime the prior shapes only the levels above the exploration's last loss,
and the exploration's length. The profile fitted with a prior is cached under
its own key (:func:`depl_fl.orchestration.profiling.federated_key`).
With ``profile.explore.prior_regime`` (default true) the prior also hands on its
trajectories: while this job's own shows no rate yet, they stand in for the
plateau evidence and the learning curve's rate, and the value stop is judged
from round ``prior_rounds`` (:mod:`depl_fl.orchestration.prior_regime`); the
rest of this paragraph describes ``prior_regime: false``.

A prior of another task is refused with one line (exit status 2): another
network or dataset learns along another curve.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from depl_fl.errors import ScenarioError

#: The prior's observations are numbered this far below this job's rounds.
PRIOR_ROUND_OFFSET = 1_000_000


def task_of(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The task a profile belongs to: the dataset's name and the network's architecture.

    A user's own network (``model.network``, its digest, set by
    :func:`strategies.server_app.profile_config`) is part of it: such a job's
    configuration still names DepL's default architecture, which its network is not.
    """
    model = cfg.get("model") or {}
    task = {"dataset": str((cfg.get("dataset") or {}).get("name")), "arch": str(model.get("arch"))}
    if model.get("network"):
        task["network"] = str(model["network"])
    return task


def _network_text(task: Mapping[str, Any]) -> str:
    """How an error names a task's network: its architecture, or a user's network by its digest."""
    digest = task.get("network")
    return f"a user's network (digest {str(digest)[:12]})" if digest else str(task.get("arch"))


@dataclass(frozen=True)
class ProfilePrior:
    """Another federation's exploration of the same task (see module doc)."""

    #: The cache file the observations come from.
    source: Path
    #: The earlier exploration's observations, as ``LossObservation`` field dicts.
    observations: tuple[dict[str, Any], ...]
    #: Exploration rounds the earlier job ran.
    rounds: int
    #: The earlier exploration's trajectories, ``{model: (losses, ratios)}`` (fresh loss first).
    trajectories: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    #: The earlier exploration's worst-variant validation loss before it and after every round.
    trajectory: tuple[float, ...] = ()
    #: The earlier federation's clients, ``{cid: {"cluster", "num-samples", "label-histogram"}}``.
    properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """What results.json records of the prior."""
        return {"source": str(self.source), "observations": len(self.observations), "rounds": self.rounds}


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"profile.prior: {what} {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"profile.prior: {what} {path} is not readable JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ScenarioError(f"profile.prior: {what} {path} is not a JSON object")
    return doc


def _cache_of_results(path: Path, doc: Mapping[str, Any]) -> tuple[Path, dict[str, str]]:
    """The cache file a ``results.json`` names, and the task of its configuration."""
    config = doc.get("config") or {}
    cache = (doc.get("profile") or {}).get("cache_file")
    if not cache:
        raise ScenarioError(f"profile.prior: {path} names no profile cache file (a job with a federated "
                            f"exploration writes one)")
    cache_path = Path(str(cache))
    if not cache_path.is_absolute() and not cache_path.exists():
        cache_path = path.parent / cache_path
    return cache_path, task_of(config)


def load_prior(path: str | Path, cfg: Mapping[str, Any]) -> ProfilePrior:
    """The prior at ``path`` for the job ``cfg``; :class:`ScenarioError` (one line) when unusable.

    Refused: a missing or unreadable file, a file that is neither a profile
    cache file nor a results.json naming one, a profile without its task (made
    before profiles recorded it), or a profile of another network or dataset.
    """
    path = Path(str(path))
    doc = _read(path, "file")
    task = None
    if "fit_inputs" not in doc and "summary" in doc:
        path, task = _cache_of_results(path, doc)
        doc = _read(path, "the cache file")
    inputs = doc.get("fit_inputs")
    if not isinstance(inputs, Mapping) or not inputs.get("observations"):
        raise ScenarioError(f"profile.prior: {path} holds no exploration observations (not a profile "
                            f"cache file of a federated exploration)")
    task = doc.get("task") or task
    if not task:
        raise ScenarioError(f"profile.prior: {path} does not say its network and dataset; use a profile "
                            f"made by this version")
    wanted = task_of(cfg)
    if dict(task) != wanted:
        raise ScenarioError(f"profile.prior: {path} is a profile of another task (dataset "
                            f"{task.get('dataset')}, network {_network_text(task)}; this job: dataset "
                            f"{wanted['dataset']}, network {_network_text(wanted)})")
    records = list(inputs.get("records") or ())
    trajectories = {str(m): (tuple(float(v) for v in t[0]), tuple(float(v) for v in t[1]))
                    for m, t in (inputs.get("trajectories") or {}).items()}
    worst = ([float(records[0]["loss_before"])] + [float(r["loss"]) for r in records]
             if records and records[0].get("loss_before") is not None else [])
    properties = {str(c[0]): {"cluster": c[1], "num-samples": int(c[2]), "label-histogram": list(c[3])}
                  for c in (doc.get("profile") or {}).get("data") or ()}
    return ProfilePrior(path, tuple(dict(o) for o in inputs["observations"]), len(records),
                        trajectories, tuple(worst), properties)


def prior_observations(prior: ProfilePrior | None, models: Any) -> list[Any]:
    """The prior's observations of the job's variants, as ``LossObservation`` (none without a prior).

    Their round numbers move down by :data:`PRIOR_ROUND_OFFSET` (consecutive rounds stay
    consecutive), so they never pass for this job's rounds.
    """
    from depl_fl.tracking.estimation import LossObservation

    if prior is None:
        return []
    wanted = set(models)
    out = []
    for o in prior.observations:
        previous = o.get("previous_model")
        if o.get("model") in wanted and (previous is None or previous in wanted):
            out.append(LossObservation(**{**o, "round": int(o["round"]) - PRIOR_ROUND_OFFSET}))
    return out
