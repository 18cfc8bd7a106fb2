"""One DepL job per transformer network a user brings, end to end (``model=custom``).

Runs ``python -m depl_fl.main model=custom model.factory=FACTORY simulation=inprocess``
on the bundled digits (4 clients) and reads the job's ``results.json``: whether
it met the target, its exploration and training rounds, the variants it
explored, planned and trained, the final test loss, each variant's modelled
FLOPs and bytes, and, per round, the measured ``bytes_down``/``bytes_up``
against the modelled ones. Writes
``benchmarks/results/byom_attention/job.{md,json}``.

The target: these ViTs leave the fresh model's plateau (loss 2.3) only after
a few epochs and learn with SGD at ``lr`` 0.02 (at the default 0.05 their
loss still swings between 0.7 and 0.95 after 15 epochs of centralised
training); centralised at 0.02 they pass 0.5 after about 10 epochs and
reach 0.15-0.3 after 30, so ``target.loss`` 0.5 within 900 modelled seconds
is within reach, not trivially met by the exploration.

Usage: ``python benchmarks/byom_attention_job.py [--factories tests.user_nets:vit_net ...] [--seeds 0]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom_attention"
SETTINGS = ["simulation=inprocess", "num_clients=4", "target.loss=0.5", "target.deadline_s=900",
            "train.lr=0.02"]
FACTORIES = ("tests.user_nets:vit_net", "tests.user_nets:hand_attention_net")


def run_job(factory: str, seed: int, folder: Path) -> dict:
    """Run one job in ``folder`` and return its ``results.json``."""
    command = [sys.executable, "-m", "depl_fl.main", "model=custom", f"model.factory={factory}", *SETTINGS,
               f"seed={seed}", f"hydra.run.dir={folder}", f"profile.cache_dir={folder / 'cache'}"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"{factory} seed {seed}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return json.loads((folder / "results.json").read_text(encoding="utf-8"))


def summarise(factory: str, seed: int, result: dict) -> dict:
    """The figures a reader checks: target, rounds, variants, loss, bytes per round."""
    s, rounds = result["summary"], result["rounds"]
    exact = [r["bytes_down"] == r["modelled_bytes_down"] and r["bytes_up"] == r["modelled_bytes_up"]
             for r in rounds]
    worst = max(max(abs(r["bytes_down"] - r["modelled_bytes_down"]) / max(r["modelled_bytes_down"], 1),
                    abs(r["bytes_up"] - r["modelled_bytes_up"]) / max(r["modelled_bytes_up"], 1))
                for r in rounds)
    models = {m["id"]: {"flops_per_sample": m["flops_per_sample"], "size_bytes": m["size_bytes"]}
              for m in result["scenario"]["models"]}
    return {"factory": factory, "seed": seed, "met": s["met"], "target_loss": s["target_loss"],
            "target_prob": s["target_prob"], "deadline_s": s["deadline_s"],
            "exploration_rounds": s["profile_rounds"], "training_rounds": s["rounds"],
            "planned_rounds": s["planned_rounds"], "replans": s["replans"],
            "planned": dict(Counter(r["model"] for r in result["plan"]["rounds"])),
            "trained": dict(Counter(r["model"] for r in rounds if r["phase"] == "train")),
            "explored": dict(Counter(r["model"] for r in rounds if r["phase"] != "train")),
            "final_test_loss": s["final_test_loss"], "final_validation_loss": s["final_loss"],
            "final_test_accuracy": s["final_test_accuracy"], "total_energy_j": s["total_energy_j"],
            "total_time_s": s["total_time_s"], "models": models,
            "rounds_bytes_exact": sum(exact), "rounds": len(rounds), "worst_bytes_rel_diff": worst,
            "bytes_down": s["measured"]["bytes_down"], "bytes_up": s["measured"]["bytes_up"]}


def markdown(rows: list[dict], command: str) -> str:
    lines = ["# Transformer networks through `model=custom`: one DepL job each", "",
             f"Settings: `{' '.join(SETTINGS)}`, bundled digits. Load average (1 min) at the end "
             f"{os.getloadavg()[0]:.1f}.", "",
             "| network | seed | met | exploration + training rounds | plan (rounds per variant) "
             "| trained | final test loss | energy J | modelled time s "
             "| rounds with measured bytes = modelled |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        plan = ", ".join(f"{k} x{v}" for k, v in r["planned"].items())
        trained = ", ".join(f"{k} x{v}" for k, v in r["trained"].items())
        lines.append(f"| `{r['factory']}` | {r['seed']} | {'yes' if r['met'] else 'no'} "
                     f"| {r['exploration_rounds']} + {r['training_rounds']} | {plan} | {trained} "
                     f"| {r['final_test_loss']:.4f} | {r['total_energy_j']:.1f} | {r['total_time_s']:.1f} "
                     f"| {r['rounds_bytes_exact']} of {r['rounds']} |")
    lines += ["", "Variants (modelled training FLOPs per sample, bytes per transfer):", ""]
    for r in rows:
        costs = "; ".join(f"{k}: {v['flops_per_sample'] / 1e6:.3f} MFLOP, {v['size_bytes'] / 1e3:.1f} kB"
                          for k, v in r["models"].items())
        lines.append(f"- `{r['factory']}`: {costs}")
    lines += ["", f"Command: `{command}`"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factories", nargs="+", default=list(FACTORIES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for factory in args.factories:
            for seed in args.seeds:
                folder = Path(tmp) / f"{factory.replace(':', '_')}_{seed}"
                rows.append(summarise(factory, seed, run_job(factory, seed, folder)))
    command = ("python benchmarks/byom_attention_job.py --factories " + " ".join(args.factories)
               + " --seeds " + " ".join(str(s) for s in args.seeds))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "job.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    text = markdown(rows, command)
    (OUT / "job.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
