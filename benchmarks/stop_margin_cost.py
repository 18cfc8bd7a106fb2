"""CPU time of one bootstrap-t stop margin, on this checkout and on an earlier one, with equal margins.

The stop margin (:func:`depl_fl.tracking.split_margin.stop_margin`, 2,000
redraws) runs in every round whose validation loss is at or below the target.
This script times it on per-sample losses shaped like the synthetic
federations' validation splits (a right-skewed gamma sample of the split's
size, seeded; the test split's size beside it), in fresh processes that
alternate between the checkouts, and reports the least CPU milliseconds of
``--repeats`` calls per size and process, and whether both checkouts give the
same margin to the last bit for every size and seed.

Usage: ``python benchmarks/stop_margin_cost.py --before DIR [--sizes 3586:3538 13810:13659 36046:35552]
[--repeats 7] [--turns 3] [--out benchmarks/results/scale/roundtime]`` writes ``stop_margin_cost.json`` and
``stop_margin_cost.md`` there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python benchmarks/stop_margin_cost.py --before DIR"
#: Seeds of the losses and of the redraws (the margin's seed), each size.
SEEDS = (0, 1, 2)


def measure(sizes: list[tuple[int, int]], repeats: int) -> dict[str, Any]:
    """The margins of every size and seed, and the least CPU seconds of ``repeats`` calls per size."""
    import numpy as np

    from depl_fl.tracking.split_margin import stop_margin

    rows = []
    for n_val, n_test in sizes:
        margins = []
        for seed in SEEDS:
            losses = np.random.default_rng(seed).gamma(0.6, 1.0, n_val)
            margins.append(stop_margin(losses, n_test, 0.9, seed=seed))
        losses = np.random.default_rng(SEEDS[0]).gamma(0.6, 1.0, n_val)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.process_time()
            stop_margin(losses, n_test, 0.9, seed=SEEDS[0])
            best = min(best, time.process_time() - t0)
        rows.append({"validation": n_val, "test": n_test, "margins": margins, "cpu_s": best})
    return {"rows": rows, "load_average": os.getloadavg()[0]}


def _child(code: Path, sizes: str, repeats: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(code))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", sizes,
                           "--repeats", str(repeats)], env=env, cwd=code, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measuring on {code} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split():
        n_val, _, n_test = item.partition(":")
        sizes.append((int(n_val), int(n_test)))
    if not sizes or any(v < 2 or t < 1 for v, t in sizes):
        raise ValueError(text)
    return sizes


def write_outputs(doc: dict[str, Any], out: Path) -> Path:
    """``stop_margin_cost.json`` and ``stop_margin_cost.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "stop_margin_cost.json").write_text(json.dumps(doc, indent=1))
    codes = list(doc["codes"])
    lines = ["# CPU time of one stop margin (2,000 bootstrap-t redraws)", "",
             f"Regenerate: `{doc['command']}` (its docstring says what is timed). Least CPU ms of "
             f"{doc['repeats']} calls per process, {doc['turns']} processes per checkout taking turns; "
             "losses: a seeded gamma(0.6) sample of the validation split's size. Same margins: whether every "
             f"seed ({len(SEEDS)} seeds) gives the same margin on every checkout and in every turn, to the "
             "last bit.", "",
             "| validation / test samples | " + " | ".join(f"{c}, ms (least of the turns)" for c in codes)
             + " | change | same margins |", "|---|" + "---|" * (len(codes) + 2)]
    for i, size in enumerate(doc["sizes"]):
        best = {c: min(t["rows"][i]["cpu_s"] for t in doc["codes"][c]) for c in codes}
        same = len({json.dumps(t["rows"][i]["margins"]) for c in codes for t in doc["codes"][c]}) == 1
        change = (f"{100 * (best[codes[0]] / best[codes[1]] - 1):+.0f}%" if len(codes) > 1 else "-")
        lines.append(f"| {size[0]:,} / {size[1]:,} | " + " | ".join(f"{1000 * best[c]:.1f}" for c in codes)
                     + f" | {change} | {'yes' if same else 'NO'} |")
    loads = [t["load_average"] for c in codes for t in doc["codes"][c]]
    lines += ["", f"Load average (1 min, shared 2-core machine): {min(loads):.1f}-{max(loads):.1f}.", ""]
    path = out / "stop_margin_cost.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--sizes", default="3586:3538 13810:13659 36046:35552")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale" / "roundtime")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        sizes = _parse_sizes(args.measure if args.measure is not None else args.sizes)
    except ValueError:
        print(f"stop_margin_cost: --sizes wants VALIDATION:TEST pairs of positive counts, got {args.sizes!r}",
              file=sys.stderr)
        raise SystemExit(2) from None
    if args.measure is not None:
        print(json.dumps(measure(sizes, args.repeats)))
        return
    before = args.before.resolve() if args.before is not None else None
    if args.repeats < 1 or args.turns < 1 or (before is not None
                                              and not (before / "depl_fl" / "tracking").is_dir()):
        print(f"stop_margin_cost: need --repeats >= 1, --turns >= 1 and --before a checkout (got "
              f"{args.repeats}, {args.turns}, {args.before})", file=sys.stderr)
        raise SystemExit(2)
    codes = {"this checkout": ROOT} | ({"before": before} if before is not None else {})
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
    text = " ".join(f"{v}:{t}" for v, t in sizes)
    for _ in range(args.turns):
        for name, code in codes.items():
            turns[name].append(_child(code, text, args.repeats))
    doc = {"sizes": sizes, "repeats": args.repeats, "turns": args.turns, "codes": turns,
           "command": COMMAND}
    print(write_outputs(doc, args.out))


if __name__ == "__main__":
    main()
