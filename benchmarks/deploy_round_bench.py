"""Round time of a DepL deployment next to a minimal Flower app's, on the same loopback federation.

One invocation starts one ``flower-superlink`` and N ``flower-supernode``
processes on 127.0.0.1 (insecure, free ports, a temporary FLWR_HOME), then
runs, on that same federation and alternating (minimal, DepL, minimal, DepL,
...), ``flwr run benchmarks/minimal_flower_app`` (a tiny numpy FedAvg) and
``flwr run .`` (DepL). Round times:

* minimal app: its ServerApp's wall time of every round (send, receive, average);
* DepL: ``rounds[].wall_s`` of results.json (send, receive, aggregate, central evaluation).

Both are the time from sending a round's messages to having its result on
the server: mostly starting one ClientApp process per message in Flower
1.41. The medians and their ratio (goal: DepL <= 1.3x) go to a Markdown
file (default ``benchmarks/results/deploy_rounds.md``).

Usage::

    python benchmarks/deploy_round_bench.py [--nodes 3] [--rounds 5] [--repeats 2] [--out FILE]
        [DEPL_OVERRIDE ...]

The loss profile of the DepL configuration is computed (or read from the
cache) before the federation starts, so pilots never run inside the timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = ROOT / "benchmarks" / "minimal_flower_app"
BIN = Path(sys.executable).parent
#: DepL job of the benchmark: the plain FedAvg arm of DepL (all clients, full model every
#: round), so that every DepL round, like every minimal round, sends one message per node.
#: A small in-process loss profile made before the federation starts (it only decides the
#: number of rounds, not what a round costs), so that no exploration round is timed.
DEFAULT_DEPL = ["method=full", "profile.source=inprocess", "tracking.enabled=false", "output.plot=false",
                "target.loss=0.7", "target.prob=0.6", "target.max_rounds=6", "profile.seeds=1",
                "profile.rounds=3", "profile.switch_at=[2]"]


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args[0]} exited early ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextmanager
def federation(nodes: int, work: Path, logs: Path) -> Iterator[Path]:
    """SuperLink + ``nodes`` SuperNodes on loopback; yields the CLI's FLWR_HOME."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    ports = _free_ports(nodes + 1)
    procs: list[subprocess.Popen] = []

    def spawn(name: str, args: list[str]) -> subprocess.Popen:
        home = work / name
        home.mkdir(parents=True)
        proc = subprocess.Popen(args, cwd=home, env={**env, "FLWR_HOME": str(home)},
                                stdout=(logs / f"{name}.log").open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        procs.append(proc)
        return proc

    try:
        link = spawn("superlink", [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1",
                                   "--port", str(ports[0]), "--disable-runtime-dependency-installation"])
        _wait_port(ports[0], link)
        for i in range(nodes):
            spawn(f"supernode-{i}", [str(BIN / "flower-supernode"), "--insecure", "--superlink",
                                     f"127.0.0.1:{ports[0]}", "--host", "127.0.0.1", "--port",
                                     str(ports[i + 1]), "--node-config",
                                     f'partition-id={i} num-partitions={nodes} cluster="{"AB"[i % 2]}"'])
        cli = work / "cli"
        cli.mkdir()
        (cli / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
            f'address = "127.0.0.1:{ports[0]}"\ninsecure = true\n')
        yield cli
    finally:
        _stop(procs)


def _flwr_run(app: Path, run_config: str, cli: Path, log: Path, timeout_s: float) -> None:
    env = {**os.environ, "FLWR_HOME": str(cli), "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "PYTHONPATH": ""}
    with log.open("a") as out:
        subprocess.run([str(BIN / "flwr"), "run", str(app), "loopback", "--stream", "--run-config",
                        run_config], cwd=app, env=env, stdout=out, stderr=subprocess.STDOUT,
                       timeout=timeout_s, check=False)


def run_minimal(cli: Path, work: Path, logs: Path, nodes: int, rounds: int) -> list[float]:
    """Round wall times of one minimal-app run."""
    out = work / f"minimal-{time.monotonic_ns()}.json"
    _flwr_run(MINIMAL, f'num-rounds={rounds} num-nodes={nodes} out-file="{out}"', cli,
              logs / "flwr-minimal.log", 900)
    if not out.is_file():
        raise RuntimeError(f"the minimal app wrote no round times (see {logs / 'flwr-minimal.log'})")
    return list(json.loads(out.read_text())["round_wall_s"])


def run_depl(cli: Path, work: Path, logs: Path, overrides: list[str]) -> list[float]:
    """Round wall times (``rounds[].wall_s``) of one DepL run."""
    out = work / f"depl-{time.monotonic_ns()}"
    text = " ".join([*overrides, f"++output.dir={out}"])
    _flwr_run(ROOT, f'overrides="{text}"', cli, logs / "flwr-depl.log", 1800)
    path = out / "results.json"
    if not path.is_file():
        raise RuntimeError(f"DepL wrote no results.json (see {logs / 'flwr-depl.log'})")
    doc = json.loads(path.read_text())
    if doc["summary"].get("status", "completed") != "completed":
        raise RuntimeError(f"DepL run ended {doc['summary'].get('status')}")
    return [float(r["wall_s"]) for r in doc["rounds"]]


def report(minimal: list[list[float]], depl: list[list[float]], args: argparse.Namespace,
           overrides: list[str], load: tuple[str, str]) -> str:
    """The Markdown report."""
    m_all = [t for run in minimal for t in run]
    d_all = [t for run in depl for t in run]
    m_med, d_med = statistics.median(m_all), statistics.median(d_all)
    ratio = d_med / m_med
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True, check=False).stdout.strip() or "unknown"

    def fmt(runs: list[list[float]]) -> str:
        return "; ".join(", ".join(f"{t:.2f}" for t in run) for run in runs)

    return "\n".join([
        "# Deployment round time: DepL vs a minimal Flower app",
        "",
        f"Generated by `python benchmarks/deploy_round_bench.py {' '.join(args.argv)}` "
        f"on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {rev}, {platform.node()} "
        f"({os.cpu_count()} CPUs; load average {load[0]} before, {load[1]} after).",
        "",
        f"One loopback federation (1 SuperLink, {args.nodes} SuperNodes, insecure), "
        f"{args.repeats} alternating runs of each app. DepL overrides: `{' '.join(overrides)}`. "
        "SuperNodes with the default node config, so DepL's ClientApp processes hand their messages "
        "to each node's warm worker (docs/DEPLOYMENT.md, \"Fast rounds\"); the first DepL run "
        "starts the workers during its node query, before round 1.",
        "",
        "| app | rounds | median round (s) | min (s) | max (s) |",
        "|---|---|---|---|---|",
        f"| minimal Flower app (numpy) | {len(m_all)} | {m_med:.2f} | {min(m_all):.2f} | {max(m_all):.2f} |",
        f"| DepL | {len(d_all)} | {d_med:.2f} | {min(d_all):.2f} | {max(d_all):.2f} |",
        "",
        f"**Ratio of medians DepL / minimal: {ratio:.2f}** (goal <= 1.3: "
        f"{'met' if ratio <= 1.3 else 'NOT met'}).",
        "",
        f"Per-round times (s), one group per run. Minimal: {fmt(minimal)}. DepL: {fmt(depl)}.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the minimal app per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each app (alternating)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "deploy_rounds.md")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("overrides", nargs="*", help="DepL Hydra overrides (added to the defaults)")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    for exe in ("flower-superlink", "flower-supernode", "flwr"):
        if not (BIN / exe).exists():
            print(f"deploy_round_bench: {exe} not found next to {sys.executable}", file=sys.stderr)
            return 2
    sys.path.insert(0, str(ROOT))
    from depl_fl.orchestration.profiling import ensure_profile
    from depl_fl.runs.runconfig import compose_config

    cache = os.environ.get("DEPL_CACHE_DIR", ROOT / ".depl_cache")
    overrides = [*DEFAULT_DEPL, f"num_clients={args.nodes}", f"profile.cache_dir={cache}", *args.overrides]
    ensure_profile(compose_config(overrides))  # pilots outside the timing
    work = Path(tempfile.mkdtemp(prefix="depl-round-bench."))
    logs = work / "logs"
    logs.mkdir()
    load_before = open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "n/a"
    minimal: list[list[float]] = []
    depl: list[list[float]] = []
    try:
        with federation(args.nodes, work, logs) as cli:
            for _ in range(args.repeats):
                minimal.append(run_minimal(cli, work, logs, args.nodes, args.rounds))
                print(f"minimal: {minimal[-1]}", flush=True)
                depl.append(run_depl(cli, work, logs, overrides))
                print(f"depl: {depl[-1]}", flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"deploy_round_bench: {exc} (logs in {work})", file=sys.stderr)
        return 1
    load_after = open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "n/a"
    text = report(minimal, depl, args, overrides, (load_before, load_after))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
