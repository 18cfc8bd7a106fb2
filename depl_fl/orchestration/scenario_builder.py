"""Assemble a contract scenario document from the run config, the clients and a loss profile.

Clusters come from ``cfg.clusters.classes`` (units of docs/FORMATS.md),
models from the configured variants with FLOPs and bytes measured on the real
(pruned) networks (:func:`depl_fl.task.variants.measure_variant`), clients from the
queried node properties (or the partition sizes, for ``depl-fl profile``) and
the ``loss`` section from the fitted profile.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from depl_fl.contract.coverage import (
    DEFAULT_COVERAGE_THRESHOLD,
    as_histogram,
    pooled_histogram,
    shares,
)
from depl_fl.contract.scenario import LOSS_LIMIT, Scenario, scenario_from_dict
from depl_fl.errors import ScenarioError
from depl_fl.runs.runconfig import variant_list

_CLUSTER_KEYS = ("levels", "bytes_per_s", "joules_per_byte", "activation_joules", "max_clients")


def cluster_docs(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The configured clusters as scenario entries (``fraction`` is config-only)."""
    out = []
    for cid, raw in cfg["clusters"]["classes"].items():
        doc: dict[str, Any] = {"id": str(cid)}
        for key in _CLUSTER_KEYS:
            if key in raw and raw[key] is not None:
                doc[key] = raw[key]
        out.append(doc)
    return out


def model_docs(cfg: Mapping[str, Any], num_classes: int, in_channels: int,
               image_size: int) -> list[dict[str, Any]]:
    """The configured variants with FLOPs/sample and bytes measured on the sub-networks.

    A network that cannot be sliced into its variants is refused here, before
    any round (one-line ScenarioError, exit status 2).
    """
    from depl_fl.task.geometry import TaskGeometry

    geo = TaskGeometry(str(cfg["model"]["arch"]), int(num_classes), int(in_channels), int(image_size))
    return model_docs_for(cfg, geo)


def model_docs_for(cfg: Mapping[str, Any], network: Any) -> list[dict[str, Any]]:
    """:func:`model_docs` for a task geometry or a :class:`depl_fl.task.subnets.UserNetwork`."""
    from depl_fl.task.variants import checked_variant_costs

    variants = variant_list(cfg)
    costs = checked_variant_costs(network, tuple(c for _, c in variants))
    out = []
    for model_id, compression in variants:
        cost = costs[float(compression)]
        out.append({"id": model_id, "compression": compression,
                    "flops_per_sample": cost.train_flops_per_sample, "size_bytes": cost.size_bytes})
    return out


def fill_clusters(cfg: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]]
                  ) -> dict[str, dict[str, Any]]:
    """Properties with an empty ``cluster`` given one by the configured split of partition ids.

    A node of a user's own Flower app whose SuperNode (or simulated node) sets
    no node config ``cluster=`` reports an empty cluster
    (:class:`clients.user_app.DepLClient`). The default is the rule DepL's own
    simulation uses: the clients are split into consecutive blocks of
    ``clusters.classes`` in the order the classes are listed, block sizes by
    their ``fraction`` (:func:`depl_fl.runs.runconfig.cluster_assignment`),
    over the queried clients in partition-id order. The classes are the
    configured ones, so every client gets a class with resource levels the
    planner can cost (``clusters=homogeneous``: one class for all). A client
    given its cluster this way is marked ``"cluster-source": "assigned"``;
    a cluster a node set is kept as it is.
    """
    from depl_fl.runs.runconfig import cluster_assignment

    out = {cid: dict(p) for cid, p in properties.items()}
    blank = sorted((cid for cid, p in out.items() if not str(p.get("cluster") or "")),
                   key=lambda cid: int(out[cid].get("partition-id", 0)))
    if blank:
        names = cluster_assignment(len(out), cfg["clusters"]["classes"])
        order = sorted(out, key=lambda cid: int(out[cid].get("partition-id", 0)))
        for cid in blank:
            out[cid]["cluster"] = names[order.index(cid)]
            out[cid]["cluster-source"] = "assigned"
    return out


def assigned_clusters_note(properties: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One log line naming the clients :func:`fill_clusters` assigned a cluster, by cluster; None if none."""
    by_cluster: dict[str, list[str]] = {}
    for cid, props in sorted(properties.items(), key=lambda kv: int(kv[1].get("partition-id", 0))):
        if props.get("cluster-source") == "assigned":
            by_cluster.setdefault(str(props["cluster"]), []).append(cid)
    if not by_cluster:
        return None
    groups = "; ".join(f"{name}: {', '.join(cids)}" for name, cids in sorted(by_cluster.items()))
    return (f"clusters: {sum(map(len, by_cluster.values()))} client(s) set no node config cluster=, "
            f"assigned by clusters.classes' fractions in partition-id order ({groups})")


def scenario_doc(cfg: Mapping[str, Any], clients: Sequence[Mapping[str, Any]],
                 models: Sequence[Mapping[str, Any]], loss: Mapping[str, Any],
                 version: int = 1) -> dict[str, Any]:
    """A contract scenario document (version 1 unless told; version 2 reads the coverage fields)."""
    known = {c["id"] for c in cluster_docs(cfg)}
    for client in clients:
        if client["cluster"] not in known:
            raise ScenarioError(f"client {client['id']} reports cluster {client['cluster']!r}, "
                                f"which is not configured (clusters: {', '.join(sorted(known))})")
    loss = dict(loss)
    # The profile's reference is the pilots' total samples; re-anchor on this run's clients
    # only when the profile did not say (the contract's default).
    return {"version": version, "local_epochs": int(cfg["train"]["local_epochs"]),
            "clusters": cluster_docs(cfg), "clients": [dict(c) for c in clients],
            "models": [dict(m) for m in models], "loss": loss}


def build_scenario(cfg: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]],
                   models: Sequence[Mapping[str, Any]], loss: Mapping[str, Any]) -> Scenario:
    """Validated scenario of a run from the queried node properties (client id -> properties)."""
    problem = diverged_profile(loss)
    if problem is not None:
        raise ScenarioError(problem)
    clients = [client_doc(cid, p) for cid, p in sorted(properties.items(), key=lambda kv: kv[0])]
    coverage = coverage_fields(cfg, clients, loss)
    return scenario_from_dict(scenario_doc(cfg, clients, models, {**loss, **coverage},
                                           version=contract_version(coverage, loss)))


def diverged_profile(loss: Mapping[str, Any]) -> str | None:
    """Why a profile's losses cannot be planned on (``None``: they can): they exceed the contract's bound.

    An exploration whose training diverges, or whose model evaluates with
    BatchNorm statistics that never caught up with its activations (torchvision's
    MNASNet: momentum 0.0003), measures losses of millions; the contract would
    refuse them field by field, naming a field but not the cause.
    """
    values = [float(v) for run in (loss.get("run") or {}).values() for key in ("levels", "mean", "std")
              for v in run.get(key) or ()]
    largest = max((abs(v) for v in values), default=0.0)
    if largest <= LOSS_LIMIT and all(math.isfinite(v) for v in values):
        return None
    start = loss.get("initial")
    began = f" (the start model's {float(start):.3g})" if isinstance(start, (int, float)) else ""
    return (f"profile: the exploration's losses reach {largest:.3g}{began}, too large to plan on: the "
            "training diverges, or the model evaluates with BatchNorm statistics far from its "
            "activations (a BatchNorm momentum too small for a few local epochs, an initialisation "
            "that scales activations up); lower the learning rate (train.lr, or your own train "
            "function's) or change the network's BatchNorm momentum or initialisation")


def contract_version(coverage: Mapping[str, Any], loss: Mapping[str, Any]) -> int:
    """2 when the scenario has something of version 2 to say, else 1 (docs/CONTRACT_V2.md).

    Version 2 when every node reported a label histogram (``coverage`` is
    not empty) or the profile gives a run profile an ``eval_std``; the fields
    of a profile that measured neither (an older cache) keep the version-1 meaning.
    """
    has_eval = any(isinstance(run, Mapping) and run.get("eval_std") is not None
                   for run in (loss.get("run") or {}).values())
    return 2 if coverage or has_eval else 1


def client_doc(cid: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """One scenario client from its queried properties.

    A reported ``label-histogram`` becomes the client's ``label_histogram``
    (contract version 2, docs/CONTRACT_V2.md), validated here.
    """
    doc: dict[str, Any] = {"id": cid, "cluster": str(props["cluster"]),
                           "num_samples": int(props["num-samples"])}
    if props.get("label-histogram") is not None:
        hist = as_histogram(props["label-histogram"], f"client {cid}: label-histogram")
        doc["label_histogram"] = [int(v) for v in hist]
    return doc


def coverage_fields(cfg: Mapping[str, Any], clients: Sequence[Mapping[str, Any]],
                    loss: Mapping[str, Any]) -> dict[str, Any]:
    """The version-2 ``loss`` fields of label coverage (empty unless every client has a histogram).

    ``label_shares``: the reference shares, the pooled histogram of the
    clients (the whole training data, as the profile's pilots partition it);
    ``coverage_threshold`` from ``profile.coverage_threshold`` (default 0.1);
    ``min_coverage`` / ``max_uncovered`` copied from the profile's ``loss``
    when its pilots measured them (see :func:`depl_fl.contract.coverage.measured_bounds`).
    """
    hists = [c.get("label_histogram") for c in clients]
    if not hists or any(h is None for h in hists):
        return {}
    threshold = (cfg.get("profile") or {}).get("coverage_threshold")
    fields: dict[str, Any] = {
        "label_shares": [float(v) for v in shares(pooled_histogram(hists))],
        "coverage_threshold": float(DEFAULT_COVERAGE_THRESHOLD if threshold is None else threshold)}
    for key in ("min_coverage", "max_uncovered", "coverage_floor_loss"):
        if loss.get(key) is not None:
            fields[key] = float(loss[key])
    return fields
