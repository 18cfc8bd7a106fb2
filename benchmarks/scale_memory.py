"""Peak memory of the DepL job of ``benchmarks/scale_bench.py``, a few fresh processes per checkout.

Each run is :func:`scale_bench.run_depl` (100 clients by default, the committed
``profile.json``) in a fresh process, whose peak RSS (``ru_maxrss``) is the
figure; the run also says whether torch's compiler (``torch._dynamo``) and
sympy were loaded, the modules whose import once added about 66 MB.

Usage: ``python benchmarks/scale_memory.py [--clients 100] [--runs 3] [--label after]
[--out benchmarks/results/scale/memory.json]`` adds this checkout's runs under
``--label`` to the JSON file (other labels in it stay) and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import json, logging, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/benchmarks")
logging.getLogger("flwr").setLevel(logging.ERROR)
import scale_bench
with tempfile.TemporaryDirectory() as tmp:
    row = scale_bench.run_depl(int(sys.argv[2]), sys.argv[3], Path(tmp))
print(json.dumps({"rounds": row["rounds"], "final_test_loss": row["final_test_loss"],
                  "rss_start_mb": row["rss_start_mb"], "peak_rss_mb": row["peak_rss_mb"],
                  "loaded": [m for m in ("torch._dynamo", "sympy") if m in sys.modules]}))
"""


def one_run(clients: int, profile: Path) -> dict[str, Any]:
    """One DepL job in a fresh process: peak RSS, rounds, final test loss, heavy modules loaded."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _RUN, str(ROOT), str(clients), str(profile)], env=env,
                          capture_output=True, text=True, check=True)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load_average": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--label", default="this checkout")
    results = ROOT / "benchmarks" / "results" / "scale"
    parser.add_argument("--profile", type=Path, default=results / "profile.json")
    parser.add_argument("--out", type=Path, default=results / "memory.json")
    args = parser.parse_args()
    if args.runs < 1 or args.clients < 1:
        parser.error("--runs and --clients must be at least 1")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    runs = [one_run(args.clients, args.profile) for _ in range(args.runs)]
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc[args.label] = {"commit": commit, "clients": args.clients, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc[args.label], indent=1))


if __name__ == "__main__":
    main()
