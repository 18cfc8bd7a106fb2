"""Time to derive a network's variants once per job (torch-pruning graph, layout, check, costs).

Each network runs in a fresh process (nothing cached): the time from the
network's factory to the scenario's ``models`` entries, i.e.
:func:`depl_fl.task.variants.checked_variant_costs` (dependency graph, per-
coordinate owners, one sub-network per variant, the forward check against the
silenced full network, FLOPs and bytes), torch single-threaded as a Flower
process runs it. Writes ``benchmarks/results/byom/derivation.{md,json}``;
``--networks KEY ...`` measures only those (keys below) and writes
``derivation_<keys>.{md,json}``.

Usage: ``python benchmarks/byom_derivation_bench.py [--repeats 3] [--networks vit_tiny]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom"
NETWORKS = {  # key: (name, arch, in_channels, image size)
    "resnet18": ("ResNet-18 (CIFAR, 11.2 M params)", "tests.user_nets:resnet18", 3, 32),
    "mobilenet_v2": ("MobileNetV2-style (tests)", "tests.user_nets:mobilenet_v2_tiny", 3, 32),
    "mobilenet_like": ("mobilenet_like (built-in)", "mobilenet_like", 3, 32),
    "alexnet_like": ("alexnet_like (built-in)", "alexnet_like", 3, 32),
    "digits_cnn": ("digits_cnn (built-in)", "digits_cnn", 1, 8),
    "vit_tiny": ("ViT-Tiny-sized (embed 192, 12 layers, 3 heads, FFN 768, patch 4)",
                 "tests.user_nets:vit_tiny", 3, 32),
}
#: What ``python benchmarks/byom_derivation_bench.py`` measures without ``--networks``.
DEFAULT = ("resnet18", "mobilenet_v2", "mobilenet_like", "alexnet_like", "digits_cnn")
COMPRESSIONS = (0.0, 0.5, 0.75)

CHILD = """
import json, sys, time, torch
torch.set_num_threads(1)
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.variants import checked_variant_costs
from depl_fl.task.subnets import network_layout
geo = TaskGeometry(sys.argv[1], 10, int(sys.argv[2]), int(sys.argv[3]))
import torch_pruning  # the library's own import, once per process, is left out
t0, c0 = time.perf_counter(), time.process_time()
costs = checked_variant_costs(geo, tuple(float(c) for c in sys.argv[4].split(',')))
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
layout = network_layout(geo)
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "groups": len(layout.groups),
                  "params": sum(int(torch.tensor(s).prod()) for s in layout.shapes.values()),
                  "costs": {str(c): [v.train_flops_per_sample, v.size_bytes] for c, v in costs.items()}}))
"""


def measure(arch: str, channels: int, size: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, arch, str(channels), str(size),
                           ",".join(str(c) for c in COMPRESSIONS)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--networks", nargs="+", choices=sorted(NETWORKS), default=None,
                        help="measure only these (default: every network but vit_tiny)")
    args = parser.parse_args()
    keys = tuple(args.networks) if args.networks else DEFAULT
    rows = []
    for key in keys:
        name, arch, channels, size = NETWORKS[key]
        runs = [measure(arch, channels, size) for _ in range(args.repeats)]
        last = runs[-1]
        rows.append({"network": name, "arch": arch, "input": f"{channels}x{size}x{size}",
                     "groups": last["groups"], "params": last["params"],
                     "seconds": [r["seconds"] for r in runs],
                     "median_s": statistics.median(r["seconds"] for r in runs),
                     "cpu_seconds": [r["cpu_seconds"] for r in runs],
                     "median_cpu_s": statistics.median(r["cpu_seconds"] for r in runs),
                     "costs": last["costs"]})
    lines = ["# Deriving a network's variants (once per job)", "",
             f"Variants {', '.join(str(c) for c in COMPRESSIONS)}; fresh process per run, torch "
             f"single-threaded; {args.repeats} runs per network. Machine: "
             f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
             f"{os.cpu_count()} cores, load average (1 min) {os.getloadavg()[0]:.1f} at the end.", "",
             "| network | input | channel groups | parameters | median wall s | median CPU s | wall runs (s) "
             "| size full / p50 / p75 (MB) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sizes = " / ".join(f"{r['costs'][str(c)][1] / 1e6:.3f}" for c in COMPRESSIONS)
        lines.append(f"| {r['network']} | {r['input']} | {r['groups']} | {r['params']:,} "
                     f"| {r['median_s']:.2f} "
                     f"| {r['median_cpu_s']:.2f} | {', '.join(f'{s:.2f}' for s in r['seconds'])} | {sizes} |")
    for key, r in zip(keys, rows, strict=True):
        if key in ("resnet18", "vit_tiny"):
            lines += ["", f"{r['network']} at 32x32: {r['median_s']:.2f} s wall, "
                      f"{r['median_cpu_s']:.2f} s CPU (target <= 5 s; the wall time includes any wait "
                      "for a busy core)."]
    selection = f" --networks {' '.join(keys)}" if args.networks else ""
    command = f"python benchmarks/byom_derivation_bench.py --repeats {args.repeats}{selection}"
    lines += ["", f"Command: `{command}`"]
    stem = "derivation" if not args.networks else "derivation_" + "_".join(keys)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    (OUT / f"{stem}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
