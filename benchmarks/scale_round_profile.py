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

Usage: ``python benchmarks/scale_round_profile.py [--clients 1000 [300 ...]]
[--profile benchmarks/results/scale/profile.json] [--out benchmarks/results/scale] [--top 25]
[--name round_parts]`` writes ``NAME.json`` and ``NAME.md`` there (several sizes: their parts side by
side, then a section per size).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import scale_bench  # noqa: E402

from benchmarks.lib.fresh_process import in_child  # noqa: E402

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


def write_outputs(doc: dict[str, Any], out: Path, name: str = "round_parts") -> Path:
    """``NAME.json`` and ``NAME.md`` from one measurement (one federation size)."""
    return write_sizes([doc], out, name)


def write_sizes(docs: list[dict[str, Any]], out: Path, name: str = "round_parts") -> Path:
    """``NAME.json`` and ``NAME.md`` from one measurement per federation size (a section each)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(docs[0] if len(docs) == 1 else {"sizes": docs}, indent=1))
    sizes = " and ".join(str(d["clients"]) for d in docs)
    command = docs[0]["command"] if len(docs) == 1 else COMMAND.format(
        clients=" ".join(str(d["clients"]) for d in docs), profile=docs[0]["profile"]) + f" --name {name}"
    lines = [f"# DepL's server time per training round at {sizes} clients, by part and function",
             "", f"Regenerate: `{command}` (commit {docs[0]['commit']}; its docstring says what is "
             "timed). The DepL job of `benchmarks/scale_bench.py`, run twice in fresh processes: plainly "
             "(the parts) and under cProfile during the training rounds' server side only (the "
             "functions; cProfile's cost per call inflates them, so read their shares).", ""]
    if len(docs) > 1:
        lines += [*parts_by_size(docs), ""]
    for doc in docs:
        lines += _size_lines(doc, "##" if len(docs) == 1 else "###", len(docs) > 1)
    path = out / f"{name}.md"
    path.write_text("\n".join(lines))
    return path


def parts_by_size(docs: list[dict[str, Any]]) -> list[str]:
    """The plain runs' parts side by side: CPU ms per round and share of the server's round."""
    parts = sorted({k for d in docs for k in d["plain"]["server_parts"]},
                   key=lambda k: -max(d["plain"]["server_parts"].get(k, 0.0) for d in docs))
    head = " | ".join(f"{d['clients']} clients: ms / round (share)" for d in docs)
    lines = ["## Parts per training round (plain runs)", "", f"| part | {head} |",
             "|---|" + "---|" * len(docs)]
    for part in parts:
        cells = []
        for d in docs:
            value, server = d["plain"]["server_parts"].get(part, 0.0), d["plain"]["server_cpu_s_per_round"]
            cells.append(f"{1000 * value:.1f} ({value / server:.0%})")
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    totals = " | ".join(f"**{1000 * d['plain']['server_cpu_s_per_round']:.1f}**" for d in docs)
    lines.append(f"| **server** | {totals} |")
    return lines


def _size_lines(doc: dict[str, Any], level: str, titled: bool) -> list[str]:
    plain, profiled = doc["plain"], doc["profiled"]["row"]
    funcs = doc["profiled"]["functions"]
    lines = [f"{level[:-1]} {doc['clients']} clients", ""] if titled else []
    return lines + [
        f"Plain run: {plain['rounds']} training rounds, {plain['clients_per_round']:.1f} clients per "
        f"round, {plain['replans']} re-plans ({plain['replans_infeasible']} infeasible; "
        f"{plain['replans_deferred']} deferred; {plain.get('replans_skipped', 0)} skipped after an "
        f"infeasible one), load average {plain['load_average']:.1f} (1 min, "
        f"shared 2-core machine).", "", f"{level} Parts (plain run)", "", *parts_table(plain), "",
        f"{level} Functions (profiled run: {funcs['profiled_ms_per_round']:.1f} ms per round under "
        f"cProfile, {1000 * profiled['server_cpu_s_per_round']:.1f} ms by the parts' clock)", "",
        "By own time (without the functions they call):", "",
        *functions_table(funcs["by_own"]), "",
        "By inclusive time (with the functions they call):", "",
        *functions_table(funcs["by_inclusive"]), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1000])
    results = ROOT / "benchmarks" / "results" / "scale"
    parser.add_argument("--profile", type=Path, default=results / "profile.json")
    parser.add_argument("--out", type=Path, default=results)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--name", default="round_parts", help="the output files' name (NAME.md, NAME.json)")
    args = parser.parse_args()
    if min(args.clients) < 1 or args.top < 1 or not args.profile.is_file() \
            or not args.name.replace("_", "").replace("-", "").isalnum():
        print(f"scale_round_profile: need --clients >= 1, --top >= 1, an existing --profile and a --name of "
              f"letters, digits, _ and - (got {args.clients}, {args.top}, {args.profile}, {args.name})",
              file=sys.stderr)
        raise SystemExit(2)
    try:
        shown = args.profile.resolve().relative_to(ROOT)
    except ValueError:
        shown = args.profile
    docs = []
    with tempfile.TemporaryDirectory(prefix="scale-parts-") as tmp:
        for n in args.clients:
            plain = in_child(scale_bench.run_depl, n, str(args.profile), Path(tmp) / f"plain-{n}")
            profiled = in_child(profile_depl, n, str(args.profile), Path(tmp) / f"profiled-{n}", args.top)
            command = COMMAND.format(clients=n, profile=shown)
            if args.name != "round_parts":
                command += f" --name {args.name}"
            docs.append({"clients": n, "commit": _commit(), "plain": plain, "profiled": profiled,
                         "command": command, "profile": str(shown)})
    print(write_sizes(docs, args.out, args.name))


if __name__ == "__main__":
    main()
