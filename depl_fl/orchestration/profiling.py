"""Loss profile (l_run, l_sw) from short pilot federations, cached per configuration.

``depl-fl profile [--out SCENARIO.json] [--force] [HYDRA_OVERRIDES...]`` and
the first step of a run (:func:`ensure_profile`) measure how the global loss
evolves under every model variant and across switches, fit the contract's
``loss.run`` / ``loss.switch`` tables with
:func:`depl_fl.tracking.estimation.fit_loss_profile`, and write a complete scenario file.

Why in-process pilots: the pilots must be cheap (the whole default job,
profiling included, fits in a few minutes on 2 cores), so they run as plain
FedAvg rounds in this process, without Ray or Flower messaging, but with exactly
the client code of the ClientApp (:func:`depl_fl.task.local_update.local_update`:
prune from the global weights, ``train_local``), the server's scatter-back
aggregation (:func:`depl_fl.task.pruning.aggregate_pruned`, weighted by samples) and
the server's evaluation of the trained variant on the validation split (the
pilot seed's half of the held-out data, or ``dataset.val_dir``; never a test split).
``reference_samples`` is the total number of training samples (``r = 1`` when
every client takes part).

Pilots (``profile`` config): for every variant, ``seeds`` federations of
``rounds`` rounds from a seeded random initialisation (partitioned with the
pilot's seed); for every ordered pair of variants, from the snapshot of the
source variant's pilot after each round in ``switch_at`` (clamped to
``rounds``), ``switch_rounds`` rounds of the target variant; for every fraction
in ``subset_fractions`` and every variant, a pilot of ``rounds`` rounds over a
seeded random subset of that fraction of the clients (the same subset in every
round, like a plan). The subset pilots make the data exponents ``a``/``b``
(how the per-round decrease and its spread scale with the samples used)
identifiable: they are estimated by profile likelihood
(:func:`depl_fl.tracking.estimation.fit_data_exponents`). Without subset pilots
(``subset_fractions: []``) they are taken from ``profile.data_exponent_mean/std``.

The cache key is a hash of what determines the loss evolution: dataset, model,
num_clients, partition, train settings and the profile settings (not the run
seed, the clusters or the targets). Files: ``<cache_dir>/profile-<key>.json``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from depl_fl.console import OneLineParser, log_to, parse_or_status
from depl_fl.errors import DeplError, ScenarioError
from depl_fl.runs.device_choice import resolve_job_devices
from depl_fl.runs.runconfig import (
    client_seed,
    cluster_assignment,
    compose_config,
    job_network,
    stable_hash,
    variant_list,
)

LOG = logging.getLogger("depl_fl.profiling")
PROFILE_VERSION = 9
#: Plan-regime keys whose value before the key existed hashes like a section without the key (caches
#: stay valid; ``rate_at_full: always``, the default, keys anew: it reads a capped exploration's rate
#: at ``r = 1``).
REGIME_DEFAULTS: dict[str, Any] = {"explored_oscillation": None, "anchor": "last", "rate_at_full": "cheapest",
                                   "switch_cycles": "measured"}


def profile_key(cfg: Mapping[str, Any]) -> str:
    """Cache key: hash of the configuration parts that determine the loss evolution."""
    prof = cfg["profile"]
    # model.loss null (cross-entropy) hashes like a model section without the key; model.regime is hashed
    # through the profile.plan_regime values it gives.
    model = {k: v for k, v in cfg["model"].items() if not (k == "loss" and v is None) and k != "regime"}
    # plan_regime.explored_oscillation null (the constant oscillation), anchor last (the last measured
    # loss), rate_at_full cheapest (the rate as before the option) and switch_cycles measured (the jumps
    # as measured) hash like a section without them.
    # train.device cpu (the default) hashes like a train section without the key: a profile measured
    # before the option was measured on the CPU.
    train = {k: v for k, v in cfg["train"].items() if not (k == "device" and v == "cpu")}
    regime = prof.get("plan_regime")
    if isinstance(regime, Mapping):
        regime = {k: v for k, v in regime.items() if not (k in REGIME_DEFAULTS and REGIME_DEFAULTS[k] == v)}
    relevant = {
        "version": PROFILE_VERSION,
        "dataset": cfg["dataset"], "model": model, "num_clients": cfg["num_clients"],
        "partition": cfg["partition"], "train": train,
        "profile": {**{k: prof.get(k) for k in ("seeds", "rounds", "switch_rounds", "switch_at",
                                                "subset_fractions", "data_exponent_mean",
                                                "data_exponent_std", "spread_horizon")},
                    "plan_regime": regime},
    }
    return stable_hash(relevant)


def cache_path(cfg: Mapping[str, Any]) -> Path:
    """Where the profile of ``cfg`` is cached."""
    return Path(str(cfg["profile"]["cache_dir"])) / f"profile-{profile_key(cfg)}.json"


def data_fingerprint(properties: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    """What the nodes report about their data: ``[client, cluster, num-samples, label histogram]``."""
    return [[cid, str(p.get("cluster")), int(p["num-samples"]),
             [int(v) for v in p.get("label-histogram") or []]] for cid, p in sorted(properties.items())]


def federated_key(cfg: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]],
                  prior_observations: Sequence[Mapping[str, Any]] | None = None) -> str:
    """Cache key of a federated profile: configuration plus the nodes' data reports.

    ``explore.max_clients: null``, ``explore.clients: all`` (every client explores),
    ``explore.group_sizes: random``, ``explore.plateau_rounds: 3`` and
    ``explore.value_floor: false`` key as before the options existed; ``explore.without_tracking``
    is no part of the key (it only picks the resolved values, which are). With ``profile.prior`` the
    prior's observations (``prior_observations``, as
    :class:`~depl_fl.orchestration.profile_prior.ProfilePrior` holds them) are part of the key: the
    profile fitted with them is another profile than the one fitted without (or with another prior),
    and a job never reuses one for the other, nor one fitted with ``explore.prior_regime`` for one
    fitted without; a job without a prior keys as before (``prior_regime`` is no part of its key).
    """
    explore = raw = cfg["profile"].get("explore")
    if isinstance(explore, Mapping):
        defaults = {"max_clients": None, "clients": "all", "group_sizes": "random", "plateau_rounds": 3,
                    "value_floor": False}
        unkeyed = ("prior_regime", "without_tracking")
        explore = {k: v for k, v in explore.items()
                   if k not in unkeyed and (k not in defaults or v != defaults[k])}
    relevant: dict[str, Any] = {"config": profile_key(cfg), "explore": explore,
                                "data": data_fingerprint(properties)}
    if prior_observations is not None:
        relevant["prior"] = [dict(o) for o in prior_observations]
        relevant["prior_regime"] = bool((raw if isinstance(raw, Mapping) else {}).get("prior_regime", True))
    return stable_hash(relevant)



class _Pilot:
    """In-process FedAvg rounds with pruned variants (the ClientApp's code, no messaging), on train.device."""

    def __init__(self, cfg: Mapping[str, Any], seed: int) -> None:
        import numpy as np
        import torch

        from depl_fl.orchestration.label_coverage import LabelCoverage
        from depl_fl.task.devices import resolve_device
        from depl_fl.task.losses import check_loss, loss_spec
        from depl_fl.task.partitions import client_partition, geometry, validation_split

        torch.set_num_threads(1)
        self.cfg = cfg
        self.seed = seed
        self.device = resolve_device(cfg["train"].get("device", "cpu"))
        self.geometry = job_network(cfg, geometry(cfg))
        check_loss(loss_spec(cfg), self.geometry.num_classes, self.geometry)
        n = int(cfg["num_clients"])
        self.parts = [client_partition(cfg, pid, n, seed=seed) for pid in range(n)]
        self.test = validation_split(cfg, seed=seed)
        self.comp = dict(variant_list(cfg))
        #: ``(model, client partition ids)`` of every pilot round run, for the cost accounting.
        self.log: list[tuple[str, list[int]]] = []
        self.coverage = LabelCoverage.of_config(cfg, {
            str(pid): {"num-samples": len(y),
                       "label-histogram": np.bincount(np.asarray(y, dtype=int),
                                                      minlength=self.geometry.num_classes).tolist()}
            for pid, (_, y) in enumerate(self.parts)})

    def initial(self) -> dict[str, Any]:
        from depl_fl.task.local_update import initial_state

        return initial_state(self.geometry, self.seed)

    def loss(self, state: Mapping[str, Any], model: str) -> float:
        from depl_fl.task.local_update import evaluate_variant
        from depl_fl.task.losses import loss_spec

        return float(evaluate_variant(state, self.geometry, self.comp[model], *self.test,
                                      loss=loss_spec(self.cfg), device=self.device)[0])

    def subset(self, fraction: float) -> list[int]:
        """A seeded random subset of ``round(fraction * n)`` clients (at least one)."""
        import numpy as np

        n = len(self.parts)
        size = min(max(int(round(fraction * n)), 1), n - 1)  # a proper subset (n >= 2)
        rng = np.random.default_rng([self.seed, int(round(fraction * 1_000_000))])
        return sorted(int(i) for i in rng.choice(n, size=size, replace=False))

    def sample_fraction(self, clients: Sequence[int]) -> float:
        """``r_eff = c_S * r`` of a round over ``clients`` (coverage of this pilot's partition)."""
        return self.coverage.effective_ratio([str(i) for i in clients])

    def bounds(self, sets: Sequence[Sequence[int]]) -> dict[str, float]:
        """``min_coverage`` / ``max_uncovered`` of the client sets this pilot trained."""
        return self.coverage.bounds([[str(i) for i in s] for s in sets])

    def run(self, state: Mapping[str, Any], start_loss: float, model: str, first_round: int,
            count: int, clients: Sequence[int] | None = None,
            keep: Sequence[int] = ()) -> tuple[list[float], dict[int, tuple[Any, float]]]:
        """``count`` rounds of ``model`` from ``state``.

        Returns the losses (``start_loss`` first, then one per round) and the
        ``(state, loss)`` after each round number in ``keep``.
        """
        losses, kept = [start_loss], {}
        for k in range(first_round, first_round + count):
            state = self.round(state, model, k, clients)
            losses.append(self.loss(state, model))
            if k in keep:
                kept[k] = (state, losses[-1])
        return losses, kept

    def round(self, state: Mapping[str, Any], model: str, server_round: int,
              clients: Sequence[int] | None = None) -> dict[str, Any]:
        from depl_fl.task.local_update import local_update
        from depl_fl.task.losses import loss_spec
        from depl_fl.task.pruning import aggregate_pruned, compute_structure, extract, silence_to_variant
        from depl_fl.task.subnets import network_layout

        train = self.cfg["train"]
        compression = self.comp[model]
        layout = network_layout(self.geometry)
        if compression > 0:  # as the strategy's rounds: the global model becomes the variant
            state = silence_to_variant(layout, state, compression)
        structure = compute_structure(layout, state, compression)
        sub_state = extract(state, structure)
        replies = []
        members = list(range(len(self.parts)) if clients is None else clients)
        self.log.append((model, members))
        for pid in members:
            x, y = self.parts[pid]
            res = local_update(sub_state, self.geometry, compression, x, y,
                               epochs=int(train["local_epochs"]), lr=float(train["lr"]),
                               batch_size=int(train["batch_size"]),
                               seed=client_seed(self.seed, server_round, pid), loss=loss_spec(self.cfg),
                               device=self.device)
            replies.append((res.kept_state, res.num_examples))
        return aggregate_pruned(state, replies, structure)


def run_pilots(cfg: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Run all pilot federations; returns (observations, stats)."""
    from depl_fl.tracking.estimation import observations_from_trajectory

    prof = cfg["profile"]
    models = [m for m, _ in variant_list(cfg)]
    rounds = int(prof["rounds"])
    switch_at = sorted({min(max(int(k), 1), rounds) for k in (prof.get("switch_at") or [])})
    switch_rounds = int(prof.get("switch_rounds") or 0)
    subset_fractions = [float(f) for f in (prof.get("subset_fractions") or [])]
    if subset_fractions and int(cfg["num_clients"]) < 2:
        LOG.warning("profile.subset_fractions ignored: a client subset needs num_clients >= 2")
        subset_fractions = []
    observations: list[Any] = []
    pilot_rounds = 0
    round_log: list[tuple[str, list[int]]] = []
    trajectories: list[tuple[str, list[float], list[float]]] = []
    bounds: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for s in range(int(prof["seeds"])):
        seed = 1_000 + s  # pilot seeds, disjoint from run seeds by convention
        pilot = _Pilot(cfg, seed)
        pilot.log = round_log
        for model in models:
            state = pilot.initial()
            losses, snapshots = pilot.run(state, pilot.loss(state, model), model, 1, rounds,
                                          keep=switch_at)
            pilot_rounds += rounds
            observations += observations_from_trajectory(losses, [model] * rounds)
            trajectories.append((model, losses, [1.0] * rounds))
            LOG.info("pilot seed %d %s: loss %.3f -> %.3f in %d rounds", s, model, losses[0],
                     losses[-1], rounds)
            if switch_rounds < 1:
                continue
            for k, (snap, snap_loss) in snapshots.items():
                for target in models:
                    if target == model:
                        continue
                    sw_losses, _ = pilot.run(snap, snap_loss, target, k + 1, switch_rounds)
                    pilot_rounds += switch_rounds
                    observations += observations_from_trajectory(
                        sw_losses, [target] * switch_rounds, previous_model=model, first_round=k + 1)
        subsets = [pilot.subset(fraction) for fraction in subset_fractions]
        bounds.append(pilot.bounds([list(range(len(pilot.parts))), *subsets]))
        for clients in subsets:
            r = pilot.sample_fraction(clients)
            for model in models:
                state = pilot.initial()
                losses, _ = pilot.run(state, pilot.loss(state, model), model, 1, rounds, clients)
                pilot_rounds += rounds
                observations += observations_from_trajectory(losses, [model] * rounds,
                                                             sample_fractions=r)
                trajectories.append((model, losses, [r] * rounds))
                LOG.info("pilot seed %d %s over %d clients (r=%.2f): loss %.3f -> %.3f", s, model,
                         len(clients), r, losses[0], losses[-1])
    stats = {"pilot_rounds": pilot_rounds, "seconds": time.perf_counter() - t0, "round_log": round_log,
             "trajectories": trajectories, "coverage": _combined_bounds(bounds)}
    return observations, stats


def _combined_bounds(bounds: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The least ``min_coverage`` and the largest ``max_uncovered`` over the pilots."""
    known = [b for b in bounds if b]
    if not known:
        return {}
    return {"min_coverage": min(b["min_coverage"] for b in known),
            "max_uncovered": max(b["max_uncovered"] for b in known)}


def build_profile(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Run the pilots and return a complete scenario document for ``cfg``."""
    from depl_fl.orchestration.profile_fit import with_eval_std
    from depl_fl.orchestration.scenario_builder import model_docs, scenario_doc
    from depl_fl.task.partitions import client_partition, geometry
    from depl_fl.tracking.estimation import fit_data_exponents, fit_loss_profile

    observations, stats = run_pilots(cfg)
    geo = geometry(cfg)
    n = int(cfg["num_clients"])
    sizes = [len(client_partition(cfg, pid, n)[1]) for pid in range(n)]
    prof = cfg["profile"]
    models = [m for m, _ in variant_list(cfg)]
    if len({round(o.sample_fraction, 9) for o in observations}) >= 2:
        a, b = fit_data_exponents(observations, models)
        LOG.info("data exponents from the subset pilots: a=%.2f, b=%.2f", a, b)
    else:
        a = float(prof.get("data_exponent_mean", 0.5))
        b = float(prof.get("data_exponent_std", 0.5))
    horizon = prof.get("spread_horizon")
    loss = fit_loss_profile(observations, models, reference_samples=float(sum(sizes)),
                            data_exponent_mean=a, data_exponent_std=b,
                            spread_horizon=int(horizon) if horizon is not None else None)
    # Label coverage of the pilots' sets and their evaluation noise (docs/CONTRACT_V2.md).
    loss = {**with_eval_std(loss, stats.pop("trajectories"), a, b), **stats.pop("coverage")}
    for model, run in loss["run"].items():
        if run.get("spread_factor"):
            LOG.info("%s: spread over %d rounds / per-round random walk = %s at loss levels %s", model,
                     int(horizon), _fmt(run["spread_factor"]), _fmt(run["levels"]))
        lowest = min(o.loss_after for o in observations if o.model == model)
        if lowest > float(cfg["target"]["loss"]):
            LOG.warning("profile: the pilots of %s never got below %.3f, above target.loss %.3f; the "
                        "profile extrapolates there (more profile.rounds would measure it)",
                        model, lowest, float(cfg["target"]["loss"]))
    clusters = cluster_assignment(n, cfg["clusters"]["classes"])
    clients = [{"id": f"c{pid}", "cluster": clusters[pid], "num_samples": sizes[pid]} for pid in range(n)]
    doc = scenario_doc(cfg, clients, model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size),
                       loss)
    round_log = stats.pop("round_log")
    doc["profile"] = {"key": profile_key(cfg), "observations": len(observations), **stats,
                      "method": "in-process pilot federations (see depl_fl/orchestration/profiling.py)"}
    doc["profile"]["cost"] = pilot_cost(doc, round_log, stats["seconds"])
    return doc


def pilot_cost(doc: Mapping[str, Any], round_log: Sequence[tuple[str, Sequence[int]]],
               seconds: float) -> dict[str, Any]:
    """Modelled cost of the in-process pilots as if run on the clients at their cheapest levels."""
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.contract.semantics import round_energy, round_time
    from depl_fl.orchestration.exploration import cheapest_levels

    scenario = scenario_from_dict(doc)
    levels = cheapest_levels(scenario)
    energy = time_s = 0.0
    for model, members in round_log:
        decision = RoundDecision(model, tuple(f"c{pid}" for pid in members), levels)
        energy += round_energy(scenario, decision)
        time_s += round_time(scenario, decision)
    return {"rounds": len(round_log), "energy_j": float(energy), "time_s": float(time_s),
            "wall_s": float(seconds)}


#: Profile files built by this process (a job that built its profile paid for it).
_BUILT_HERE: set[str] = set()


class InProcessProfile:
    """``profile.source=inprocess``: the in-process pilots of :func:`ensure_profile` (simulation research).

    The pilots run on the server's copy of every partition, not on the clients;
    their cost is modelled at the clients' cheapest levels and charged to the
    job that built the profile (a job reusing the cached file records the reuse
    and what it cost when made). They do not train the job's model, so they
    do not count against its deadline.
    """

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.loss_doc: dict[str, Any] | None = None
        self.records: list[dict[str, Any]] = []
        self.reused = False
        self.cost_when_made: dict[str, Any] | None = None
        self.path: Path | None = None

    def run(self, strategy: Any, grid: Any, arrays: Any, evaluate_fn: Any, timeout: float,
            train_config: Any) -> Any:
        """Load or build the profile; the job's model is unchanged."""
        doc, self.path = ensure_profile(self.cfg)
        self.loss_doc = doc["loss"]
        self.cost_when_made = (doc.get("profile") or {}).get("cost")
        # Only the one job that built the file paid for it (a multirun shares this process).
        self.reused = str(self.path) not in _BUILT_HERE
        _BUILT_HERE.discard(str(self.path))
        return arrays

    @property
    def energy_j(self) -> float:
        """Energy charged to this job: the pilots' cost if this job built the profile, else 0."""
        return 0.0 if self.reused else float((self.cost_when_made or {}).get("energy_j", 0.0))

    @property
    def time_s(self) -> float:
        """Modelled pilot time charged to this job (like :attr:`energy_j`)."""
        return 0.0 if self.reused else float((self.cost_when_made or {}).get("time_s", 0.0))

    def summary(self) -> dict[str, Any]:
        """The ``profile`` block of results.json."""
        rounds = 0 if self.reused else int((self.cost_when_made or {}).get("rounds", 0))
        return {"source": "inprocess", "reused": self.reused, "rounds": rounds, "energy_j": self.energy_j,
                "time_s": self.time_s, "cache_file": str(self.path) if self.path else None,
                "cost_when_made": self.cost_when_made}


def _fmt(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def load_profile_file(path: str | Path) -> dict[str, Any]:
    """A scenario/profile file's document (its ``loss`` section is what runs use)."""
    from depl_fl.contract.scenario import read_json, scenario_from_dict

    doc = read_json(path, "profile")
    scenario_from_dict(doc)  # validate
    return doc


def ensure_profile(cfg: Mapping[str, Any], force: bool = False) -> tuple[dict[str, Any], Path]:
    """The scenario document with the fitted loss profile of ``cfg``: cached, or built now.

    Returns
    -------
    (dict, Path)
        The document and the file it was read from / written to.
    """
    if cfg["profile"].get("file"):
        path = Path(str(cfg["profile"]["file"]))
        return load_profile_file(path), path
    path = cache_path(cfg)
    if path.exists() and not force:
        try:
            return load_profile_file(path), path
        except DeplError:
            LOG.warning("cached profile %s is unreadable; rebuilding it", path)
    LOG.info("no cached loss profile for this configuration: running pilot federations "
             "(%s seeds x %s rounds per variant + switch pilots)", cfg["profile"]["seeds"],
             cfg["profile"]["rounds"])
    from depl_fl.orchestration.exploration import write_json_atomic

    doc = build_profile(cfg)
    write_json_atomic(path, doc)
    _BUILT_HERE.add(str(path))
    LOG.info("loss profile: %d pilot rounds in %.1f s, cached at %s", doc["profile"]["pilot_rounds"],
             doc["profile"]["seconds"], path)
    return doc, path


def main(argv: Sequence[str] | None = None) -> int:
    """``depl-fl profile [--out SCENARIO.json] [--force] [HYDRA_OVERRIDES...]``."""
    parser = OneLineParser(
        prog="depl-fl profile",
        description="Fit the loss profile (l_run, l_sw) of a configuration from in-process pilot "
                    "federations and write it as a scenario file (cached in profile.cache_dir).")
    parser.add_argument("--out", default=None, help="write the scenario file here too")
    parser.add_argument("--force", action="store_true",
                        help="re-run the pilots even if cached (as the override profile.force=true)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. num_clients=20 model=digits_cnn")
    args = parse_or_status(parser, argv)
    if isinstance(args, int):
        return args
    log_to(sys.stderr, prefix="")
    # This command is the in-process pilots: the keys only federated profiling reads are refused.
    cfg = compose_config([*args.overrides, "profile.source=inprocess"])
    # The pilots train on train.device: resolved here (auto keys the cache as what it became).
    cfg = resolve_job_devices(cfg, simulation=False)
    # --force and profile.force=true say the same (a job reads the key).
    doc, path = ensure_profile(cfg, force=args.force or bool(cfg["profile"].get("force")))
    if args.out:
        out = Path(args.out)
        try:
            out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
        path = out
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
