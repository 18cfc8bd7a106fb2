"""Robustness benchmark: faulty clients of every kind against FedAvg and DepL with each aggregation.

10 clients (digits, in-process backend), 1 to 3 of them faulty from round 1
with every fault kind of :mod:`depl_fl.orchestration.faults` (by default the number cycles
1, 2, 3 over the kinds, to stay within ~20 minutes on 2 cores), plus a run
without faults.
Arms: FedAvg (``method=full aggregation=fedavg``) and DepL (``method=depl``,
tracking on) with ``aggregation=fedavg``, ``trimmed_mean`` and ``median``.
These arms have the server-side reply checks of ``depl_fl/orchestration/reply_checks.py``
and ``strategies/robust_aggregation.py``. For reference, Flower's own
``FedAvg`` (no checks: what an unguarded server does) runs the same clients
for as many rounds as the FedAvg arm took.

Per job: final loss, whether the target was met, rejected replies (summed over
rounds), rolled-back rounds and flagged losses. Writes
``benchmarks/results/robustness.md`` and ``.json``.

Usage::

    nice -n 10 python benchmarks/robustness_bench.py [--seed 0] [--faulty cycle|1,3] [--kinds nan,huge,...]

The first run for a configuration computes the loss profile (about 5 minutes
here) into ``--cache-dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

from depl_fl.errors import DeplError
from depl_fl.runs.config_choices import FAULT_KINDS
from depl_fl.runs.runconfig import compose_config

RESULTS = Path(__file__).parent / "results"
ARMS = (("FedAvg", "full", "fedavg"), ("DepL fedavg", "depl", "fedavg"),
        ("DepL trimmed_mean", "depl", "trimmed_mean"), ("DepL median", "depl", "median"))
FLOWER = "Flower FedAvg, no checks"
#: Faulty client sets by size: the clients DepL's initial plan uses at seed 0 (c7, c8, then c9,
#: the cheap node class), i.e. the worst case for DepL; FedAvg uses every client.
FAULTY = {1: ["c7"], 2: ["c7", "c8"], 3: ["c7", "c8", "c9"]}


def run_one(method: str, aggregation: str, kind: str | None, faulty: list[str], seed: int,
            work: Path, cache: Path) -> dict[str, Any]:
    """One in-process job; returns its summary figures (or the error)."""
    from depl_fl.main import run_job

    overrides = [f"method={method}", f"aggregation={aggregation}",
                 *_fault_overrides(kind, faulty, seed, cache)]
    out = work / "_".join([method, aggregation, kind or "none", str(len(faulty) if kind else 0)])
    t0 = time.perf_counter()
    try:
        path = run_job(compose_config(overrides), out)
    except DeplError as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "wall_s": time.perf_counter() - t0}
    summary = json.loads(Path(path).read_text())["summary"]
    # The loss ``met`` judges: the test split where the run measured one.
    final = summary["final_test_loss"] if "final_test_loss" in summary else summary["final_loss"]
    return {"final_loss": final, "met": summary["met"], "rounds": summary["rounds"],
            "rejected": summary["rejected_replies"], "rolled_back": summary["rolled_back_rounds"],
            "flagged": summary["flagged_losses"], "cost_j": summary["cost_j"],
            "target_loss": summary["target_loss"], "wall_s": time.perf_counter() - t0}


def _fault_overrides(kind: str | None, faulty: list[str], seed: int, cache: Path) -> list[str]:
    # profile=thorough: the exploration the committed figures were measured with
    # (the default explores frugally with tracking)
    overrides = ["simulation=inprocess", "num_clients=10", f"seed={seed}", f"profile.cache_dir={cache}",
                 "output.plot=false", "profile=thorough"]
    if kind is not None:
        overrides += [f"faults.kind={kind}", f"faults.clients=[{','.join(faulty)}]"]
    if kind == "slow":
        overrides.append("faults.slow_s=0.2")
    return overrides


def run_flower(kind: str | None, faulty: list[str], seed: int, rounds: int, cache: Path) -> dict[str, Any]:
    """Flower's FedAvg (all clients, full model, no reply checks) for ``rounds`` rounds."""
    import math

    from flwr.app import ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from clients.client_app import make_client_app
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry
    from strategies.depl_strategy import state_to_arrays
    from strategies.inprocess_grid import InProcessGrid
    from strategies.server_app import make_evaluate_fn

    cfg = compose_config(["method=full", *_fault_overrides(kind, faulty, seed, cache)])
    train = cfg["train"]
    t0 = time.perf_counter()
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=10, min_train_nodes=10)
    conf = ConfigRecord({"compression": 0.0, "local-epochs": int(train["local_epochs"]),
                         "lr": float(train["lr"]), "batch-size": int(train["batch_size"]), "seed": seed})
    try:
        result = strategy.start(InProcessGrid(make_client_app(cfg), 10),
                                state_to_arrays(initial_state(geometry(cfg), seed)), num_rounds=rounds,
                                train_config=conf)
        metrics = make_evaluate_fn(cfg)(rounds, result.arrays, 0.0)
        loss = float(metrics["test-loss"] if "test-loss" in metrics else metrics["loss"])
    except Exception as exc:  # an unguarded server may crash: that is the finding
        return {"error": f"{type(exc).__name__}: {exc}", "wall_s": time.perf_counter() - t0}
    target = float(cfg["target"]["loss"])
    return {"final_loss": loss if math.isfinite(loss) else None, "met": bool(loss <= target),
            "rounds": rounds, "rejected": "n/a", "rolled_back": 0, "flagged": 0, "target_loss": target,
            "wall_s": time.perf_counter() - t0}


def cell(res: dict[str, Any]) -> str:
    """One table cell: final loss, met or not, rejected replies."""
    if "error" in res:
        return f"error: {res['error'][:40]}"
    loss = "n/a" if res["final_loss"] is None else f"{res['final_loss']:.3f}"
    extra = "".join(f", {res[k]} {k.replace('_', ' ')}" for k in ("rolled_back", "flagged") if res[k])
    checks = "" if res["rejected"] == "n/a" else f" ({res['rejected']} rej{extra})"
    return f"{loss} {'met' if res['met'] else 'NOT met'}{checks}"


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> str:
    """The results table."""
    target = next((r[a]["target_loss"] for r in rows for a, _, _ in ARMS if "target_loss" in r[a]), None)
    arms = [a for a, _, _ in ARMS] + [FLOWER]
    head = "| faults | faulty clients | " + " | ".join(arms) + " |"
    lines = [f"# Robustness benchmark\n\n`python benchmarks/robustness_bench.py --seed {args.seed} "
             f"--faulty {args.faulty}` on {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, {seconds / 60:.1f} min. 10 clients (digits, in-process), target "
             f"loss {target}, faulty from round 1. Cell: final loss, target met, rejected replies "
             f"(summed over rounds; a crashed or rejected planned client counts once per round), "
             f"rolled-back rounds and flagged losses if any.\n", head,
             "|" + "---|" * (len(arms) + 2)]
    for r in rows:
        lines.append(f"| {r['kind'] or 'none'} | {', '.join(r['faulty']) or '-'} | "
                     + " | ".join(cell(r[a]) for a in arms) + " |")
    return "\n".join(lines) + "\n"


def _reusable(path: str | None, seed: int) -> dict[Any, Any]:
    """Rows of an earlier run keyed by (kind, faulty clients), plus its ``seconds``."""
    if path is None:
        return {}
    doc = json.loads(Path(path).read_text())
    if doc.get("seed") != seed:
        return {}
    out: dict[Any, Any] = {(r["kind"], tuple(r["faulty"])): r for r in doc["rows"]}
    out["seconds"] = float(doc.get("seconds", 0.0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faulty", default="cycle",
                        help="comma-separated numbers of faulty clients (1-3) run for every kind, or "
                             "'cycle': kind i (in FAULT_KINDS order) gets 1 + i %% 3 faulty clients")
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS))
    parser.add_argument("--work", default="/tmp/depl-robustness-bench")
    parser.add_argument("--cache-dir", default=".depl_cache")
    parser.add_argument("--reuse", default=None, help="robustness.json of an earlier run: arms found "
                        "there for the same case and seed are not run again")
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    work, cache = Path(args.work), Path(args.cache_dir)
    cases: list[tuple[str | None, list[str]]] = [(None, [])]
    for i, kind in enumerate(args.kinds.split(",")):
        counts = [1 + i % 3] if args.faulty == "cycle" else [int(n) for n in args.faulty.split(",")]
        cases += [(kind, FAULTY[n]) for n in counts]
    old = _reusable(args.reuse, args.seed)
    t0 = time.perf_counter()
    seconds = float(old.get("seconds", 0.0))
    rows = []
    for kind, faulty in cases:
        row: dict[str, Any] = dict(old.get((kind, tuple(faulty)), {"kind": kind, "faulty": faulty}))
        for arm, method, aggregation in ARMS:
            if arm not in row:
                row[arm] = run_one(method, aggregation, kind, faulty, args.seed, work, cache)
            print(f"{kind or 'none'} x{len(faulty)} {arm}: {cell(row[arm])}", flush=True)
        if FLOWER not in row:
            rounds = int(row["FedAvg"].get("rounds") or 1)
            row[FLOWER] = run_flower(kind, faulty, args.seed, rounds, cache)
        print(f"{kind or 'none'} x{len(faulty)} {FLOWER}: {cell(row[FLOWER])}", flush=True)
        rows.append(row)
    seconds += time.perf_counter() - t0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "robustness.json").write_text(
        json.dumps({"seed": args.seed, "seconds": seconds, "rows": rows}, indent=1) + "\n")
    (RESULTS / "robustness.md").write_text(markdown(rows, args, seconds))
    print((RESULTS / "robustness.md").read_text())


if __name__ == "__main__":
    main()
