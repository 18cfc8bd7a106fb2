"""Per-round overhead of DepLStrategy vs Flower's FedAvg on the same job.

Same in-process grid, ClientApp, data, seed, full model and all clients every
round, both with central evaluation each round; DepLStrategy runs a given plan
of the same length (planner time is excluded: it is reported by the planner
benchmarks). Repeats alternate the two strategies and the median per-round
wall time is compared. Writes ``benchmarks/results/strategy_overhead.md``.

Usage: ``python benchmarks/strategy_overhead_bench.py [--rounds 5] [--repeats 3] [--clients 10]``
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flwr.app import ConfigRecord, MetricRecord  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.contract.plan import Plan, RoundDecision, Targets  # noqa: E402
from depl_fl.orchestration.scenario_builder import build_scenario, model_docs  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import DepLStrategy, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import make_evaluate_fn  # noqa: E402

LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")}, "switch": []}


def run_depl(cfg, n: int, rounds: int, evaluate, model: str = "full") -> tuple[float, float]:
    """DepL's seconds per round on a plan of ``model`` and its median server-side slicing and
    scattering seconds per round (the ``configure`` + ``aggregate`` steps of its round records)."""
    geo = geometry(cfg)
    models = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    clusters = list(cfg["clusters"]["classes"])
    plan = Plan("given", True, [RoundDecision(model, tuple(f"c{i}" for i in range(n)),
                                              {c: 0 for c in clusters})] * rounds)
    strategy = DepLStrategy(network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e9),
                            plan=plan, plan_fn=None,
                            scenario_fn=lambda p: build_scenario(cfg, p, models, LOSS), num_clients=n,
                            train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0})
    grid = InProcessGrid(make_client_app(cfg), n)
    t0 = time.perf_counter()
    strategy.start(grid, state_to_arrays(initial_state(geo, 0)), evaluate_fn=evaluate)
    per_round = (time.perf_counter() - t0) / rounds
    steps = [r["steps_s"].get("configure", 0.0) + r["steps_s"].get("aggregate", 0.0)
             for r in strategy.controller.records if "steps_s" in r]
    return per_round, statistics.median(steps) if steps else float("nan")


def run_fedavg(cfg, n: int, rounds: int, evaluate) -> float:
    geo = geometry(cfg)
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=n, min_train_nodes=n)
    grid = InProcessGrid(make_client_app(cfg), n)
    conf = ConfigRecord({"compression": 0.0, "local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0})
    t0 = time.perf_counter()
    strategy.start(grid, state_to_arrays(initial_state(geo, 0)), num_rounds=rounds, train_config=conf,
                   evaluate_fn=lambda r, a: evaluate(r, a, 0.0))
    return (time.perf_counter() - t0) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    cfg = compose_config([f"num_clients={args.clients}", "simulation=inprocess"])
    base_eval = make_evaluate_fn(cfg)

    def evaluate(r, a, c):
        return base_eval(r, a, c) if r > 0 else MetricRecord({"loss": 2.3, "accuracy": 0.1})

    run_fedavg(cfg, args.clients, 1, evaluate)  # warm-up (data loading, torch init)
    depl, fedavg, sliced, slicing = [], [], [], []
    for _ in range(args.repeats):
        fedavg.append(run_fedavg(cfg, args.clients, args.rounds, evaluate))
        depl.append(run_depl(cfg, args.clients, args.rounds, evaluate)[0])
        per_round, server_steps = run_depl(cfg, args.clients, args.rounds, evaluate, "p50")
        sliced.append(per_round)
        slicing.append(server_steps)
    md, mf = statistics.median(depl), statistics.median(fedavg)
    overhead = 100.0 * (md - mf) / mf
    slice_ms = 1e3 * statistics.median(slicing)
    lines = [
        "# DepLStrategy per-round overhead vs Flower FedAvg",
        "",
        f"Job: digits_cnn on digits, {args.clients} clients, full model, all clients every round, "
        f"{args.rounds} rounds x {args.repeats} repeats (alternating), in-process grid, central "
        "evaluation every round for both; planner time excluded.",
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}.",
        "",
        "| strategy | median s/round | all runs (s/round) |",
        "|---|---|---|",
        f"| FedAvg (flwr) | {mf:.4f} | {', '.join(f'{v:.4f}' for v in fedavg)} |",
        f"| DepLStrategy | {md:.4f} | {', '.join(f'{v:.4f}' for v in depl)} |",
        f"| DepLStrategy, p50 variant | {statistics.median(sliced):.4f} | "
        f"{', '.join(f'{v:.4f}' for v in sliced)} |",
        "",
        f"Overhead: {overhead:+.1f}% (target <= 5%).",
        "",
        f"With the p50 variant, the server slices the global state down to the sub-network and "
        f"scatters the clients' updates back (the round records' `configure` + `aggregate` steps): "
        f"median {slice_ms:.1f} ms per round, {100 * slice_ms / 1e3 / mf:.1f}% of FedAvg's full round "
        "(the p50 round itself is shorter: its clients train the smaller network).",
        f"Load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
        "",
        f"Command: `python benchmarks/strategy_overhead_bench.py --rounds {args.rounds} "
        f"--repeats {args.repeats} --clients {args.clients}`",
    ]
    out = ROOT / "benchmarks" / "results" / "strategy_overhead.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
