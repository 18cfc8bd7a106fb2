"""Memory per SuperNode (with its warm worker) in a loopback deployment, and how many fit one machine.

Runs ``scripts/deploy_loopback.sh -n N`` (the default job with ``profile=thorough``, unless
overrides are given; ``profile=thorough`` is added unless they name a profile) and samples,
once a second, the resident (RSS) and proportional (PSS: shared pages split among the
processes sharing them) memory of every process
of that deployment: the SuperLink, the ServerApp, the SuperExec processes, each
SuperNode, the ClientApp shims it starts per message and each node's warm
worker (found by the node cache folder this run gives them, as they run
detached). A node's memory is its SuperNode, the SuperExec that SuperNode
starts, its warm worker and its shims;
the figure per node is the deployment's peak sum of those divided by N. How
many nodes one machine holds: (machine memory - the server side's peak -
``--reserve-gib``) / PSS per node.

Usage: ``python benchmarks/supernode_memory.py [-n 20] [--machine-gib 24] [--out benchmarks/results/scale]
[HYDRA_OVERRIDE ...]``; writes ``supernodes.json`` and ``supernodes.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Process kinds by a piece of their command line (first match wins).
KINDS = (("warm_worker", "clients.warm_worker"), ("clientapp", "flwr-clientapp"),
         ("supernode", "flower-supernode"), ("serverapp", "flwr-serverapp"),
         ("superlink", "flower-superlink"), ("superexec", "flower-superexec"))
#: What the report keeps of the job's ``results.json`` summary.
JOB_KEYS = ("met", "final_test_loss", "target_loss", "target_prob", "rounds", "profile_rounds",
            "total_energy_j", "wall_s")
NODE_KINDS = ("supernode", "node_superexec", "warm_worker", "clientapp")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _memory_kib(pid: int) -> tuple[int, int]:
    """``(rss, pss)`` of ``pid`` in KiB from ``smaps_rollup`` (0, 0 once it is gone)."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def deployment_pids(root_pid: int, marker: str) -> list[int]:
    """The deployment's processes: descendants of ``root_pid`` and the processes naming ``marker``."""
    tree, seen, todo = _children(), set(), [root_pid]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(tree.get(pid, []))
    seen |= {int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and marker in _cmdline(int(e.name))}
    return sorted(seen)


def _parent_pid_arg(cmd: str) -> str | None:
    parts = cmd.split()
    return parts[parts.index("--parent-pid") + 1] if "--parent-pid" in parts[:-1] else None


def sample(root_pid: int, marker: str) -> dict[str, dict[str, int]]:
    """Per kind: process count and summed RSS and PSS (KiB) right now."""
    out: dict[str, dict[str, int]] = {}
    procs = {pid: _cmdline(pid) for pid in deployment_pids(root_pid, marker)}
    supernodes = {str(pid) for pid, cmd in procs.items() if "flower-supernode" in cmd}
    for pid, cmd in procs.items():
        kind = next((k for k, piece in KINDS if piece in cmd), None)
        if kind is None:
            continue
        if kind == "superexec" and _parent_pid_arg(cmd) in supernodes:
            kind = "node_superexec"  # each SuperNode starts its own SuperExec
        rss, pss = _memory_kib(pid)
        row = out.setdefault(kind, {"count": 0, "rss_kib": 0, "pss_kib": 0, "max_rss_kib": 0})
        row["count"] += 1
        row["rss_kib"] += rss
        row["pss_kib"] += pss
        row["max_rss_kib"] = max(row["max_rss_kib"], rss)
    return out


def summarise(samples: list[dict[str, dict[str, int]]], nodes: int, machine_gib: float,
              reserve_gib: float) -> dict[str, object]:
    """Peaks over the samples, memory per node and how many nodes fit the machine."""
    def total(s, kinds, key):
        return sum(s.get(k, {}).get(key, 0) for k in kinds)

    server_kinds = [k for k, _ in KINDS if k not in NODE_KINDS]  # SuperLink, ServerApp, the link's SuperExec
    node_rss = max(total(s, NODE_KINDS, "rss_kib") for s in samples)
    node_pss = max(total(s, NODE_KINDS, "pss_kib") for s in samples)
    server_pss = max(total(s, server_kinds, "pss_kib") for s in samples)
    per_kind = {k: {"peak_count": max(s.get(k, {}).get("count", 0) for s in samples),
                    "peak_rss_mib": max(s.get(k, {}).get("rss_kib", 0) for s in samples) / 1024,
                    "peak_pss_mib": max(s.get(k, {}).get("pss_kib", 0) for s in samples) / 1024,
                    "max_process_rss_mib": max(s.get(k, {}).get("max_rss_kib", 0) for s in samples) / 1024}
                for k in [*(k for k, _ in KINDS), "node_superexec"]}
    per_node_pss_mib = node_pss / 1024 / nodes
    room_mib = (machine_gib - reserve_gib) * 1024 - server_pss / 1024
    return {"nodes": nodes, "samples": len(samples), "per_kind": per_kind,
            "per_node_rss_mib": node_rss / 1024 / nodes, "per_node_pss_mib": per_node_pss_mib,
            "server_side_pss_mib": server_pss / 1024, "machine_gib": machine_gib, "reserve_gib": reserve_gib,
            "nodes_per_machine": int(room_mib // per_node_pss_mib) if per_node_pss_mib > 0 else None}


def write_outputs(doc: dict, out: Path) -> Path:
    """``supernodes.json`` and ``supernodes.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "supernodes.json").write_text(json.dumps(doc, indent=1))
    s = doc["summary"]
    lines = [f"# Memory per SuperNode: loopback deployment of {s['nodes']} SuperNodes", "",
             f"Regenerate: `python benchmarks/supernode_memory.py -n {s['nodes']}"
             f"{''.join(' ' + o for o in doc['overrides'])}`. Job: "
             f"`{' '.join(doc['overrides']) or 'the default job'}`, exit status {doc['returncode']}, "
             f"summary.status {doc['status']}; {s['samples']} samples, one a second.", "",
             "| processes | peak count | peak RSS MiB (sum) | peak PSS MiB (sum) | largest process RSS MiB |",
             "|---|---|---|---|---|"]
    job = doc.get("job") or {}
    if job.get("final_test_loss") is not None:
        lines[4:4] = [f"The job: {job['profile_rounds']} exploration and {job['rounds']} training rounds, "
                      f"final test loss {job['final_test_loss']:.4f} (target {job['target_loss']:g} at pi "
                      f"{job['target_prob']:g}, met: {job['met']}), {job['total_energy_j']:.1f} J modelled, "
                      f"{job['wall_s']:.0f} s wall.", ""]
    for kind, row in s["per_kind"].items():
        lines.append(f"| {kind} | {row['peak_count']} | {row['peak_rss_mib']:.0f} "
                     f"| {row['peak_pss_mib']:.0f} | {row['max_process_rss_mib']:.0f} |")
    lines += ["", "Per node (SuperNode + its SuperExec + warm worker + ClientApp shims, "
              f"peak sum / {s['nodes']}): "
              f"**{s['per_node_pss_mib']:.0f} MiB PSS**, {s['per_node_rss_mib']:.0f} MiB RSS. "
              f"Server side (SuperLink, ServerApp, SuperExec) peak PSS {s['server_side_pss_mib']:.0f} MiB. "
              f"A {s['machine_gib']:g} GiB machine, keeping {s['reserve_gib']:g} GiB for the system, holds "
              f"about **{s['nodes_per_machine']} SuperNodes** of this job."]
    (out / "supernodes.md").write_text("\n".join(lines) + "\n")
    return out / "supernodes.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--machine-gib", type=float, default=24.0)
    parser.add_argument("--reserve-gib", type=float, default=2.0)
    parser.add_argument("--timeout", type=int, default=2400)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    # profile=thorough unless another profile is named: the exploration the committed figures were
    # measured with (the default explores frugally with tracking)
    if not any(o.startswith("profile=") for o in args.overrides):
        args.overrides = ["profile=thorough", *args.overrides]
    with tempfile.TemporaryDirectory(prefix="supernode-mem-") as tmp:
        cache = Path(tmp) / "node-cache"
        env = {**os.environ, "DEPL_NODE_CACHE_DIR": str(cache), "TMPDIR": tmp}
        cmd = ["bash", str(ROOT / "scripts" / "deploy_loopback.sh"), "-n", str(args.n),
               "-t", str(args.timeout), "-o", str(Path(tmp) / "out"), *args.overrides]
        samples: list[dict] = []
        with open(Path(tmp) / "deploy.log", "w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            stop = threading.Event()

            def sampler() -> None:
                while not stop.is_set():
                    samples.append(sample(proc.pid, str(cache)))
                    stop.wait(1.0)

            thread = threading.Thread(target=sampler, daemon=True)
            thread.start()
            rc = proc.wait()
            stop.set()
            thread.join()
        results = Path(tmp) / "out" / "results.json"
        job = json.loads(results.read_text())["summary"] if results.exists() else {}
        status = job.get("status", "missing")
        if rc != 0:
            print((Path(tmp) / "deploy.log").read_text()[-3000:], file=sys.stderr)
            for log_file in sorted((Path(tmp) / "out").rglob("*.log"))[:3]:
                print(f"--- {log_file.name}", log_file.read_text()[-1500:], sep="\n", file=sys.stderr)
        if not samples or not any(s.get("supernode") for s in samples):
            sys.exit("supernode_memory: the deployment never had a SuperNode running; nothing written")
        doc = {"command": cmd[1:], "overrides": args.overrides, "returncode": rc, "status": status,
               "job": {k: job.get(k) for k in JOB_KEYS},
               "summary": summarise([s for s in samples if s], args.n, args.machine_gib, args.reserve_gib),
               "timeline": samples[:: max(1, len(samples) // 200)]}
    print(write_outputs(doc, args.out))
    sys.exit(0 if rc == 0 else 1)


if __name__ == "__main__":
    main()
