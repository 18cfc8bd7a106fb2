"""Round time of a DepL deployment next to a minimal Flower app's, on the same loopback federation.

One invocation starts one ``flower-superlink`` and N ``flower-supernode``
processes on 127.0.0.1 (insecure, free ports, a temporary FLWR_HOME), then
runs on that same federation, alternating, ``flwr run benchmarks/minimal_flower_app``
(a tiny numpy FedAvg) and ``flwr run .`` (DepL on today's defaults), per repeat:

1. the minimal app;
2. a DepL job on a fresh profile cache: its federated **exploration rounds**
   (every round all N nodes, split into one group per model variant);
3. the minimal app;
4. a DepL job of the same federation that reuses the profile cached by (2):
   its **training rounds** (``method=full``: every round on all N nodes, like
   the minimal app's).

Round times:

* minimal app: its ServerApp's wall time of every round (send, receive, average);
* DepL: ``rounds[].wall_s`` of results.json (send, receive, aggregate, central
  evaluation), with the median seconds of every step of a round
  (``rounds[].steps_s``) and of the work between two rounds (checkpoint and
  results.json, late nodes).

Both are the time from sending a round's messages to having its result on the
server. The medians and their ratios (goal: each phase at most 1.1x the
minimal app) go to a Markdown file and a JSON file beside it (default
``benchmarks/results/deploy_rounds.md`` / ``.json``), with the load average
before and after (the machine may be shared).

Usage::

    python benchmarks/deploy_round_bench.py [--nodes 3] [--rounds 5] [--repeats 2] [--out FILE]
        [--compare DIR] [DEPL_OVERRIDE ...]

``--compare DIR`` also times the DepL of another checkout (e.g. an older
commit, ``git worktree add``) in the same federation, right after this one's
jobs of every repeat. DepL overrides other than the benchmark's are listed in
the report as settings that differ from the defaults.
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
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = ROOT / "benchmarks" / "minimal_flower_app"
BIN = Path(sys.executable).parent
#: DepL's settings in the benchmark besides the defaults: the plain FedAvg arm of DepL in the
#: training rounds (all clients, full model every round), so that every DepL round, like every
#: minimal round, sends one message per node. The exploration rounds do not depend on the method.
#: profile=thorough: the exploration the committed figures were measured with
#: (the default explores frugally with tracking).
DEFAULT_DEPL = ["method=full", "profile=thorough"]


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


def run_depl(root: Path, cli: Path, work: Path, logs: Path, overrides: list[str]) -> list[dict[str, Any]]:
    """The round records (``rounds[]`` of results.json) of one DepL job of the app at ``root``."""
    out = work / f"depl-{time.monotonic_ns()}"
    text = " ".join([*overrides, f"++output.dir={out}"])
    _flwr_run(root, f'overrides="{text}"', cli, logs / "flwr-depl.log", 1800)
    path = out / "results.json"
    if not path.is_file():
        raise RuntimeError(f"DepL wrote no results.json (see {logs / 'flwr-depl.log'})")
    doc = json.loads(path.read_text())
    if doc["summary"].get("status", "completed") != "completed":
        raise RuntimeError(f"DepL run ended {doc['summary'].get('status')}")
    return list(doc["rounds"])


#: What one DepL job of a repeat times: its name, the phase of its rounds, its extra overrides.
JOBS = (("exploration", "profile"), ("training", "train"))
#: Work between two rounds, outside a round's wall time.
BETWEEN = ("write", "admit")


def phase_summary(records: list[dict[str, Any]], minimal_median: float) -> dict[str, Any]:
    """Count, median, min, max of the rounds' wall times, the ratio to the minimal app, the steps."""
    walls = [float(r["wall_s"]) for r in records]
    if not walls:
        return {"rounds": 0}
    steps: dict[str, list[float]] = {}
    for rec in records:
        for name, took in (rec.get("steps_s") or {}).items():
            steps.setdefault(name, []).append(float(took))
    med = statistics.median(walls)
    return {"rounds": len(walls), "median_s": med, "min_s": min(walls), "max_s": max(walls),
            "ratio": med / minimal_median,
            "steps_median_s": {k: statistics.median(v) for k, v in steps.items()}}


def summarize(minimal: list[list[float]], depl: dict[str, dict[str, list[list[dict[str, Any]]]]]
              ) -> dict[str, Any]:
    """The benchmark's figures: minimal app and every (checkout, phase) of DepL."""
    m_all = [t for run in minimal for t in run]
    m_med = statistics.median(m_all)
    out: dict[str, Any] = {"minimal": {"rounds": len(m_all), "median_s": m_med, "min_s": min(m_all),
                                       "max_s": max(m_all), "runs": minimal}}
    for label, phases in depl.items():
        out[label] = {}
        for phase, runs in phases.items():
            out[label][phase] = {**phase_summary([r for run in runs for r in run], m_med),
                                 "runs": [[round(float(r["wall_s"]), 2) for r in run] for run in runs]}
    return out


def _row(name: str, p: dict[str, Any], ratio: bool = True) -> str:
    if not p.get("rounds"):
        return f"| {name} | 0 | - | - | - | - |"
    return (f"| {name} | {p['rounds']} | {p['median_s']:.2f} | {p['min_s']:.2f} | {p['max_s']:.2f} | "
            + (f"{p['ratio']:.2f} |" if ratio else "1 |"))


def _steps_line(name: str, p: dict[str, Any]) -> str:
    steps = p.get("steps_median_s") or {}
    if not steps:
        return f"* {name}: no per-step times (its rounds carry no `steps_s`)."
    inside = ", ".join(f"{k} {v:.3f}" for k, v in steps.items() if k not in BETWEEN)
    between = ", ".join(f"{k} {v:.3f}" for k, v in steps.items() if k in BETWEEN)
    return f"* {name}: {inside}; between rounds: {between or 'n/a'}."


def _revision(root: Path) -> str:
    """The short commit of the checkout at ``root`` (its path when it is no git checkout)."""
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                         text=True, check=False).stdout.strip()
    return rev or str(root)


def report(fig: dict[str, Any], args: argparse.Namespace, overrides: list[str],
           load: tuple[str, str], goal: float) -> str:
    """The Markdown report."""
    rev = _revision(ROOT)
    labels = [k for k in fig if k != "minimal"]
    lines = [
        "# Deployment round time: DepL vs a minimal Flower app",
        "",
        f"Generated by `python benchmarks/deploy_round_bench.py {' '.join(args.argv)}` "
        f"on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {rev}, {platform.node()} "
        f"({os.cpu_count()} CPUs; `uptime` load averages {load[0]} before, {load[1]} after).",
        "",
        f"One loopback federation (1 SuperLink, {args.nodes} SuperNodes, insecure, default node "
        f"config: DepL's ClientApp processes hand their messages to each node's warm worker), "
        f"{args.repeats} repeats of: minimal app ({args.rounds} rounds), DepL exploration job (fresh "
        "profile cache), minimal app, DepL training job (reuses that profile). DepL runs on the "
        f"defaults of conf/config.yaml except: `{' '.join(overrides)}` (`method=full`: every training "
        "round on all nodes, as the minimal app's rounds; `num_clients` matches the federation; the "
        "cache and output folders are the benchmark's).",
        "",
        "| rounds of | rounds | median round (s) | min (s) | max (s) | median / minimal's |",
        "|---|---|---|---|---|---|",
        _row("minimal Flower app (numpy)", fig["minimal"], ratio=False),
    ]
    for label in labels:
        for job, _ in JOBS:
            lines.append(_row(f"{label}: {job} rounds", fig[label][job]))
    lines += ["", f"Goal: each DepL phase at most {goal:g}x the minimal app's median."]
    for label in labels:
        verdicts = [f"{job} {fig[label][job]['ratio']:.2f}x "
                    f"({'met' if fig[label][job]['ratio'] <= goal else 'NOT met'})"
                    for job, _ in JOBS if fig[label][job].get("rounds")]
        lines.append(f"**{label}: {', '.join(verdicts)}.**")
    lines += ["", "Median seconds of each step of a DepL round (`rounds[].steps_s`; exchange = send the "
              "messages until the last reply is in):", ""]
    for label in labels:
        for job, _ in JOBS:
            if fig[label][job].get("rounds"):
                lines.append(_steps_line(f"{label}, {job}", fig[label][job]))
    lines += ["", "Per-round times (s), one group per run. Minimal: "
              + "; ".join(", ".join(f"{t:.2f}" for t in run) for run in fig["minimal"]["runs"]) + "."]
    for label in labels:
        for job, _ in JOBS:
            runs = fig[label][job]["runs"]
            lines.append(f"{label} {job}: " + "; ".join(", ".join(f"{t:.2f}" for t in run) for run in runs)
                         + ".")
    return "\n".join(lines) + "\n"


def _load() -> str:
    path = Path("/proc/loadavg")
    return " / ".join(path.read_text().split()[:3]) if path.exists() else "n/a"


def _time(args: argparse.Namespace, roots: dict[str, Path], overrides: list[str], work: Path, logs: Path
          ) -> tuple[list[list[float]], dict[str, dict[str, list[list[dict[str, Any]]]]]]:
    minimal: list[list[float]] = []
    depl: dict[str, dict[str, list[list[dict[str, Any]]]]] = {k: {j: [] for j, _ in JOBS} for k in roots}
    with federation(args.nodes, work, logs) as cli:
        for rep in range(args.repeats):
            for (job, phase), first in zip(JOBS, (True, False), strict=True):
                minimal.append(run_minimal(cli, work, logs, args.nodes, args.rounds))
                print(f"minimal: {[round(t, 2) for t in minimal[-1]]}", flush=True)
                for i, (label, root) in enumerate(roots.items()):
                    cache = work / f"cache-{i}-{rep}"
                    if first:
                        shutil.rmtree(cache, ignore_errors=True)
                    records = run_depl(root, cli, work, logs, [*overrides, f"profile.cache_dir={cache}"])
                    depl[label][job].append([r for r in records if r.get("phase", "train") == phase])
                    print(f"{label} {job}: {[round(r['wall_s'], 2) for r in depl[label][job][-1]]}",
                          flush=True)
    return minimal, depl


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the minimal app per run")
    parser.add_argument("--repeats", type=int, default=2, help="repeats of the four runs (alternating)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "deploy_rounds.md")
    parser.add_argument("--compare", type=Path, default=None,
                        help="also time the DepL app of this checkout (same federation)")
    parser.add_argument("--goal", type=float, default=1.1, help="goal: DepL median / minimal median")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("overrides", nargs="*", help="DepL Hydra overrides (added to the benchmark's)")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    for exe in ("flower-superlink", "flower-supernode", "flwr"):
        if not (BIN / exe).exists():
            print(f"deploy_round_bench: {exe} not found next to {sys.executable}", file=sys.stderr)
            return 2
    if args.compare is not None and not (args.compare / "pyproject.toml").is_file():
        print(f"deploy_round_bench: --compare {args.compare} holds no pyproject.toml", file=sys.stderr)
        return 2
    roots = {"DepL": ROOT}
    if args.compare is not None:
        roots[f"DepL at {_revision(args.compare)}"] = args.compare
    overrides = [*DEFAULT_DEPL, f"num_clients={args.nodes}", *args.overrides]
    work = Path(tempfile.mkdtemp(prefix="depl-round-bench."))
    logs = work / "logs"
    logs.mkdir()
    load_before = _load()
    try:
        minimal, depl = _time(args, roots, overrides, work, logs)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"deploy_round_bench: {exc} (logs in {work})", file=sys.stderr)
        return 1
    fig = summarize(minimal, depl)
    text = report(fig, args, overrides, (load_before, _load()), args.goal)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"command": f"python benchmarks/deploy_round_bench.py {' '.join(args.argv)}",
         "load_before": load_before, "overrides": overrides, "goal": args.goal, "figures": fig},
        indent=2) + "\n")
    print(text)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
