"""Measured against modelled bytes per round in a loopback deployment of a user's network.

Runs ``scripts/deploy_loopback.sh`` (one SuperLink, 3 SuperNodes, ``flwr run``)
with a network the user brings (``model=custom
model.factory=tests.user_nets:resnet_tiny``: BatchNorm and residual adds,
importable on every node because the FAB ships it) and its compressed
variants (``model.compressions=[0.0,0.5,0.75]``), federated exploration then
the plan. Fresh profile and node caches (a temporary folder), so the job
explores. For every round of ``results.json`` it compares the array bytes the
ServerApp measured on the messages it pushed to the SuperLink and the replies
it pulled (``bytes_down``, ``bytes_up``) with what the cost model charges
(``modelled_bytes_*``: the variant's ``size_bytes`` per planned client), and
shows the array data each node reported receiving and sending (its
``bytes-down``/``bytes-up`` reply metrics: raw array data, without the
``np.save`` headers the other columns count). Writes
``benchmarks/results/byom/bytes_deploy.{md,json}``.

Usage: ``python benchmarks/byom_bytes_deploy_bench.py [--timeout 900] [--rounds 6]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom"
NODES = 3
FACTORY = "tests.user_nets:resnet_tiny"
OVERRIDES = ["model=custom", f"model.factory={FACTORY}", "model.compressions=[0.0,0.5,0.75]",
             "profile.explore.rounds=3", "profile.explore.max_rounds=3", "profile.explore.switch_rounds=[2]",
             "target.loss=2.0", "target.prob=0.6", "target.deadline_s=3000", "tracking.enabled=false",
             "profile.explore.without_tracking=thorough", "output.plot=false"]
#: Goal per round, down and up: measured within this share of modelled.
TOLERANCE = 0.05


def deploy(work: Path, rounds: int, timeout: int) -> tuple[list[str], int, float]:
    """Run the loopback deployment into ``work/out``; returns the command, its exit status and seconds."""
    local = Path(sys.executable).parent / "flower-superlink"
    flwr_bin = (local if local.exists() else Path(shutil.which("flower-superlink") or local)).parent
    env = {**os.environ, "FLWR_BIN": str(flwr_bin), "TMPDIR": str(work), "PYTHONPATH": str(ROOT),
           "DEPL_CACHE_DIR": str(work / "profile-cache"), "DEPL_NODE_CACHE_DIR": str(work / "node-cache")}
    cmd = ["bash", "scripts/deploy_loopback.sh", "-n", str(NODES), "-r", str(rounds), "-o", str(work / "out"),
           "-t", str(timeout), *OVERRIDES]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout + 120)
    (work / "deploy.log").write_text(proc.stdout + proc.stderr)
    return cmd, proc.returncode, time.perf_counter() - start


def round_rows(doc: dict) -> list[dict]:
    """One row per round with bytes: measured, modelled, node-reported and the full network's."""
    sizes = {m["id"]: m["size_bytes"] for m in doc["scenario"]["models"]}
    rows = []
    for rec in doc["rounds"]:
        if "bytes_down" not in rec:
            continue
        planned = rec.get("num_clients") or len(rec["clients"])
        replies = (rec.get("replies") or {}).values()
        dev = {d: abs(rec[f"bytes_{d}"] - rec[f"modelled_bytes_{d}"]) / rec[f"modelled_bytes_{d}"]
               for d in ("down", "up")}
        rows.append({"round": rec["round"], "phase": rec.get("phase", "train"), "model": rec["model"],
                     "loss": rec["loss"], "clients": planned, "replied": len(rec.get("replied") or []),
                     "bytes_down": rec["bytes_down"], "modelled_bytes_down": rec["modelled_bytes_down"],
                     "bytes_up": rec["bytes_up"], "modelled_bytes_up": rec["modelled_bytes_up"],
                     "node_bytes_down": sum(int(r.get("bytes_down", 0)) for r in replies),
                     "node_bytes_up": sum(int(r.get("bytes_up", 0)) for r in replies),
                     "full_network_bytes": sizes["full"] * planned,
                     "deviation_down": dev["down"], "deviation_up": dev["up"]})
    return rows


def report(rows: list[dict], doc: dict, status: int, seconds: float, command: str) -> list[str]:
    """The markdown table and verdict."""
    worst = max((max(r["deviation_down"], r["deviation_up"]) for r in rows), default=float("nan"))
    summary = doc.get("summary", {})
    lines = ["# Bytes on the wire per round in a loopback deployment: measured vs modelled", "",
             f"A real Flower deployment on loopback (`scripts/deploy_loopback.sh`: one SuperLink, {NODES} "
             f"SuperNodes, `flwr run`) of a network the user brings, `model=custom "
             f"model.factory={FACTORY}` (ResNet-style: BatchNorm and residual adds; importable on the "
             "nodes from the FAB), with variants full, p50 and p75, on the bundled digits; fresh "
             "profile and node caches, so the job explores (3 rounds, every variant on its own "
             "client) and then trains its plan. Measured: the array bytes of the train messages "
             "the ServerApp pushed to the SuperLink and of the replies it pulled (`np.save` bytes, "
             "as Flower carries them). Modelled: the variant's `size_bytes` per planned client (what "
             "the cost model charges). Node: the array data the nodes reported receiving and sending "
             "(no `np.save` headers). Full: the full network per planned client.", "",
             f"Job status `{summary.get('status')}`, script exit {status}, {len(rows)} rounds with bytes, "
             f"{seconds:.0f} s wall; target (a loose one: the check is about bytes) "
             f"{'met' if summary.get('met') else 'not met'}, final test loss "
             f"{summary.get('final_test_loss')}.", "",
             "| round | phase | model | loss | clients | replied | down measured | down modelled | down node "
             "| up measured | up modelled | up node | full network | deviation down | deviation up |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['phase']} | {r['model']} | {r['loss']:.3f} | {r['clients']} "
                     f"| {r['replied']} "
                     f"| {r['bytes_down']:,} | {r['modelled_bytes_down']:,} | {r['node_bytes_down']:,} "
                     f"| {r['bytes_up']:,} | {r['modelled_bytes_up']:,} | {r['node_bytes_up']:,} "
                     f"| {r['full_network_bytes']:,.0f} | {100 * r['deviation_down']:.2f}% "
                     f"| {100 * r['deviation_up']:.2f}% |")
    verdict = "met" if rows and worst <= TOLERANCE else "NOT met"
    lines += ["", f"Largest deviation of a round, down or up: {100 * worst:.2f}% (goal <= "
              f"{100 * TOLERANCE:.0f}% per round: {verdict}).", "", f"Command: `{command}`"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="target.max_rounds of the plan (default 6)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds the deployment may take")
    args = parser.parse_args()
    command = "python benchmarks/byom_bytes_deploy_bench.py" + (
        f" --rounds {args.rounds}" if args.rounds != 6 else "")
    with tempfile.TemporaryDirectory(prefix="byom-deploy-") as tmp:
        work = Path(tmp)
        cmd, status, seconds = deploy(work, args.rounds, args.timeout)
        path = work / "out" / "results.json"
        if not path.exists():
            raise SystemExit(f"byom_bytes_deploy_bench: no results.json (exit {status}):\n"
                             + (work / "deploy.log").read_text()[-3000:])
        doc = json.loads(path.read_text())
    rows = round_rows(doc)
    lines = report(rows, doc, status, seconds, command)
    worst = max((max(r["deviation_down"], r["deviation_up"]) for r in rows), default=None)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bytes_deploy.json").write_text(json.dumps(
        {"command": command, "deploy_command": cmd, "exit_status": status, "wall_s": seconds,
         "status": doc.get("summary", {}).get("status"), "rounds": rows, "max_deviation": worst,
         "tolerance": TOLERANCE}, indent=1) + "\n")
    (OUT / "bytes_deploy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
