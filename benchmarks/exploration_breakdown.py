"""Where an exploration round's energy goes, and what cheaper explorations would cost per round.

Reads the ``results.json`` of DepL jobs (one or more sweep folders, each a
setting) and splits every exploration round's modelled energy by the
contract's cost model into computation per cluster and variant, transfers
and cluster activations. Beside the measured round, the modelled energy of
one round of each cheaper exploration on the same job's scenario (the
expectation over the random groups, every client equally likely in each
variant's group): every client on the smallest variant; a random half of the
clients; half the local steps; the clients of the cheapest clusters
(``profile.explore.clients=cheapest``). And the mean energy of the job's
training rounds, for scale. Reads results only.

    python benchmarks/exploration_breakdown.py LABEL=SWEEP_DIR... --out PREFIX
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sweep_io import labelled_folders
from depl_fl.contract.scenario import Scenario, scenario_from_dict
from depl_fl.contract.semantics import client_energy
from depl_fl.orchestration.exploration import cheapest_clients, cheapest_levels


def round_parts(scenario: Scenario, record: dict[str, Any]) -> dict[str, float]:
    """One exploration round's energy: ``compute <cluster> <variant>``, ``transfer``, ``activation``."""
    parts: dict[str, float] = defaultdict(float)
    levels = {str(k): int(v) for k, v in record["levels"].items()}
    active = set()
    for group in record["groups"]:
        model = scenario.model(group["model"])
        for cid in group["clients"]:
            client = scenario.client(cid)
            cluster = scenario.cluster(client.cluster)
            transfer = 2.0 * model.size_bytes * cluster.joules_per_byte
            parts[f"compute {client.cluster} {model.id}"] += client_energy(scenario, cid, model.id,
                                                                           levels[client.cluster]) - transfer
            parts["transfer"] += transfer
            active.add(client.cluster)
    parts["activation"] = float(sum(scenario.cluster(c).activation_joules for c in active))
    return dict(parts)


def expected_round(scenario: Scenario, clients: list[str], levels: dict[str, int],
                   models: list[str], share: float = 1.0, steps: float = 1.0) -> float:
    """Expected energy of an exploration round on ``clients`` (each client in a uniformly random
    variant's group, each taking part with probability ``share``, ``steps`` of its local steps)."""
    energy = 0.0
    for cid in clients:
        cluster = scenario.cluster(scenario.client(cid).cluster)
        level = levels[cluster.id]
        for m in models:
            model = scenario.model(m)
            transfer = 2.0 * model.size_bytes * cluster.joules_per_byte
            compute = client_energy(scenario, cid, m, level) - transfer
            energy += share * (steps * compute + transfer) / len(models)
    clusters = {scenario.client(c).cluster for c in clients}
    for c in clusters:  # a cluster pays its activation when at least one of its clients takes part
        members = sum(scenario.client(x).cluster == c for x in clients)
        energy += (1.0 - (1.0 - share) ** members) * scenario.cluster(c).activation_joules
    return energy


def job_row(doc: dict[str, Any]) -> dict[str, Any]:
    """The per-round figures of one job."""
    scenario = scenario_from_dict(doc["scenario"])
    explore = [r for r in doc["rounds"] if r["phase"] == "profile" and r.get("groups")]
    train = [r for r in doc["rounds"] if r["phase"] == "train"]
    parts: dict[str, float] = defaultdict(float)
    for rec in explore:
        for k, v in round_parts(scenario, rec).items():
            parts[k] += v / len(explore)
    levels = cheapest_levels(scenario)
    clients = [c.id for c in scenario.clients]
    models = [m.id for m in scenario.models]
    smallest = min(scenario.models, key=lambda m: m.flops_per_sample).id
    largest = max(scenario.models, key=lambda m: m.flops_per_sample).id
    pool = cheapest_clients(scenario, clients, levels, largest, len(models))
    return {
        "seed": doc["seed"], "rounds": len(explore), "parts": dict(parts),
        "measured": float(np.mean([r["energy_j"] for r in explore])) if explore else None,
        "all": expected_round(scenario, clients, levels, models),
        "compressed only": expected_round(scenario, clients, levels, [smallest]),
        "half the clients": expected_round(scenario, clients, levels, models, share=0.5),
        "half the local steps": expected_round(scenario, clients, levels, models, steps=0.5),
        "cheapest clusters": expected_round(scenario, pool, levels, models),
        "cheapest clusters, compressed only": expected_round(scenario, pool, levels, [smallest]),
        "pool": f"{len(pool)}/{len(clients)}",
        "training round": float(np.mean([r["energy_j"] for r in train])) if train else None,
    }


OPTIONS = ("all", "compressed only", "half the clients", "half the local steps", "cheapest clusters",
           "cheapest clusters, compressed only")


def setting_summary(label: str, folder: Path) -> dict[str, Any]:
    """Means over a setting's DepL jobs."""
    rows = [job_row(json.loads(p.read_text(encoding="utf-8"))) for p in sorted(folder.rglob("results.json"))]
    if not rows:
        raise SystemExit(f"exploration_breakdown: no results.json under {folder}")
    keys = sorted({k for r in rows for k in r["parts"]})
    training = [r["training round"] for r in rows if r["training round"] is not None]
    return {"setting": label, "jobs": len(rows), "pool": rows[0]["pool"],
            "measured": float(np.mean([r["measured"] for r in rows if r["measured"] is not None])),
            "parts": {k: float(np.mean([r["parts"].get(k, 0.0) for r in rows])) for k in keys},
            "options": {o: float(np.mean([r[o] for r in rows])) for o in OPTIONS},
            "training_round": float(np.mean(training)) if training else None}


def _share(row: dict[str, Any], key: str) -> str:
    value = row["parts"].get(key, 0.0)
    return f"{value:.2f} ({100 * value / row['measured']:.0f}%)"


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = ["# Where an exploration round's energy goes", "", f"    {command}", "",
             "Modelled joules per exploration round (the contract's cost model), means over each "
             "setting's DepL jobs. Split of the measured rounds:", ""]
    keys = sorted({k for r in rows for k in r["parts"]})
    lines += ["| setting | jobs | J per round | " + " | ".join(keys) + " |", "|---" * (3 + len(keys)) + "|"]
    for r in rows:
        cells = " | ".join(_share(r, k) for k in keys)
        lines.append(f"| {r['setting']} | {r['jobs']} | {r['measured']:.2f} | {cells} |")
    lines += ["", "Expected J per exploration round of each option on the same scenarios (random groups, "
              "every client equally likely in each variant's group), and a training round of the jobs' "
              "plans:", "",
              "| setting | " + " | ".join(OPTIONS) + " | cheapest clusters' clients | training round |",
              "|---" * (3 + len(OPTIONS)) + "|"]
    for r in rows:
        cells = " | ".join(f"{r['options'][o]:.2f}" for o in OPTIONS)
        train = "-" if r["training_round"] is None else f"{r['training_round']:.2f}"
        lines.append(f"| {r['setting']} | {cells} | {r['pool']} | {train} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", help="LABEL=FOLDER of one setting's DepL jobs")
    parser.add_argument("--out", type=Path, required=True, help="PREFIX of PREFIX.md and PREFIX.json")
    args = parser.parse_args(argv)
    pairs = labelled_folders(args.sweeps,
                             "exploration_breakdown: {item!r} is not LABEL=FOLDER of an existing folder")
    if pairs is None:
        return 2
    rows = [setting_summary(label, folder) for label, folder in pairs]
    command = "python benchmarks/exploration_breakdown.py " + " ".join(args.sweeps) + f" --out {args.out}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": command, "settings": rows}
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
