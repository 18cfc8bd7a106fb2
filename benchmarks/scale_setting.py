"""Learning curves of candidate synthetic federations: how to choose the 1,000-client setting.

Plain FedAvg rounds of the full model in this process with the ClientApp's
local update and the server's aggregation (the in-process pilots of
:mod:`depl_fl.orchestration.profiling`), on ``dataset=synthetic
model=synthetic_mlp``. Every round trains ``--per-round`` clients: a seeded
random draw per round (``--pick random``, as the exploration does), or the
same ones every round (``--pick largest``: the clients with most samples, the
data selection's favourites; ``--pick fixed``: one seeded random set, like a
plan). After every round it records the validation loss (the server's split)
and, at the end, the test loss.

Usage::

    python benchmarks/scale_setting.py --seeds 100 101 --rounds 40 --per-round 20 \\
        --label iid-lr0.05 -- dataset.iid=true train.lr=0.05

Appends one row per (label, seed) to ``--out`` (JSON lines) and prints the
trajectory; ``--table`` renders every row of that file as markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from depl_fl.orchestration.profiling import _Pilot  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402

BASE = ["dataset=synthetic", "model=synthetic_mlp", "num_clients=1000", "simulation=inprocess"]


def pick_clients(pick: str, counts: np.ndarray, per_round: int, seed: int, server_round: int) -> list[int]:
    """The clients one round trains (see the module docstring for ``pick``)."""
    n = counts.size
    if pick == "largest":
        return sorted(int(i) for i in np.argsort(-counts, kind="stable")[:per_round])
    key = [seed, 7] if pick == "fixed" else [seed, 7, server_round]
    return sorted(int(i) for i in np.random.default_rng(key).choice(n, size=per_round, replace=False))


def curve(overrides: Sequence[str], seed: int, rounds: int, per_round: int, pick: str) -> dict[str, Any]:
    """One federation's validation-loss trajectory over ``rounds`` FedAvg rounds."""
    cfg = compose_config([*BASE, f"seed={seed}", *overrides])
    t0 = time.perf_counter()
    pilot = _Pilot(cfg, seed)
    counts = np.array([len(y) for _, y in pilot.parts])
    state = pilot.initial()
    losses = [pilot.loss(state, "full")]
    trained = []
    for k in range(1, rounds + 1):
        members = pick_clients(pick, counts, per_round, seed, k)
        trained.append(int(counts[members].sum()))
        state = pilot.round(state, "full", k, members)
        losses.append(pilot.loss(state, "full"))
    from depl_fl.task.local_update import evaluate_variant
    from depl_fl.task.losses import loss_spec
    from depl_fl.task.partitions import test_split

    test = float(evaluate_variant(state, pilot.geometry, 0.0, *test_split(cfg, seed=seed),
                                  loss=loss_spec(cfg))[0])
    return {"seed": seed, "overrides": list(overrides), "pick": pick, "per_round": per_round,
            "val_loss": losses, "final_test_loss": test, "min_val_loss": min(losses),
            "argmin_round": int(np.argmin(losses)), "samples_per_round": float(np.mean(trained)),
            "total_samples": int(counts.sum()), "wall_s": time.perf_counter() - t0}


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: one line per (label, seed) with the loss after selected rounds."""
    marks = [0, 5, 10, 20, 30, 40, 60, 80]
    head = "| label | seed | pick x per round | samples / round | " + " | ".join(
        f"val r{m}" for m in marks) + " | min (round) | final test |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        vals = [f"{r['val_loss'][m]:.3f}" if m < len(r["val_loss"]) else "" for m in marks]
        lines.append(f"| {r['label']} | {r['seed']} | {r['pick']} x {r['per_round']} | "
                     f"{r['samples_per_round']:.0f} | " + " | ".join(vals)
                     + f" | {r['min_val_loss']:.3f} ({r['argmin_round']}) | {r['final_test_loss']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[100])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--pick", choices=("random", "fixed", "largest"), default="random")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "guarantee_scale"
                        / "setting_curves.jsonl")
    parser.add_argument("--table", action="store_true", help="render --out as markdown and exit")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.table:
        rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        print(table(rows))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        row = curve(args.overrides, seed, args.rounds, args.per_round, args.pick)
        row.update(label=args.label or " ".join(args.overrides), load_average=os.getloadavg()[0])
        with args.out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(table([row]), flush=True)


if __name__ == "__main__":
    main()
