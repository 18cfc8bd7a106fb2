"""Where DepL's server time per training round goes: the scale benchmark's parts and a cProfile of them.

Runs the DepL job of ``benchmarks/scale_bench.py`` (the same job, profile and
instrumentation) at one federation size twice, each in a fresh process: once
as the benchmark does, for the server's CPU milliseconds per training round
by named part, and once under :mod:`cProfile`, switched on when the first
training round is configured and off during every ClientApp call, so that it
sees only the server side of the training rounds (re-plans and plan checks
included, the start-up left out). The profiled run is slower than the plain
one (cProfile's own cost per call), so its functions are given as shares of
the profiled server time and as milliseconds per round of the profiled run.

Usage: ``python benchmarks/scale_round_profile.py [--clients 1000]
[--profile benchmarks/results/scale/profile.json] [--out benchmarks/results/scale] [--top 25]``
writes ``round_parts.json`` and ``round_parts.md`` there.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing as mp
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import scale_bench  # noqa: E402

COMMAND = "python benchmarks/scale_round_profile.py --clients {clients} --profile {profile}"


class ProfiledClock(scale_bench.Clock):
    """A :class:`scale_bench.Clock` running ``profiler`` from the first round on, not in ClientApp calls."""

    def __init__(self, profiler: cProfile.Profile) -> None:
        super().__init__()
        self.profiler = profiler

    def mark_setup(self) -> None:  # noqa: D102 - Clock API
        first = self.setup is None and self.started is not None
        super().mark_setup()
        if first:
            self.profiler.enable()

    def timed(self, part: str, fn):  # noqa: D102 - Clock API
        timed = super().timed(part, fn)
        if part != "client":
            return timed

        def client(*args, **kwargs):
            on = self.setup is not None
            if on:
                self.profiler.disable()
            try:
                return timed(*args, **kwargs)
            finally:
                if on:
                    self.profiler.enable()
        return client


def function_name(key: tuple[str, int, str]) -> str:
    """``path:line(function)`` with the path relative to the project or to ``site-packages``."""
    path, line, func = key
    if path == "~":
        return func
    text = str(path)
    for anchor in (str(ROOT) + os.sep, "site-packages" + os.sep):
        if anchor in text:
            text = text.split(anchor, 1)[1]
    return f"{text}:{line}({func})"


def top_functions(stats: dict, rounds: int, top: int) -> dict[str, Any]:
    """The ``top`` functions by own and by inclusive time: calls, ms per round, share of the total."""
    total = sum(v[2] for v in stats.values())

    def rows(index: int) -> list[dict[str, Any]]:
        ranked = sorted(stats.items(), key=lambda kv: kv[1][index], reverse=True)[:top]
        return [{"function": function_name(k), "calls_per_round": v[1] / rounds,
                 "own_ms_per_round": 1000 * v[2] / rounds, "inclusive_ms_per_round": 1000 * v[3] / rounds,
                 "share": (v[index] / total) if total > 0 else 0.0} for k, v in ranked]

    return {"profiled_ms_per_round": 1000 * total / rounds, "by_own": rows(2), "by_inclusive": rows(3)}


def profile_depl(clients: int, profile: str, out: Path, top: int) -> dict[str, Any]:
    """One DepL job under cProfile (server side of the training rounds only); its parts and functions."""
    profiler = cProfile.Profile()
    row = scale_bench.run_depl(clients, profile, out, clock=ProfiledClock(profiler))
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    return {"row": row, "functions": top_functions(stats, int(row["rounds"]), top)}


def _child(queue: Any, fn: str, args: tuple) -> None:
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)
    try:
        queue.put(globals()[fn](*args) if fn in globals() else getattr(scale_bench, fn)(*args))
    except BaseException as exc:  # the parent reports it
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def in_child(fn: str, *args: Any) -> Any:
    """``fn(*args)`` (of this module or ``scale_bench``) in a fresh process; raises on its error."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn, args))
    proc.start()
    result = queue.get()
    proc.join()
    if isinstance(result, dict) and "error" in result:
        raise RuntimeError(f"{fn}{args}: {result['error']}")
    return result


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parts_table(row: dict[str, Any]) -> list[str]:
    """The server's parts per round, largest first: ms and share of the server's time."""
    server = float(row["server_cpu_s_per_round"])
    lines = ["| part | CPU ms / round | share of the server's round |", "|---|---|---|"]
    for part, value in sorted(row["server_parts"].items(), key=lambda kv: kv[1], reverse=True):
        lines.append(f"| {part} | {1000 * value:.1f} | {value / server:.0%} |")
    lines.append(f"| **server** | **{1000 * server:.1f}** | 100% |")
    return lines


def functions_table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows of ranked functions as a markdown table."""
    lines = ["| function | calls / round | own ms / round | inclusive ms / round | share |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['function']}` | {r['calls_per_round']:.1f} | {r['own_ms_per_round']:.2f} "
                     f"| {r['inclusive_ms_per_round']:.2f} | {r['share']:.1%} |")
    return lines


def write_outputs(doc: dict[str, Any], out: Path) -> Path:
    """``round_parts.json`` and ``round_parts.md`` from one measurement."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "round_parts.json").write_text(json.dumps(doc, indent=1))
    plain, profiled = doc["plain"], doc["profiled"]["row"]
    funcs = doc["profiled"]["functions"]
    lines = [f"# DepL's server time per training round at {doc['clients']} clients, by part and function",
             "", f"Regenerate: `{doc['command']}` (commit {doc['commit']}; its docstring says what is "
             "timed). The DepL job of `benchmarks/scale_bench.py`, run twice in fresh processes: plainly "
             "(the parts) and under cProfile during the training rounds' server side only (the "
             "functions; cProfile's cost per call inflates them, so read their shares).", "",
             f"Plain run: {plain['rounds']} training rounds, {plain['clients_per_round']:.1f} clients per "
             f"round, {plain['replans']} re-plans ({plain['replans_infeasible']} infeasible; "
             f"{plain['replans_deferred']} deferred; {plain.get('replans_skipped', 0)} skipped after an "
             f"infeasible one), load average {plain['load_average']:.1f} (1 min, "
             f"shared 2-core machine).", "", "## Parts (plain run)", "", *parts_table(plain), "",
             f"## Functions (profiled run: {funcs['profiled_ms_per_round']:.1f} ms per round under cProfile, "
             f"{1000 * profiled['server_cpu_s_per_round']:.1f} ms by the parts' clock)", "",
             "By own time (without the functions they call):", "",
             *functions_table(funcs["by_own"]), "",
             "By inclusive time (with the functions they call):", "",
             *functions_table(funcs["by_inclusive"]), ""]
    path = out / "round_parts.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    results = ROOT / "benchmarks" / "results" / "scale"
    parser.add_argument("--profile", type=Path, default=results / "profile.json")
    parser.add_argument("--out", type=Path, default=results)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.clients < 1 or args.top < 1 or not args.profile.is_file():
        print(f"scale_round_profile: need --clients >= 1, --top >= 1 and an existing --profile "
              f"(got {args.clients}, {args.top}, {args.profile})", file=sys.stderr)
        raise SystemExit(2)
    with tempfile.TemporaryDirectory(prefix="scale-parts-") as tmp:
        plain = in_child("run_depl", args.clients, str(args.profile), Path(tmp) / "plain")
        profiled = in_child("profile_depl", args.clients, str(args.profile), Path(tmp) / "profiled", args.top)
    try:
        shown = args.profile.resolve().relative_to(ROOT)
    except ValueError:
        shown = args.profile
    doc = {"clients": args.clients, "commit": _commit(), "plain": plain, "profiled": profiled,
           "command": COMMAND.format(clients=args.clients, profile=shown)}
    print(write_outputs(doc, args.out))


if __name__ == "__main__":
    main()
