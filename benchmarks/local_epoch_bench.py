"""Local-epoch wall time of every compression factor on the CIFAR-sized models.

One local epoch = ``train_local`` over ``--samples`` random 32x32x3 images
(batch 32, SGD), single-threaded torch (as a Flower client runs it). Each
variant is timed ``--repeats`` times (round-robin over the variants) after one
warm-up epoch; the median is
reported with the speed-up over the full model and the measured training
FLOPs per sample. Writes ``benchmarks/results/local_epoch.md`` and ``.json``.

Usage::

    python benchmarks/local_epoch_bench.py [--samples 256] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path

import numpy as np
import torch

from depl_fl.task.models import build_model
from depl_fl.task.training import train_local
from depl_fl.task.variants import measure_variant, variant_widths

ARCHS = ("alexnet_like", "mobilenet_like")
COMPRESSIONS = (0.0, 0.5, 0.75, 0.9)
RESULTS = Path(__file__).parent / "results"


def time_epochs(arch: str, x: np.ndarray, y: np.ndarray, repeats: int,
                batch_size: int) -> dict[float, list[float]]:
    """Seconds of ``repeats`` local epochs of every variant of ``arch``.

    Variants are timed round-robin (one epoch each per cycle, after one
    warm-up epoch each) so that load changes on a shared machine hit all of
    them alike.
    """
    models = {c: build_model(arch, 10, 3, 32, widths=variant_widths(arch, c), seed=0)
              for c in COMPRESSIONS}
    for model in models.values():  # warm-up
        train_local(model, x, y, epochs=1, lr=0.01, batch_size=batch_size, seed=0)
    times: dict[float, list[float]] = {c: [] for c in COMPRESSIONS}
    for r in range(repeats):
        for c, model in models.items():
            times[c].append(train_local(model, x, y, epochs=1, lr=0.01,
                                        batch_size=batch_size, seed=r + 1)[1])
    return times


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the result files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS / "local_epoch.md")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.samples, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, args.samples)
    rows = []
    for arch in ARCHS:
        base = None
        all_times = time_epochs(arch, x, y, args.repeats, args.batch_size)
        for c in COMPRESSIONS:
            times = all_times[c]
            median = statistics.median(times)
            base = median if base is None else base
            cost = measure_variant(arch, c, 10, 3, 32)
            rows.append({"arch": arch, "compression": c, "params": cost.params,
                         "train_flops_per_sample": cost.train_flops_per_sample,
                         "median_s": median, "min_s": min(times), "max_s": max(times),
                         "speedup": base / median})
            print(f"{arch:15s} c={c:<4} median {median:.3f}s speed-up x{base / median:.1f}", flush=True)

    lines = [
        "# Local-epoch time per compression factor",
        "",
        f"{args.samples} random 32x32x3 samples, batch {args.batch_size}, SGD, "
        f"torch.set_num_threads(1), median of {args.repeats} epochs (variants interleaved) "
        "after one warm-up. "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end "
        "(a shared machine inflates the noise, not the ratios' order of magnitude).",
        "",
        "| model | compression | params | train GFLOPs/sample | median s | min-max s | speed-up vs full |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['arch']} | {r['compression']} | {r['params']:,} | "
            f"{r['train_flops_per_sample'] / 1e9:.4f} | {r['median_s']:.3f} | "
            f"{r['min_s']:.3f}-{r['max_s']:.3f} | {r['speedup']:.1f}x |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(
        {"samples": args.samples, "batch_size": args.batch_size, "repeats": args.repeats,
         "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
