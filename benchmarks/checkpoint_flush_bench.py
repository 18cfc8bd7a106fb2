"""What flushing the per-round files costs: a job's checkpoint and results.json, with and without fsync.

Reads a finished job's ``checkpoint.pkl`` and ``results.json`` and rewrites
both, as the server does after every round
(:func:`depl_fl.runs.checkpoint.atomic_write_bytes`), ``--repeats`` times
flushed (``fsync`` before the replace) and as many times not, in turns, into
a temporary folder beside the job (the same file system). Reports the mean
wall and CPU milliseconds of one round's two writes each way and the load
average.

Usage: ``python benchmarks/checkpoint_flush_bench.py JOB_DIR [--repeats 50] --out FILE.md`` (also
``FILE.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one_round(folder: Path, files: dict[str, bytes], durable: bool) -> tuple[float, float]:
    """Wall and CPU seconds of writing every file once."""
    from depl_fl.runs.checkpoint import atomic_write_bytes

    w0, c0 = time.perf_counter(), time.process_time()
    for name, data in files.items():
        atomic_write_bytes(folder / name, data, durable=durable)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, help="a finished job's folder (checkpoint.pkl, results.json)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    names = ("checkpoint.pkl", "results.json")
    if not all((args.job / n).is_file() for n in names) or args.repeats < 1:
        print(f"checkpoint_flush_bench: {args.job} must hold {' and '.join(names)}; --repeats >= 1",
              file=sys.stderr)
        raise SystemExit(2)
    files = {n: (args.job / n).read_bytes() for n in names}
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(dir=args.job, prefix=".flush-bench-") as tmp:
        for _ in range(args.repeats):
            for durable in (True, False):
                times[durable].append(one_round(Path(tmp), files, durable))
    rows = {("flushed" if d else "not flushed"): {"wall_ms": 1000 * statistics.mean(w for w, _ in t),
                                                  "cpu_ms": 1000 * statistics.mean(c for _, c in t)}
            for d, t in times.items()}
    load = os.getloadavg()[0]
    sizes = {n: len(b) for n, b in files.items()}
    command = (f"python benchmarks/checkpoint_flush_bench.py {args.job} --repeats {args.repeats} "
               f"--out {args.out}")
    lines = ["# The per-round writes with and without fsync", "",
             f"Regenerate: `{command}`. One round's two atomic writes (checkpoint.pkl {sizes[names[0]]} B, "
             f"results.json {sizes[names[1]]} B), {args.repeats} rounds each way in turns; "
             f"load average {load:.1f}.", "",
             "| writes | wall ms / round | CPU ms / round |", "|---|---|---|"]
    lines += [f"| {k} | {v['wall_ms']:.2f} | {v['cpu_ms']:.2f} |" for k, v in rows.items()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"sizes": sizes, "repeats": args.repeats,
                                                         "load_average": load, "rows": rows}, indent=1))
    print(args.out)


if __name__ == "__main__":
    main()
