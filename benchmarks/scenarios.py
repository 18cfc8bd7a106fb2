"""Scenario generators for the planner's tests and benchmark (seeded, contract version 1).

* :func:`random_small` -- 1-3 clusters, 3-6 clients, the full model and two
  compressed ones, targets reachable by FedAvg in at most 25 rounds.
* :func:`paper_like` -- the paper's setting: AlexNet-like and MobileNet-like
  CIFAR-sized models, each full and compressed 0.5/0.75/0.9, two node classes
  (A: fast and costly, B: slow and cheap) in 3 clusters, 30 clients.
* :func:`scaled` -- many clients / models / rounds, for planner scalability.

Model figures (approximate, CIFAR-10 32x32 inputs, training = 3x forward
FLOPs): AlexNet-like ~0.3 GFLOP forward, ~2.5 M parameters (10 MB);
MobileNet-like ~0.05 GFLOP forward, ~3.2 M parameters (13 MB). A structurally
pruned model with compression ``c`` keeps a fraction ``1 - c`` of the FLOPs
and bytes. Loss profiles are plausible, not measured: compressed models are
cheaper, improve more slowly and have higher floors; a switch towards a more
compressed model costs a small loss jump, towards a less compressed one it
slightly helps. Switches exist only within an architecture family.
"""

from __future__ import annotations

import numpy as np

from depl_fl.contract.plan import Targets
from depl_fl.contract.scenario import Scenario, scenario_from_dict
from depl_fl.task.geometry import model_id

CLASS_A = [{"flops_per_s": 2.0e10, "joules_per_flop": 2.0e-10},
           {"flops_per_s": 4.0e10, "joules_per_flop": 4.5e-10}]
CLASS_B = [{"flops_per_s": 5.0e9, "joules_per_flop": 0.6e-10},
           {"flops_per_s": 1.0e10, "joules_per_flop": 1.0e-10}]


def _profile(initial: float, floor: float, speed: float, noise: float) -> dict:
    """Per-round decrease: 0 at the floor, ``speed`` at the initial loss."""
    knee = floor + 0.35 * (initial - floor)
    return {"levels": [floor, knee, initial + 0.2],
            "mean": [0.0, 0.45 * speed, speed],
            "std": [0.35 * noise, 0.7 * noise, noise]}


def _family(name: str, flops: float, size: float, compressions: list[float], initial: float,
            floor: float, speed: float, noise: float) -> tuple[list, dict, list]:
    models, run, switch = [], {}, []
    ids = []
    for c in compressions:
        mid = name if c == 0.0 else f"{name}-p{int(round(c * 100))}"
        ids.append((mid, c))
        models.append({"id": mid, "compression": c, "flops_per_sample": flops * (1.0 - c),
                       "size_bytes": size * (1.0 - c)})
        run[mid] = _profile(initial, floor + 0.5 * c * c, speed * (1.0 - 0.45 * c), noise * (1.0 + 0.3 * c))
    for a, ca in ids:
        for b, cb in ids:
            if a != b:
                up = cb > ca
                switch.append({"from": a, "to": b,
                               "mean": 0.08 * (cb - ca) if up else -0.02 * (ca - cb),
                               "std": 0.02 + 0.03 * abs(cb - ca)})
    return models, run, switch


def _cluster(cid: str, levels: list, max_clients: int, activation: float) -> dict:
    return {"id": cid, "levels": levels, "bytes_per_s": 1.25e7, "joules_per_byte": 1.0e-8,
            "activation_joules": activation, "max_clients": max_clients}


def paper_like(target_prob: float = 0.95) -> tuple[Scenario, Targets]:
    """The paper-like scenario (30 clients, 8 models, 3 clusters) and its targets."""
    rng = np.random.default_rng(2402)
    clusters = [_cluster("A1", CLASS_A, 10, 400.0), _cluster("B1", CLASS_B, 10, 150.0),
                _cluster("B2", CLASS_B, 10, 150.0)]
    sizes = rng.dirichlet(np.full(30, 4.0)) * 50000
    clients = [{"id": f"c{i:02d}", "cluster": clusters[i % 3]["id"],
                "num_samples": int(max(200, s))} for i, s in enumerate(sizes)]
    models, run, switch = [], {}, []
    for fam in (_family("alexnet", 0.9e9, 1.0e7, [0.0, 0.5, 0.75, 0.9], 2.3, 0.55, 0.16, 0.09),
                _family("mobilenet", 1.5e8, 1.3e7, [0.0, 0.5, 0.75, 0.9], 2.3, 0.45, 0.11, 0.08)):
        models += fam[0]
        run.update(fam[1])
        switch += fam[2]
    doc = {"version": 1, "local_epochs": 1, "clusters": clusters, "clients": clients,
           "models": models,
           "loss": {"initial": 2.3, "reference_samples": 50000, "data_exponent_mean": 0.5,
                    "data_exponent_std": 0.5, "run": run, "switch": switch}}
    return scenario_from_dict(doc), Targets(1.0, target_prob, 12 * 3600.0, 60)


def random_small(seed: int) -> tuple[Scenario, Targets]:
    """A random small scenario (1-3 clusters, 3-6 clients, 3 models, <= 25 rounds) and targets.

    The target loss is the predicted 0.9-quantile of plain FedAvg after a
    random number (8-16) of rounds, so FedAvg is feasible within 25 rounds in
    most cases and DepL has room to save.
    """
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.planner import predict_quantile

    rng = np.random.default_rng(seed)
    n_clusters = int(rng.integers(1, 4))
    n_clients = int(rng.integers(3, 7))
    classes = [CLASS_A if rng.random() < 0.5 else CLASS_B for _ in range(n_clusters)]
    clusters = [_cluster(f"K{i}", classes[i], int(rng.integers(2, 5)), float(rng.uniform(20, 150)))
                for i in range(n_clusters)]
    clients = [{"id": f"c{i}", "cluster": clusters[i % n_clusters]["id"],
                "num_samples": int(rng.integers(100, 700))} for i in range(n_clients)]
    compress = sorted(rng.choice([0.5, 0.75, 0.9], size=2, replace=False).tolist())
    models, run, switch = _family("full", float(rng.uniform(1e8, 8e8)), 4.0e6, [0.0] + compress,
                                  2.3, float(rng.uniform(0.2, 0.5)), float(rng.uniform(0.12, 0.3)),
                                  float(rng.uniform(0.04, 0.1)))
    if rng.random() < 0.3:  # sometimes a switch is not allowed
        switch.pop(int(rng.integers(len(switch))))
    doc = {"version": 1, "local_epochs": 1, "clusters": clusters, "clients": clients,
           "models": models,
           "loss": {"initial": 2.3, "data_exponent_mean": 0.5, "data_exponent_std": 0.5,
                    "run": run, "switch": switch}}
    scen = scenario_from_dict(doc)
    everyone = tuple(c["id"] for c in clients)
    k = int(rng.integers(8, 17))
    rounds = [RoundDecision("full", everyone, {})] * k
    target = predict_quantile(scen, rounds, 0.9)[0]
    prob = float(rng.choice([0.8, 0.9, 0.95]))
    return scen, Targets(round(target, 4), prob, 1.0e7, 25)


def scaled(n_clients: int, n_models: int, rounds: int, seed: int = 0) -> tuple[Scenario, Targets]:
    """A large synthetic scenario whose target needs about half of ``rounds`` rounds.

    ``n_clients`` clients in ``min(10, max(3, n_clients // 100))`` clusters,
    ``n_models`` models (full plus compressions 0.5, 0.75, 0.9, 0.3, 0.6),
    ``max_rounds = rounds``.
    """
    rng = np.random.default_rng(seed)
    n_clusters = min(10, max(3, n_clients // 100))
    clusters = [_cluster(f"K{i}", CLASS_A if i % 2 == 0 else CLASS_B, n_clients,
                         float(rng.uniform(100, 400))) for i in range(n_clusters)]
    clients = [{"id": f"c{i}", "cluster": f"K{i % n_clusters}",
                "num_samples": int(rng.integers(50, 500))} for i in range(n_clients)]
    comps = [0.0, 0.5, 0.75, 0.9, 0.3, 0.6][:n_models]
    speed = 3.0 / rounds
    models, run, switch = _family("full", 3e8, 4e6, comps, 2.3, 0.3, speed, 0.5 * speed)
    doc = {"version": 1, "local_epochs": 1, "clusters": clusters, "clients": clients,
           "models": models,
           "loss": {"initial": 2.3, "data_exponent_mean": 0.5, "data_exponent_std": 0.5,
                    "run": run, "switch": switch}}
    return scenario_from_dict(doc), Targets(1.2, 0.9, 1.0e9, rounds)


#: Seeds of :func:`random_hard` the planner was developed against, and the held-out ones
#: (never looked at while tuning; reported separately).
HARD_TUNING_SEEDS = tuple(range(100, 112))
HARD_HELDOUT_SEEDS = tuple(range(5000, 5012))


def _hard_run(initial: float, floor: float, speed: float, noise: float, knee: float) -> dict:
    """A profile that keeps most of its speed down to ``knee`` above the floor, then slows."""
    mid = floor + knee * (initial - floor)
    return {"levels": [floor, mid, initial + 0.2],
            "mean": [0.0, 0.8 * speed, speed],
            "std": [0.4 * noise, 0.8 * noise, noise]}


def _hard_models(rng: np.random.Generator, all_variants: bool = False,
                 flops_range: tuple[float, float] = (1e8, 8e8)) -> tuple[list, dict, list]:
    """3-4 variants: compressed ones fast early with high floors, the full one slow but low.

    Switches towards the full model are cheap in loss (so "compressed first,
    then full" pays); switches back cost a large jump (so a second switch
    rarely pays); switches between compressed variants are sometimes missing.
    ``all_variants``: always the full model and p50, p75, p90.
    """
    comps = [0.0] + sorted(rng.choice([0.5, 0.75, 0.9], size=3 if all_variants else int(rng.integers(2, 4)),
                                      replace=False).tolist())
    flops, size = float(rng.uniform(*flops_range)), float(rng.uniform(1e6, 8e6))
    floor, speed = float(rng.uniform(0.15, 0.4)), float(rng.uniform(0.12, 0.3))
    noise = float(rng.uniform(0.03, 0.09))
    models, run, ids = [], {}, []
    for c in comps:
        mid = model_id(c)
        ids.append((mid, c))
        models.append({"id": mid, "compression": c, "flops_per_sample": flops * (1.0 - c),
                       "size_bytes": size * (1.0 - c)})
        keep = float(rng.uniform(0.75, 1.0)) if c > 0 else 1.0
        run[mid] = _hard_run(2.3, floor + float(rng.uniform(0.25, 0.9)) * c, speed * keep,
                             noise * (1.0 + 0.5 * c), float(rng.uniform(0.2, 0.45)))
    up_std = float(rng.uniform(0.01, 0.06))
    back = float(rng.uniform(0.08, 0.3))
    switch = []
    for a, ca in ids:
        for b, cb in ids:
            if a == b or (ca > 0 and cb > 0 and rng.random() < 0.3):
                continue
            mean = float(rng.uniform(-0.04, 0.06)) if cb < ca else back * (cb - ca + 0.3)
            switch.append({"from": a, "to": b, "mean": mean, "std": up_std + 0.03 * abs(cb - ca)})
    return models, run, switch


def _hard_scenario(rng: np.random.Generator, clusters: list, clients: list, models: list, run: dict,
                   switch: list) -> Scenario:
    """The scenario of the hard generators' parts, its data exponents' mean and spread drawn from ``rng``."""
    return scenario_from_dict({
        "version": 1, "local_epochs": 1, "clusters": clusters, "clients": clients, "models": models,
        "loss": {"initial": 2.3, "data_exponent_mean": float(rng.uniform(0.3, 0.7)),
                 "data_exponent_std": float(rng.uniform(0.3, 0.7)), "run": run, "switch": switch}})


def random_hard(seed: int) -> tuple[Scenario, Targets]:
    """A small scenario of the shapes that are hard for a decoupled planner, and targets.

    1-3 clusters, 3-5 clients, the full model and 2-3 compressed ones (see
    :func:`_hard_models`); one client is often much cheaper than the rest
    (a slow, cheap cluster of its own, little activation energy), so that the
    optimum may train on it alone at its lowest level; the target is the
    predicted 0.9-quantile of the full model on every client after 10-18
    rounds, below the compressed models' floors in most cases, so the optimum
    often trains a compressed model first and then switches to the full one.
    """
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.planner import predict_quantile

    rng = np.random.default_rng(seed)
    n_clusters = int(rng.integers(1, 4))
    n_clients = int(rng.integers(3, 6))
    clusters = [_cluster(f"K{i}", CLASS_A if rng.random() < 0.5 else CLASS_B,
                         int(rng.integers(2, 5)), float(rng.uniform(20, 150)))
                for i in range(n_clusters)]
    clients = [{"id": f"c{i}", "cluster": clusters[i % n_clusters]["id"],
                "num_samples": int(rng.integers(150, 700))} for i in range(n_clients)]
    if rng.random() < 0.6:  # a single cheap client in a cluster of its own
        clusters.append(_cluster("cheap", CLASS_B, 1, float(rng.uniform(2, 20))))
        clients.append({"id": f"c{n_clients}", "cluster": "cheap",
                        "num_samples": int(rng.integers(300, 900))})
    models, run, switch = _hard_models(rng)
    scen = _hard_scenario(rng, clusters, clients, models, run, switch)
    everyone = tuple(c["id"] for c in clients)
    k = int(rng.integers(10, 19))
    target = predict_quantile(scen, [RoundDecision("full", everyone, {})] * k, 0.9)[0]
    prob = float(rng.choice([0.8, 0.9, 0.95]))
    return scen, Targets(round(target, 4), prob, 1.0e7, 25)


#: Seeds of :func:`random_deadline` the planner was tuned on, and the held-out ones (run once, after tuning).
DEADLINE_TUNING_SEEDS = tuple(range(200, 212))
DEADLINE_HELDOUT_SEEDS = tuple(range(7000, 7012))


def _two_levels(rng: np.random.Generator) -> list:
    """A slow level (2e10-3e11 FLOP/s, 0.6e-10 or 2e-10 J/FLOP) and one twice as fast that
    costs 1.5-5x the energy per FLOP (the price of speed varies from node class to class)."""
    speed = float(rng.uniform(2e10, 3e11))
    joules = float(rng.choice([0.6e-10, 2.0e-10]))
    return [{"flops_per_s": speed, "joules_per_flop": joules},
            {"flops_per_s": 2.0 * speed, "joules_per_flop": joules * float(rng.uniform(1.5, 5.0))}]


def random_deadline(seed: int) -> tuple[Scenario, Targets]:
    """A small scenario whose deadline binds, with activation costs on every cluster, and targets.

    Three clusters of different speeds and prices of speed (:func:`_two_levels`),
    each paying an activation energy (2-25 J, of the order of a round's
    compute), 4-5 clients spread over them (half the time one holds
    900-1400 samples, the others 150-700), the full model and p50, p75, p90
    (see :func:`_hard_models`), at most 25 rounds; the big client's cluster
    pays 3-5x the energy per FLOP for its fast level. The targets are built
    around a "compressed, then full" plan on a subset of 2-4 clients (fewer
    than all; without the big client's cluster when there is one): ``k1`` rounds (12-19)
    of a compressed variant then ``k2`` of the full model, 21-25 rounds in
    all; the target loss is that plan's predicted pi-quantile and the
    deadline (seconds to tens of seconds) 1.0-1.15x its time at the cheapest
    levels. A plan on more clients needs fewer rounds but slower ones (more
    data per cluster, more clusters): the deadline makes it buy fast, costly
    levels, so "cheapest per round at the cheapest levels" misleads.
    """
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.planner import predict_quantile
    from depl_fl.planner.resources import ClientSet, allocate_levels, round_options

    rng = np.random.default_rng(seed)
    n_clients = int(rng.integers(4, 6))
    clusters = [_cluster(f"K{i}", _two_levels(rng), int(rng.integers(2, 4)), float(rng.uniform(2, 25)))
                for i in range(3)]
    clients = [{"id": f"c{i}", "cluster": clusters[i % 3]["id"],
                "num_samples": int(rng.integers(150, 700))} for i in range(n_clients)]
    big = rng.random() < 0.5
    if big:  # one client holds much more data, on nodes whose speed is dear
        clients[0]["num_samples"] = int(rng.integers(900, 1400))
        clusters[0]["levels"][1]["joules_per_flop"] = clusters[0]["levels"][0]["joules_per_flop"] * \
            float(rng.uniform(3.0, 5.0))
    models, run, switch = _hard_models(rng, all_variants=True, flops_range=(2e8, 6e8))
    for cl in clusters:
        cl["bytes_per_s"] = 1.0e8
    scen = _hard_scenario(rng, clusters, clients, models, run, switch)
    if big:  # the plan the targets are built on leaves the big client's cluster out
        pool = [c["id"] for c in clients if c["cluster"] != "K0"]
        size = int(rng.integers(2, len(pool) + 1))
    else:
        pool = [c["id"] for c in clients]
        size = int(rng.integers(2, n_clients))
    subset = tuple(sorted(rng.choice(pool, size=size, replace=False).tolist()))
    first = str(rng.choice([m["id"] for m in models if m["id"] != "full"]))  # every -> full switch exists
    k1 = int(rng.integers(12, 20))
    k2 = int(rng.integers(max(21 - k1, 1), 26 - k1))
    seq = [first] * k1 + ["full"] * k2
    prob = float(rng.choice([0.8, 0.9, 0.95]))
    target = predict_quantile(scen, [RoundDecision(m, subset, {}) for m in seq], prob)[0]
    cset = ClientSet.from_ids(scen, subset)
    opts = {m: round_options(scen, cset, m) for m in (first, "full")}
    slow = sum(o.time for o in allocate_levels(seq, opts, 1e12))
    deadline = round(slow * float(rng.uniform(1.0, 1.15)), 2)
    return scen, Targets(round(target, 4), prob, deadline, 25)


def as_version_2(base: Scenario, seed: int, *, eval_factor: float, floor: float | None = None,
                 bounds: tuple[float, float] | None = None) -> Scenario:
    """``base`` as contract version 2 (docs/CONTRACT_V2.md), seeded.

    Every client gets a label histogram of its ``num_samples`` drawn from a
    Dirichlet(0.3) over 10 classes (generator seeded ``1000 + seed``), every
    run level ``eval_std = eval_factor * std``; ``floor`` and ``bounds``
    (``min_coverage``, ``max_uncovered``), when given, set the coverage floor
    loss and the measured coverage range.
    """
    from depl_fl.contract.scenario import scenario_to_dict

    doc = scenario_to_dict(base)
    doc["version"] = 2
    rng = np.random.default_rng(1000 + seed)
    for client in doc["clients"]:
        client["label_histogram"] = rng.multinomial(client["num_samples"], rng.dirichlet([0.3] * 10)).tolist()
    for run in doc["loss"]["run"].values():
        run["eval_std"] = [eval_factor * s for s in run["std"]]
    if floor is not None:
        doc["loss"]["coverage_floor_loss"] = floor
    if bounds is not None:
        doc["loss"]["min_coverage"], doc["loss"]["max_uncovered"] = bounds
    return scenario_from_dict(doc)
