"""Derive time with the Check's keep-whole search, against another checkout (before it), per network.

Each network runs in a fresh process (nothing cached), torch single-threaded:
the time of :func:`depl_fl.task.variants.checked_variant_costs` for the
variants 0, 0.5, 0.75 (dependency graph, layout, the groups kept whole, one
sub-network per variant, the forward check, FLOPs and bytes), or to its
one-line refusal. ``--before PATH`` measures the same networks in another
checkout too (a network its ``tests`` package lacks is left out there).
Writes ``benchmarks/results/byom_zoo/keep_whole_derive.{md,json}`` (``--tag NAME``: ``NAME.{md,json}``).

Usage: ``python benchmarks/keep_whole_bench.py [--before /tmp/base] [--repeats 3] [--tag NAME]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom_zoo"
sys.path.insert(0, str(ROOT))
from benchmarks.byom_zoo_bench import NETWORKS as ZOO  # noqa: E402

#: (factory, in_channels, image size): the derivation benchmark's ResNet-18, the quickstart ``Net`` at
#: 32x32, twelve breaking groups in a row, networks breaking at some widths, then the zoo on 8x8 digits.
CASES = [("tests.user_nets:resnet18", 3, 32), ("tests.user_nets:quickstart_net", 3, 32),
         ("tests.user_nets:hard_coded_stack_net", 1, 8), ("tests.user_nets:quickstart_net_8", 1, 8),
         ("tests.user_nets:channel_shuffle_net", 1, 8),
         # a forward that runs at some compressions only (6 channel blocks; blocks of 4 channels)
         ("tests.user_nets_more:six_block_net", 1, 8), ("tests.user_nets_more:four_channel_blocks_net", 1, 8),
         *((f"tests.user_nets:{name}", 1, 8) for name in ZOO if name not in ("quickstart_net_8",
                                                                            "channel_shuffle_net"))]
COMPRESSIONS = "0.0,0.5,0.75"

CHILD = """
import json, sys, time, torch
torch.set_num_threads(1)
import torch_pruning  # the library's own import, once per process, is left out
from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.variants import checked_variant_costs
from depl_fl.task import subnets
geo = TaskGeometry(sys.argv[1], 10, int(sys.argv[2]), int(sys.argv[3]))
try:
    subnets.full_network(geo)
except ScenarioError:
    print(json.dumps({"missing": True})); sys.exit(0)
t0 = time.perf_counter()
try:
    costs = checked_variant_costs(geo, tuple(float(c) for c in sys.argv[4].split(',')))
    outcome, sizes = "derived", [int(v.size_bytes) for v in costs.values()]
except ScenarioError as exc:
    outcome, sizes = "refused", []
seconds = time.perf_counter() - t0
try:  # the job's network: cut to its compressions where the code knows them
    from depl_fl.task.geometry import with_compressions
    geo = with_compressions(geo, tuple(float(c) for c in sys.argv[4].split(',')))
except ImportError:
    pass
try:  # the code before the keep-whole search has no kept_whole; a network refused earlier keeps nothing
    kept = [k.layer + "".join(f" (at {c:g})" for c in getattr(k, "at", ())) for k in subnets.kept_whole(geo)]
except (AttributeError, ScenarioError):
    kept = []
print(json.dumps({"seconds": seconds, "outcome": outcome, "sizes": sizes, "kept": kept}))
"""


def measure(root: Path, arch: str, channels: int, size: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, arch, str(channels), str(size), COMPRESSIONS],
                          cwd=root, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    if proc.returncode != 0:
        raise SystemExit(f"{arch} in {root}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(results: list[dict]) -> dict | None:
    """The last run with the median time of all (None where the checkout lacks the network)."""
    if results[0].get("missing"):
        return None
    return {**results[-1], "seconds": statistics.median(r["seconds"] for r in results)}


def runs(roots: dict[str, Path], case: tuple[str, int, int], repeats: int) -> dict[str, dict | None]:
    """Each checkout's runs of ``case``, interleaved (after, before, after, ...): load shifts hit both."""
    results: dict[str, list[dict]] = {name: [] for name in roots}
    for _ in range(repeats):
        for name, root in roots.items():
            results[name].append(measure(root, *case))
    return {name: summary(found) for name, found in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to measure the same networks in")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--tag", default="keep_whole_derive", help="write NAME.{md,json}")
    parser.add_argument("--networks", nargs="+", help="only these networks (names without the module)")
    args = parser.parse_args()
    roots = {"after": ROOT, **({"before": args.before} if args.before else {})}
    rows = []
    for case in CASES:
        if args.networks and case[0].partition(":")[2] not in args.networks:
            continue
        row = {"network": case[0].partition(":")[2], "input": f"{case[1]}x{case[2]}x{case[2]}",
               "before": None, **runs(roots, case, args.repeats)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = ["# Derive time with the keep-whole search", "",
             "Per network, in a fresh process, torch single-threaded: `checked_variant_costs` for the "
             f"variants {COMPRESSIONS.replace(',', ', ')} (graph, layout, groups kept whole, sub-networks, "
             "forward check, FLOPs and bytes) or the time to its refusal. Median of "
             f"{args.repeats} run(s) per network, the two checkouts' runs interleaved; the machine is shared "
             "(2 cores), so differences under about 0.1 s are noise.", "",
             "| network | input | before: s | before | after: s | after | kept whole "
             "| bytes full / p50 / p75 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, a = r["before"], r["after"]
        before = "" if b is None else format(b["seconds"], ".2f")
        lines.append(f"| `{r['network']}` | {r['input']} | {before} "
                     f"| {'' if b is None else b['outcome']} | {a['seconds']:.2f} | {a['outcome']} "
                     f"| {', '.join(a['kept'])} | {' / '.join(f'{s:,}' for s in a['sizes'])} |")
    command = "python benchmarks/keep_whole_bench.py" + (f" --before {args.before}" if args.before else "") \
        + (f" --repeats {args.repeats}" if args.repeats != 1 else "") \
        + (f" --tag {args.tag}" if args.tag != "keep_whole_derive" else "") \
        + (" --networks " + " ".join(args.networks) if args.networks else "")
    lines += ["", f"Command: `{command}` (`--before`: a checkout of the code before the change measured)."]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.tag}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (OUT / f"{args.tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
