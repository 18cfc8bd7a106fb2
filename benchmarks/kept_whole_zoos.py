"""Both zoos' derivations in this checkout and another: what a change of the Check alters, network by network.

For every network of ``tests/user_nets.py`` and ``tests/user_nets_more.py``
(:data:`benchmarks.byom_zoo_bench.NETWORKS`, :data:`MORE_NETWORKS`) on 8x8
digits, at each set of compressions: the outcome of
:func:`depl_fl.task.variants.checked_variant_costs` (derived or its one-line
refusal), the groups kept whole, the compressed groups and the variants'
bytes, in one process per checkout and compressions. Writes
``benchmarks/results/byom_zoo/kept_whole_zoos.{md,json}``.

Usage: ``python benchmarks/kept_whole_zoos.py --before /tmp/base [--compressions 0,0.5,0.75 0,0.3,0.6,0.9]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom_zoo"

CHILD = """
import json, logging, sys
logging.disable(logging.WARNING)
import torch
torch.set_num_threads(1)
sys.path.insert(0, ".")
from benchmarks.byom_zoo_bench import NETWORKS, MORE_NETWORKS
from depl_fl.errors import ScenarioError
from depl_fl.task.geometry import TaskGeometry
from depl_fl.task.variants import checked_variant_costs
from depl_fl.task import subnets
cs = tuple(float(c) for c in sys.argv[1].split(","))
names = [("tests.user_nets", n) for n in NETWORKS]
names += [("tests.user_nets_more", n) for n in MORE_NETWORKS if "@" not in n]
out = {}
for module, name in names:
    geo = TaskGeometry(f"{module}:{name}", 10, 1, 8)
    try:
        costs = checked_variant_costs(geo, cs)
        try:  # the job's network: cut to its compressions where the code knows them
            from depl_fl.task.geometry import with_compressions
            geo = with_compressions(geo, cs)
        except ImportError:
            pass
        row = {"outcome": "derived", "sizes": [int(v.size_bytes) for v in costs.values()],
               "kept": [k.layer for k in subnets.kept_whole(geo)],
               "groups": [g.root for g in subnets.network_layout(geo).groups]}
    except ScenarioError as exc:
        row = {"outcome": "refused", "message": str(exc)}
    out[f"{module}:{name}"] = row
print(json.dumps(out))
"""


def derive(root: Path, compressions: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, compressions], cwd=root, capture_output=True,
                          text=True, timeout=1800, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    if proc.returncode != 0:
        raise SystemExit(f"{root}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--compressions", nargs="+", default=["0,0.5,0.75", "0,0.3,0.6,0.9"])
    args = parser.parse_args()
    doc, lines = {}, ["# Both zoos' derivations before and after a change of the Check", "",
                      "Per network of `tests/user_nets.py` and `tests/user_nets_more.py` on 8x8 digits: "
                      "`checked_variant_costs` (derived or refused), the groups kept whole, the compressed "
                      "groups and the variants' bytes, in this checkout (after) and another (before).", ""]
    for compressions in args.compressions:
        after, before = derive(ROOT, compressions), derive(args.before, compressions)
        changed = sorted(k for k in after if after[k] != before.get(k))
        derived = sum(r["outcome"] == "derived" for r in after.values())
        doc[compressions] = {"after": after, "before": before, "changed": changed}
        lines += [f"## Compressions {compressions}", "",
                  f"{len(after)} networks, {derived} derived and {len(after) - derived} refused after; "
                  f"{len(changed)} differ from before.", ""]
        if changed:
            lines += ["| network | before | after |", "|---|---|---|"]
            for name in changed:
                b, a = before.get(name, {}), after[name]
                lines.append(f"| `{name}` | {json.dumps(b)[:420].replace('|', '/')} "
                             f"| {json.dumps(a)[:420].replace('|', '/')} |")
            lines.append("")
    lines += [f"Command: `python benchmarks/kept_whole_zoos.py --before {args.before} --compressions "
              + " ".join(args.compressions) + "` (`--before`: a checkout of the code before the change)."]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kept_whole_zoos.json").write_text(json.dumps(doc, indent=1) + "\n")
    (OUT / "kept_whole_zoos.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
