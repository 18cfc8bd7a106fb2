"""Cost of one ClientApp process per message, as in a Flower 1.41 deployment.

A SuperNode starts a fresh ``flwr-clientapp`` process for every message; that
process imports the app module (``clients.client_app:app``) and calls it once.
This driver does the same without the network: ``handle`` (the measured
process) imports the app, builds one QUERY/TRAIN/EVALUATE message with the
weights that ``prepare`` saved, calls the app, checks the reply and prints
which heavy modules the process imported. ``measure`` runs ``handle`` under
``/usr/bin/time -v`` (whole-process CPU time and peak RSS), cold cache first,
then warm, for one or more checkouts (e.g. before/after a change)::

    python benchmarks/client_process_bench.py measure --root after=. \\
        --root before=/tmp/depl-before --repeats 3

The node cache goes to a fresh ``$XDG_CACHE_HOME`` per checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HEAVY = ("sklearn", "datasets", "flwr_datasets", "hydra", "omegaconf", "torch._dynamo", "torch")
MESSAGES = ("query", "train", "evaluate")
TIME_FIELDS = {"user": r"User time \(seconds\): ([\d.]+)", "sys": r"System time \(seconds\): ([\d.]+)",
               "rss_kb": r"Maximum resident set size \(kbytes\): (\d+)"}


def _context(pid: int, num: int, overrides: str):
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=100 + pid, state=RecordDict(), run_config={"overrides": overrides},
                   node_config={"partition-id": pid, "num-partitions": num})


def _message(kind: str, state_file: str | None):
    import numpy as np
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    content = RecordDict({"config": ConfigRecord({"server-round": 1, "compression": 0.5, "seed": 0})})
    if kind != "query":
        with np.load(state_file) as npz:
            content["arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(npz[k])) for k in npz.files})
    mtype = {"query": MessageType.QUERY, "train": MessageType.TRAIN, "evaluate": MessageType.EVALUATE}[kind]
    msg = Message(content, dst_node_id=100, message_type=mtype, group_id="1")
    msg.metadata.__dict__["_message_id"] = "bench-message"
    return msg


def cmd_handle(args: argparse.Namespace) -> int:
    """One message in this (fresh) process, like ``flwr-clientapp`` does."""
    start = time.perf_counter()
    from clients.client_app import app

    reply = app(_message(args.message, args.state), _context(args.partition_id, args.num_partitions,
                                                            args.overrides))
    if reply.has_error():
        print(json.dumps({"error": reply.error.reason}))
        return 1
    print(json.dumps({"message": args.message, "wall_s": time.perf_counter() - start,
                      "reply": sorted(reply.content.keys()),
                      "heavy_modules": [m for m in HEAVY if m in sys.modules]}))
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """Save seeded initial global weights of the configured model (not measured)."""
    import numpy as np

    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry

    cfg = compose_config(args.overrides.split())
    np.savez(args.state, **initial_state(geometry(cfg), seed=int(cfg["seed"])))
    return 0


def _timed(root: str, env: dict[str, str], argv: list[str]) -> dict[str, float]:
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, os.path.abspath(__file__), *argv],
                          cwd=root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"handle failed in {root}: {proc.stdout[-500:]} {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    fields = {k: float(re.search(p, proc.stderr).group(1)) for k, p in TIME_FIELDS.items()}
    return {"cpu_s": fields["user"] + fields["sys"], "rss_mb": fields["rss_kb"] / 1024.0,
            "heavy": ",".join(m for m in out["heavy_modules"] if m != "torch") or "-",
            "torch": "torch" in out["heavy_modules"]}


def _measure_root(label: str, root: str, args: argparse.Namespace, work: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=root, XDG_CACHE_HOME=os.path.join(work, label, "xdg"),
               OMP_NUM_THREADS="1")
    os.makedirs(env["XDG_CACHE_HOME"], exist_ok=True)
    state = os.path.join(work, label, "global.npz")
    subprocess.run([sys.executable, os.path.abspath(__file__), "prepare", "--overrides", args.overrides,
                    "--state", state], cwd=root, env=env, check=True)
    rows = []
    for pid in range(args.num_partitions):  # cold: first message of every node
        base = ["handle", "--overrides", args.overrides, "--state", state, "--partition-id", str(pid),
                "--num-partitions", str(args.num_partitions)]
        rows.append({"root": label, "cache": "cold", "message": "query",
                     **_timed(root, env, [*base, "--message", "query"])})
    for message in MESSAGES:
        for rep in range(args.repeats):
            pid = rep % args.num_partitions
            base = ["handle", "--overrides", args.overrides, "--state", state, "--partition-id", str(pid),
                    "--num-partitions", str(args.num_partitions)]
            rows.append({"root": label, "cache": "warm", "message": message,
                         **_timed(root, env, [*base, "--message", message])})
    return rows


def _union(group: list[dict]) -> str:
    names = {m for r in group for m in r["heavy"].split(",") if m != "-"}
    return ",".join(m for m in HEAVY if m in names) or "-"


def _table(rows: list[dict]) -> str:
    lines = ["| checkout | cache | message | n | CPU s (median) | peak RSS MB (median) | torch | "
             "other heavy modules (any run) |", "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["root"], row["cache"], row["message"]), []).append(row)
    for (root, cache, message), group in groups.items():
        lines.append(f"| {root} | {cache} | {message} | {len(group)} | "
                     f"{statistics.median(r['cpu_s'] for r in group):.2f} | "
                     f"{statistics.median(r['rss_mb'] for r in group):.0f} | "
                     f"{'yes' if any(r['torch'] for r in group) else 'no'} | {_union(group)} |")
    return "\n".join(lines)


def cmd_table(args: argparse.Namespace) -> int:
    """Print the markdown table of a ``measure --json`` file."""
    with open(args.json, encoding="utf-8") as fh:
        print(_table(json.load(fh)))
    return 0


def _round_wall(root: str, env: dict[str, str], state: str, args: argparse.Namespace) -> float:
    """Wall time until ``num_partitions`` concurrent train processes (one round's clients) are done."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "handle", "--message", "train",
                               "--overrides", args.overrides, "--state", state, "--partition-id", str(pid),
                               "--num-partitions", str(args.num_partitions)],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for pid in range(args.num_partitions)]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError(f"a train process failed in {root}")
    return time.perf_counter() - start


def cmd_rounds(args: argparse.Namespace) -> int:
    """One round's client side: all nodes' train processes at once, checkouts alternated."""
    walls: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="depl-client-rounds-") as work:
        setups = []
        for spec in args.root:
            label, _, root = spec.partition("=")
            root = os.path.abspath(root)
            env = dict(os.environ, PYTHONPATH=root, XDG_CACHE_HOME=os.path.join(work, label, "xdg"))
            os.makedirs(env["XDG_CACHE_HOME"])
            state = os.path.join(work, label, "global.npz")
            subprocess.run([sys.executable, os.path.abspath(__file__), "prepare", "--overrides",
                            args.overrides, "--state", state], cwd=root, env=env, check=True)
            _round_wall(root, env, state, args)  # warm the node cache (not counted)
            setups.append((label, root, env, state))
        for _ in range(args.repeats):
            for label, root, env, state in setups:
                walls.setdefault(label, []).append(_round_wall(root, env, state, args))
    print("| checkout | rounds | median wall s | all (s) |\n|---|---|---|---|")
    for label, values in walls.items():
        print(f"| {label} | {len(values)} | {statistics.median(values):.2f} | "
              f"{', '.join(f'{v:.1f}' for v in values)} |")
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    """Run ``handle`` under ``/usr/bin/time -v`` for every checkout; print a markdown table."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="depl-client-bench-") as work:
        for spec in args.root:
            label, _, root = spec.partition("=")
            rows += _measure_root(label, os.path.abspath(root), args, work)
    table = _table(rows)
    print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("table").add_argument("--json", required=True)
    for name in ("handle", "prepare", "measure", "rounds"):
        p = sub.add_parser(name)
        p.add_argument("--overrides", default="num_clients=3")
        p.add_argument("--state", default=None)
        p.add_argument("--num-partitions", type=int, default=3)
    sub.choices["handle"].add_argument("--message", choices=MESSAGES, required=True)
    sub.choices["handle"].add_argument("--partition-id", type=int, default=0)
    for name in ("measure", "rounds"):
        sub.choices[name].add_argument("--root", action="append", required=True,
                                       help="LABEL=PATH of a checkout (repeatable)")
        sub.choices[name].add_argument("--repeats", type=int, default=3)
    sub.choices["measure"].add_argument("--json", default=None)
    args = parser.parse_args(argv)
    commands = {"handle": cmd_handle, "prepare": cmd_prepare, "measure": cmd_measure, "table": cmd_table,
                "rounds": cmd_rounds}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
