"""Measured against modelled bytes per round: only the sub-network travels.

Runs short DepL jobs (Hydra job, in-process simulation, federated exploration
then the planned rounds) on the bundled digits with the built-in CNN and with
networks a user brings (``model=custom model.factory=...``: ResNet-style with
BatchNorm and residual adds, MobileNetV2-style, a plain MLP), and compares,
round by round, the array bytes measured from the messages (``bytes_down``,
``bytes_up``) with what the cost model charges (the variant's ``size_bytes``
per planned client) and with what sending the full network would have moved.
Writes ``benchmarks/results/byom/bytes.{md,json}``.

The same comparison in a loopback deployment: ``benchmarks/byom_bytes_deploy_bench.py``.

Usage: ``python benchmarks/byom_bytes_bench.py``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom"
JOBS = [  # (label, overrides)
    ("digits_cnn (built-in)", ["model=digits_cnn_all"]),
    ("ResNet-style (BatchNorm, residual)", ["model=custom", "model.factory=tests.user_nets:resnet_tiny",
                                           "model.compressions=[0.0,0.5,0.75]"]),
    ("MobileNetV2-style (depthwise)", ["model=custom", "model.factory=tests.user_nets:mobilenet_v2_tiny",
                                      "model.compressions=[0.0,0.5,0.75]"]),
    ("MLP", ["model=custom", "model.factory=tests.user_nets:mlp", "model.compressions=[0.0,0.5,0.75]"]),
]
# without_tracking=thorough: the exploration the committed figures were measured with (every
# client; the default without tracking explores on the cheapest clusters)
COMMON = ["num_clients=4", "simulation=inprocess", "profile.explore.rounds=3", "profile.explore.max_rounds=3",
          "profile.explore.switch_rounds=[2]", "target.loss=0.35", "target.prob=0.8", "target.max_rounds=10",
          "tracking.enabled=false", "profile.explore.without_tracking=thorough", "output.plot=false"]


def run_job(overrides: list[str], work: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", *COMMON, *overrides,
                           f"hydra.run.dir={work}", f"profile.cache_dir={work / 'cache'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode not in (0, 3):
        raise SystemExit(proc.stderr[-3000:])
    return json.loads((work / "results.json").read_text())


PLAN = ("p75", "p50", "full")
RUN = {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}


def planned_rounds(overrides: list[str]) -> list[dict]:
    """Training rounds of a given plan (p75, p50, full) through DepLStrategy and the real ClientApp."""
    sys.path.insert(0, str(ROOT))
    from clients.client_app import make_client_app
    from depl_fl.contract.plan import Plan, RoundDecision, Targets
    from depl_fl.orchestration.scenario_builder import build_scenario, model_docs
    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry
    from depl_fl.task.subnets import network_layout
    from strategies.depl_strategy import DepLStrategy, state_to_arrays
    from strategies.inprocess_grid import InProcessGrid
    from strategies.server_app import make_evaluate_fn

    comps = [o for o in overrides if o.startswith("model")]
    if "model=digits_cnn_all" not in comps:
        comps = [*comps[:2], "model.compressions=[0.0,0.5,0.75]"]
    cfg = compose_config(["num_clients=4", "simulation=inprocess", *comps])
    geo = geometry(cfg)
    docs = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    ids = [d["id"] for d in docs]
    loss = {"initial": 2.3, "run": {m: dict(RUN) for m in ids},
            "switch": [{"from": a, "to": b, "mean": 0.0, "std": 0.05} for a in ids for b in ids if a != b]}
    clients = tuple(f"c{i}" for i in range(4))
    levels = {c: 0 for c in cfg["clusters"]["classes"]}
    plan = Plan("given", True, [RoundDecision(m, clients, levels) for m in PLAN])
    strategy = DepLStrategy(network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e9),
                            plan=plan, plan_fn=None, num_clients=4,
                            scenario_fn=lambda p: build_scenario(cfg, p, docs, loss),
                            train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0})
    strategy.start(InProcessGrid(make_client_app(cfg), 4), state_to_arrays(initial_state(geo, 0)),
                   evaluate_fn=make_evaluate_fn(cfg))
    return [{**r, "phase": "train (given plan)"} for r in strategy.controller.records]


def main() -> None:
    rows, worst = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, overrides) in enumerate(JOBS):
            doc = run_job(overrides, Path(tmp) / f"job{i}")
            sizes = {m["id"]: m["size_bytes"] for m in doc["scenario"]["models"]}
            # exploration (phase profile) and planned rounds of the job, then a given plan's rounds
            for rec in doc["rounds"] + planned_rounds(overrides):
                if "bytes_down" not in rec:
                    continue
                planned = rec.get("num_clients") or len(rec["clients"])
                full = sizes["full"] * planned
                dev = max(abs(rec[f"bytes_{d}"] - rec[f"modelled_bytes_{d}"]) / rec[f"modelled_bytes_{d}"]
                          for d in ("down", "up"))
                worst = max(worst, dev)
                rows.append({"network": label, "round": rec["round"], "phase": rec.get("phase", "train"),
                             "model": rec["model"], "clients": planned, "bytes_down": rec["bytes_down"],
                             "modelled_bytes_down": rec["modelled_bytes_down"], "bytes_up": rec["bytes_up"],
                             "modelled_bytes_up": rec["modelled_bytes_up"], "full_network_bytes": full,
                             "deviation": dev, "rejected": len(rec.get("rejected") or [])})
    lines = ["# Bytes on the wire per round: measured vs modelled", "",
             "Short DepL jobs (4 clients, in-process simulation, 3 exploration rounds then the plan) "
             "on the bundled digits, then three training rounds of a given plan (p75, p50, full) "
             "through DepLStrategy and the real ClientApp for the same network. Measured: the "
             "arrays of the round's train messages and replies "
             "as Flower carries them (`np.save` bytes). Modelled: the variant's `size_bytes` (the "
             "scenario's, used by the cost model) per planned client. Full: the full network per "
             "planned client (what sending the whole global model moved).", "",
             "| network | round | phase | model | clients | down measured | down modelled | up measured "
             "| up modelled | full network | deviation |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['network']} | {r['round']} | {r['phase']} | {r['model']} | {r['clients']} "
                     f"| {r['bytes_down']:,} | {r['modelled_bytes_down']:,} | {r['bytes_up']:,} "
                     f"| {r['modelled_bytes_up']:,} | {r['full_network_bytes']:,.0f} "
                     f"| {100 * r['deviation']:.2f}% |")
    lines += ["", f"Largest deviation of a round, down or up: {100 * worst:.2f}% (target <= 5%; a round "
              "with a missing reply would show it in `up`).", "",
              "Command: `python benchmarks/byom_bytes_bench.py`"]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bytes.json").write_text(json.dumps({"rounds": rows, "max_deviation": worst}, indent=1) + "\n")
    (OUT / "bytes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
