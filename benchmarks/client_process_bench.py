"""Cost of one ClientApp process per message, as in a Flower 1.41 deployment.

A SuperNode starts a fresh ``flwr-clientapp`` process for every message; that
process imports the app module (``clients.client_app:app``) and calls it once.
This driver does the same without the network: ``handle`` (the measured
process) imports the app, builds one QUERY/TRAIN/EVALUATE message with the
weights that ``prepare`` saved, calls the app, checks the reply and prints
which heavy modules the process imported. ``measure`` runs ``handle`` under
``os.wait4`` (whole-process CPU time and peak RSS), cold cache first,
then warm, for one or more checkouts (e.g. before/after a change)::

    python benchmarks/client_process_bench.py measure --root after=. \\
        --root before=/tmp/depl-before --repeats 3

The node cache goes to a fresh ``$XDG_CACHE_HOME`` per checkout. ``--warm
LABEL`` makes the nodes of that checkout use their warm worker
(:mod:`clients.warm_client`, node config ``warm-worker=true``): the process
is then the thin shim, and the CPU time the worker spent on the message is
reported in its own column (the first message of a node includes starting it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HEAVY = ("sklearn", "datasets", "flwr_datasets", "hydra", "omegaconf", "torch._dynamo", "torch")
MESSAGES = ("query", "train", "evaluate")


def _context(pid: int, num: int, overrides: str, warm: bool = False):
    from flwr.app import Context, RecordDict

    node_config = {"partition-id": pid, "num-partitions": num}
    if warm:
        node_config["warm-worker"] = True
    return Context(run_id=1, node_id=100 + pid, state=RecordDict(), run_config={"overrides": overrides},
                   node_config=node_config)


def _message(kind: str, state_file: str | None, arrays: dict | None = None):
    import numpy as np
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    content = RecordDict({"config": ConfigRecord({"server-round": 1, "compression": 0.5, "seed": 0})})
    if arrays is not None:
        content["arrays"] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    elif kind != "query":
        with np.load(state_file) as npz:
            content["arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(npz[k])) for k in npz.files})
    mtype = {"query": MessageType.QUERY, "train": MessageType.TRAIN, "evaluate": MessageType.EVALUATE}[kind]
    msg = Message(content, dst_node_id=100, message_type=mtype, group_id="1")
    msg.metadata.__dict__["_message_id"] = "bench-message"
    return msg


def _minimal_reply(args: argparse.Namespace):
    """The minimal Flower app's ClientApp (benchmarks/minimal_flower_app) on a 10-weight message."""
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "minimal_flower_app"))
    from minimal_app.client_app import app

    context = _context(args.partition_id, args.num_partitions, args.overrides)
    return app(_message("train", None, {"w": np.zeros(10)}), context)


def cmd_handle(args: argparse.Namespace) -> int:
    """One message in this (fresh) process, like ``flwr-clientapp`` does."""
    start = time.perf_counter()
    if args.minimal:
        reply = _minimal_reply(args)
    else:
        from clients.client_app import app

        reply = app(_message(args.message, args.state), _context(args.partition_id, args.num_partitions,
                                                                args.overrides, args.warm_worker))
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


def _workers_cpu_s(env: dict[str, str]) -> float:
    """User+system CPU seconds so far of the live warm workers under ``env``'s node cache."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid_file in glob.glob(os.path.join(env["XDG_CACHE_HOME"], "depl-fl", "workers", "*.pid")):
        try:
            with open(pid_file) as fh, open(f"/proc/{int(fh.read())}/stat") as stat:
                fields = stat.read().rsplit(") ", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, ValueError):
            continue
    return total


def _run_with_usage(root: str, env: dict[str, str], argv: list[str]) -> tuple[int, str, str, object]:
    """Run this script's ``argv`` as a child; exit code, stdout, stderr and its ``rusage``.

    The child's parent is this process for every message (as a SuperExec is
    for a SuperNode's ClientApps), so a node's warm worker outlives one message.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], cwd=root, env=env,
                                stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), usage


def _timed(root: str, env: dict[str, str], argv: list[str]) -> dict[str, float]:
    worker_before = _workers_cpu_s(env)
    code, stdout, stderr, usage = _run_with_usage(root, env, argv)
    if code != 0:
        raise RuntimeError(f"handle failed in {root}: {stdout[-500:]} {stderr[-2000:]}")
    out = json.loads(stdout.strip().splitlines()[-1])
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024.0,
            "worker_cpu_s": _workers_cpu_s(env) - worker_before,
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
    warm = ["--warm-worker"] if label in args.warm else []
    if label in args.minimal:
        return _measure_minimal(label, root, env, args)
    for pid in range(args.num_partitions):  # cold: first message of every node
        base = ["handle", "--overrides", args.overrides, "--state", state, "--partition-id", str(pid),
                "--num-partitions", str(args.num_partitions), *warm]
        rows.append({"root": label, "cache": "cold", "message": "query",
                     **_timed(root, env, [*base, "--message", "query"])})
    for message in MESSAGES:
        for rep in range(args.repeats):
            pid = rep % args.num_partitions
            base = ["handle", "--overrides", args.overrides, "--state", state, "--partition-id", str(pid),
                    "--num-partitions", str(args.num_partitions), *warm]
            rows.append({"root": label, "cache": "warm", "message": message,
                         **_timed(root, env, [*base, "--message", message])})
    return rows


def _measure_minimal(label: str, root: str, env: dict[str, str], args: argparse.Namespace) -> list[dict]:
    """Train messages of the minimal Flower app's ClientApp (the baseline of a process per message)."""
    return [{"root": label, "cache": "-", "message": "train",
             **_timed(root, env, ["handle", "--minimal", "--message", "train"])} for _ in range(args.repeats)]


def _union(group: list[dict]) -> str:
    names = {m for r in group for m in r["heavy"].split(",") if m != "-"}
    return ",".join(m for m in HEAVY if m in names) or "-"


def _table(rows: list[dict]) -> str:
    lines = ["| checkout | cache | message | n | CPU s (median) | peak RSS MB (median) "
             "| worker CPU s (median) | torch | other heavy modules (any run) |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["root"], row["cache"], row["message"]), []).append(row)
    for (root, cache, message), group in groups.items():
        lines.append(f"| {root} | {cache} | {message} | {len(group)} | "
                     f"{statistics.median(r['cpu_s'] for r in group):.2f} | "
                     f"{statistics.median(r['rss_mb'] for r in group):.0f} | "
                     f"{statistics.median(r.get('worker_cpu_s', 0.0) for r in group):.2f} | "
                     f"{'yes' if any(r['torch'] for r in group) else 'no'} | {_union(group)} |")
    return "\n".join(lines)


def cmd_table(args: argparse.Namespace) -> int:
    """Print the markdown table of a ``measure --json`` file."""
    with open(args.json, encoding="utf-8") as fh:
        print(_table(json.load(fh)))
    return 0


def _round_wall(root: str, env: dict[str, str], state: str, args: argparse.Namespace,
                flags: list[str]) -> float:
    """Wall time until ``num_partitions`` concurrent train processes (one round's clients) are done."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "handle", "--message", "train",
                               "--overrides", args.overrides, "--state", state, "--partition-id", str(pid),
                               "--num-partitions", str(args.num_partitions), *flags],
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
            flags = ["--warm-worker"] * (label in args.warm) + ["--minimal"] * (label in args.minimal)
            _round_wall(root, env, state, args, flags)  # warm the node cache (not counted)
            setups.append((label, root, env, state, flags))
        for _ in range(args.repeats):
            for label, root, env, state, flags in setups:
                walls.setdefault(label, []).append(_round_wall(root, env, state, args, flags))
    print("| checkout | rounds | median wall s | all (s) |\n|---|---|---|---|")
    for label, values in walls.items():
        print(f"| {label} | {len(values)} | {statistics.median(values):.2f} | "
              f"{', '.join(f'{v:.1f}' for v in values)} |")
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    """Run ``handle`` (CPU time and peak RSS from ``os.wait4``) for every checkout; print a markdown table."""
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
    sub.choices["handle"].add_argument("--minimal", action="store_true",
                                       help="the minimal Flower app's ClientApp instead of DepL's")
    sub.choices["handle"].add_argument("--warm-worker", action="store_true",
                                       help="node config warm-worker=true (forward to the node's worker)")
    for name in ("measure", "rounds"):
        sub.choices[name].add_argument("--root", action="append", required=True,
                                       help="LABEL=PATH of a checkout (repeatable)")
        sub.choices[name].add_argument("--repeats", type=int, default=3)
    sub.choices["measure"].add_argument("--json", default=None)
    for name in ("measure", "rounds"):
        sub.choices[name].add_argument("--warm", action="append", default=[],
                                       help="LABEL of a --root whose nodes use the warm worker")
        sub.choices[name].add_argument("--minimal", action="append", default=[],
                                       help="LABEL of a --root that runs the minimal Flower app's ClientApp")
    args = parser.parse_args(argv)
    commands = {"handle": cmd_handle, "prepare": cmd_prepare, "measure": cmd_measure, "table": cmd_table,
                "rounds": cmd_rounds}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
