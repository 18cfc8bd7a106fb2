"""Benchmark: vectorised Monte Carlo of the loss semantics (20,000 trajectories x 200 rounds).

Run: ``python benchmarks/montecarlo_bench.py``; prints the median of 7 timed runs
after one warm-up, for docs/RESULTS.md.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import scenario_from_dict
from depl_fl.contract.semantics import simulate_final_losses


def _scenario():
    level = {"flops_per_s": 1e9, "joules_per_flop": 1e-9}
    return scenario_from_dict({
        "clusters": [{"id": "A", "levels": [level], "bytes_per_s": 1e6}],
        "clients": [{"id": f"c{i}", "cluster": "A", "num_samples": 100} for i in range(4)],
        "models": [{"id": "full", "flops_per_sample": 1e6, "size_bytes": 1e5},
                   {"id": "p50", "compression": 0.5, "flops_per_sample": 3e5, "size_bytes": 3e4}],
        "loss": {"initial": 2.3,
                 "run": {m: {"levels": [0.1, 1.0, 2.3], "mean": [0.0, 0.05, 0.2],
                             "std": [0.01, 0.02, 0.05]} for m in ("full", "p50")},
                 "switch": [{"from": "p50", "to": "full", "mean": 0.05, "std": 0.02}]},
    })


def main() -> None:
    scenario = _scenario()
    rounds = ([RoundDecision("p50", ("c0", "c1"), {"A": 0})] * 100
              + [RoundDecision("full", ("c0", "c1", "c2", "c3"), {"A": 0})] * 100)
    simulate_final_losses(scenario, rounds, 20_000, np.random.default_rng(0))  # warm-up
    times = []
    for seed in range(7):
        t0 = time.perf_counter()
        simulate_final_losses(scenario, rounds, 20_000, np.random.default_rng(seed))
        times.append(time.perf_counter() - t0)
    print(f"20,000 trajectories x 200 rounds: median {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
